"""A reference that torch.compile cannot run has no compile baseline, and the result says why (tools/measure.py)."""
import torch

from tools.compare import TOLERANCES
from tools.measure import _compiled_ms
from tools.verify import Setup


class Refuses(torch.nn.Module):
    """Fails under torch.compile (and eagerly too: what matters is the reason carried, in one line)."""

    def forward(self, x):
        raise ValueError("this reference does not compile\nsecond line")


def test_the_compile_error_is_kept_in_one_line():
    setup = Setup(None, Refuses(), None, torch.device("cpu"), None, TOLERANCES[torch.float32], [], None)
    ms, why = _compiled_ms(setup, [torch.ones(4)])
    assert ms is None
    assert why.endswith("this reference does not compile") and "second line" not in why


def test_eval_says_why_torch_compile_gave_no_time():
    from tools.cli_eval import summary
    from tools.results import Baselines, EvalResult, Timing
    timing = Timing(1.0, 2.0, None, None, 2.0, None, None, 0.5, False)
    r = EvalResult("correct", "Correct on every trial.", timing=timing,
                   baselines=Baselines(2.0, None, "NVIDIA H200", "BackendCompilerFailed: out of resource"))
    assert "torch.compile gave no time: BackendCompilerFailed: out of resource" in summary(r)
