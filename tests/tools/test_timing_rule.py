"""The timing rule every GPU time follows (tools/profile.steadier): a measurement spread wider than
RETIME_SPREAD is taken once more and the steadier of the two kept; a steady one is kept as it is. The GPU is kept
busy ahead of each timed call for as long as the host takes to launch it (tools/profile.head_start_ms). The L2
state the flush leaves is one of two named ones."""
import pytest
import torch

from tools.profile import HEAD_START_MAX_MS, RETIME_SPREAD, Measured, head_start_ms, steadier, time_call


def runs(*measured: Measured):
    """A run function returning these measurements in turn, and the list of those it returned."""
    given = []

    def run() -> Measured:
        given.append(measured[len(given)])
        return given[-1]
    return run, given


def test_a_noisy_measurement_is_taken_again_and_the_steadier_kept():
    noisy, steady = Measured(0.0705, 31.8, 40), Measured(0.0390, 3.1, 40)
    run, given = runs(noisy, steady)
    assert steadier(run) is steady and len(given) == 2


def test_a_second_run_no_steadier_than_the_first_leaves_the_first():
    first, worse = Measured(0.0500, RETIME_SPREAD + 5, 40), Measured(0.0300, RETIME_SPREAD + 20, 40)
    run, given = runs(first, worse)
    assert steadier(run) is first and len(given) == 2


def test_a_steady_measurement_is_not_retaken():
    steady = Measured(0.0400, RETIME_SPREAD, 40)
    run, given = runs(steady, Measured(0.0100, 0.0, 40))
    assert steadier(run) is steady and len(given) == 1


def test_the_head_start_covers_the_hosts_launch_time_up_to_its_cap():
    assert 0.05 < head_start_ms(0.03) < 0.1
    assert head_start_ms(0.5) > 0.5
    assert head_start_ms(50.0) == HEAD_START_MAX_MS


def test_an_unknown_l2_state_is_refused_before_anything_is_timed():
    calls = []
    with pytest.raises(ValueError, match="l2 must be one of dirty, clean"):
        time_call(lambda: calls.append(1), torch.device("cpu"), l2="warm")
    assert calls == []
