"""The timing rule every GPU time follows (tools/profile.steadier): a measurement spread wider than
RETIME_SPREAD is taken once more and the steadier of the two kept; a steady one is kept as it is."""
from tools.profile import RETIME_SPREAD, Measured, steadier


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
