"""Trials that look like use: two calls per trial (the second after part of the inputs changed in place), one
trial with grad enabled, shifted means, ties, all-negative and masked rows, a plain torch.Tensor out, and tasks
that cannot tell a constant apart. Each cheat below passed the trials before them. Through the evaluator a
cheat may be refused by the static rules first (a Tensor subclass, a grad-mode query); verify_probe.py runs
every cheat past them, so each runtime check is shown to catch its cheat on its own."""
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from tools.compare import Failed
from tools.inputs import CHANGED_FRACTION, MASK, Draw, change_part, draw_seed, make_inputs, with_finite_mask
from tools.results import EvalJob, TaskSpec
from tools.verify import _check_plain_tensors

FIXTURES = Path(__file__).parent / "fixtures"

# candidate, task, expected verdict, fragments the reason must contain (fixtures/cases.toml)
CASES = [(c["candidate"], c["task"], c["verdict"], c["reason"])
         for c in tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]
         if c["test"] == "test_trials.py::test_verdict"]


@pytest.fixture(scope="module")
def results(warm_executor):
    jobs = [EvalJob(TaskSpec(str(FIXTURES / task)), (FIXTURES / "candidates" / candidate).read_text(), trials=3,
                    profile=False) for candidate, task, _, _ in CASES]
    return warm_executor.map(jobs)


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_verdict(results, i):
    _, _, verdict, fragments = CASES[i]
    r = results[i]
    if verdict != "correct" and r.reason.startswith("Rejected (") and r.verdict == "rejected":
        return  # a static rule refused it before it ran; test_runtime_checks_alone shows the trials catch it
    assert r.verdict == verdict and all(f in r.reason for f in fragments), r.reason


@pytest.fixture(scope="module")
def probed():
    cases = [[str(FIXTURES / task), str(FIXTURES / "candidates" / candidate)] for candidate, task, _, _ in CASES]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parents[2]))
    run = subprocess.run([sys.executable, str(Path(__file__).with_name("verify_probe.py")), json.dumps(cases)],
                         env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("i", range(len(CASES)), ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_runtime_checks_alone(probed, i):
    _, _, verdict, fragments = CASES[i]
    r = probed[i]
    assert r["verdict"] == verdict and all(f in r["reason"] for f in fragments), r["reason"]


def test_a_task_that_cannot_discriminate_is_a_task_error(results):
    r = results[[c[1] for c in CASES].index("task_constant.py")]
    assert r.task_error and r.timing is None


def test_a_constant_in_the_math_is_judged_and_named(results):
    """task_zero_spread.py is zero for every input, also in float64: a kernel that writes zeros is correct, and
    the reason says why (task_constant.py only rounds to a constant in fp32 and stays a task error)."""
    r = results[[c[1] for c in CASES].index("task_zero_spread.py")]
    assert r.verdict == "correct" and "the task's output is a constant" in r.reason, r.reason


def test_a_mean_that_only_the_trials_patterns_move_is_judged(warm_executor):
    """A bf16 mean of 16,384 sigmoids moves by under the tolerance between two draws of one kind, but from the
    plain trial to the shifted one it goes from 0.5 to 0.93: a constant cannot pass the trials, so the task is
    judged (it was a task error), the template's kernel is correct and a constant 0.5 is not."""
    from agent.analysis import analyze
    from agent.templates import matching
    task = str(FIXTURES / "task_mean_loss.py")
    a = analyze(task, small=True)
    honest = matching(a)[0].render(a, matching(a)[0].default(a))
    jobs = [EvalJob(TaskSpec(task, dtype="bfloat16"), source, trials=3, profile=False)
            for source in (honest, (FIXTURES / "candidates" / "constant_loss.py").read_text())]
    good, cheat = warm_executor.map(jobs)
    assert good.verdict == "correct", good.reason
    # which trial catches it depends on the trial seed drawn: the shifted one, or a plain one widened x100, or a
    # plain one where 0.5 is off the mean by more than the lean rule's unit of roundoff; and where a trial's first
    # call passes, its second (part of the inputs changed in place) returns the same constant, which is named
    # stale output (rejected) rather than a wrong result (incorrect)
    assert cheat.verdict in ("incorrect", "rejected") and re.search(r"shifted inputs|widened|leans one way",
                                                                     cheat.reason), cheat.reason


def test_a_lazy_subclass_is_refused_by_the_runtime_check_itself():
    """Whatever the static rules say of the source, the trial refuses an output that is not a plain Tensor."""
    class Lazy(torch.Tensor):
        pass

    _check_plain_tensors(torch.zeros(3))
    _check_plain_tensors((torch.zeros(3), [torch.ones(2)], 4))
    for out in (torch.zeros(3).as_subclass(Lazy), (torch.zeros(3), torch.nn.Parameter(torch.zeros(2)))):
        with pytest.raises(Failed, match="not a plain torch.Tensor") as e:
            _check_plain_tensors(out)
        assert e.value.verdict == "rejected"


def _setup(task_source: str, dtype=None):
    namespace: dict = {}
    exec(task_source, namespace)
    return SimpleNamespace(task=SimpleNamespace(**namespace), device=torch.device("cpu"), dtype=dtype)


ROWS = "import torch\ndef get_inputs():\n    return [torch.randn(12, 40), torch.arange(5)]\n"


def test_patterns_shape_float_inputs_only():
    setup = _setup(ROWS)
    masked = make_inputs(setup, Draw(5, pattern="masked"))[0]
    assert (masked == float("-inf")).any(dim=1).sum() == 1  # one row masked in a suffix
    assert (masked == MASK).all(dim=1).sum() == 1  # one row fully masked
    assert ((masked < 0).all(dim=1) & torch.isfinite(masked).all(dim=1) & (masked > MASK).all(dim=1)).sum() >= 1
    with_finite_mask([masked])
    assert torch.isfinite(masked).all()
    shifted, index = make_inputs(setup, Draw(5, pattern="shifted"))
    assert shifted.mean() > 2.0 and torch.equal(index, torch.arange(5))
    tied = [row for row in shifted if (row == row.max()).sum() > 1]
    assert len(tied) >= 4  # a third of the rows repeat their largest value
    assert make_inputs(setup, Draw(5, pattern="plain", scale=4.5))[0].std() > 3.0
    assert (masked == 0).all(dim=1).sum() == 1  # one row of zeros, a padded row
    assert ((masked.abs() < 0.05) & (masked != 0)).all(dim=1).sum() == 1  # and one quiet row, x1e-3


def test_a_row_of_zeros_stays_only_where_the_reference_stays_finite():
    """A normalization with eps keeps a row of zeros finite, and the masked trial holds one (a kernel without
    eps made NaN there and passed); one that divides by the norm itself would be NaN, and the row goes."""
    from tools.guard import LaunchRecorder
    from tools.verify import trial_inputs
    setup = _setup(ROWS)
    setup.launches = LaunchRecorder()
    for divide, zero_rows in ((torch.nn.functional.normalize, 1), (lambda x: x / x.norm(dim=1, keepdim=True), 0)):
        setup.reference = lambda x, index: divide(x)
        x = trial_inputs(setup, Draw(5, pattern="masked"))[0]
        assert (x == 0).all(dim=1).sum() == zero_rows


def test_a_candidate_that_changes_the_reference_s_state_is_rejected():
    """A kernel that writes past its own tensors can reach the reference's weights (the same values as its
    own, so they can be found) and make the reference compute what it does; the weights are compared after
    each of its calls."""
    from tools.compare import TOLERANCES
    from tools.guard import LaunchRecorder
    from tools.verify import Setup, verify
    class Linear(torch.nn.Linear):
        def forward(self, x, index):
            return super().forward(x)

    class Rewrites(torch.nn.Module):
        def forward(self, x, index):
            with torch.no_grad():
                reference.weight.mul_(0)
            setup.launches.count += 1  # its kernel's launch, in a process without the Triton interpreter
            return reference(x, index)

    reference = Linear(40, 8)
    task = SimpleNamespace(get_inputs=lambda: [torch.randn(12, 40), torch.arange(5)])
    setup = Setup(task, reference, Rewrites(), torch.device("cpu"), None, TOLERANCES[torch.float32], [],
                  LaunchRecorder())
    with pytest.raises(Failed, match="changed the reference module's state") as e:
        verify(setup, trials=1)
    assert e.value.verdict == "rejected"


def test_tied_rows_are_made_a_block_at_a_time(monkeypatch):
    """Rows are tied in blocks (one row per block here), with the same result as whole: on an H200 a row-by-row
    loop took 111 s of a 1.9-billion-element task's verification (3.7 million rows of 512)."""
    from tools import inputs
    setup = _setup("import torch\ndef get_inputs():\n    return [torch.randn(3000, 5)]\n")
    whole = make_inputs(setup, Draw(9, pattern="shifted"))[0]
    monkeypatch.setattr(inputs, "TIE_BLOCK", 5)
    by_row = make_inputs(setup, Draw(9, pattern="shifted"))[0]
    assert torch.equal(whole, by_row)
    tied = (torch.round(whole / inputs.TIE_STEP) * inputs.TIE_STEP == whole).all(dim=1)
    assert int(tied.sum()) >= 1000 and ((whole[tied] == whole[tied].amax(dim=1, keepdim=True)).sum(dim=1) >= 2).all()


def test_patterns_keep_the_dtype_and_strides_the_task_gives():
    setup = _setup("import torch\ndef get_inputs():\n    return [torch.randn(40, 12).t()]\n", torch.bfloat16)
    x = make_inputs(setup, Draw(1, pattern="masked"))[0]
    assert x.dtype == torch.bfloat16 and x.stride() == (1, 12)


def test_the_second_call_sees_a_part_of_each_input_changed():
    setup = _setup(ROWS)
    x, index = make_inputs(setup, Draw(9))
    before = x.clone()
    change_part([x, index], seed=9)
    changed = (x != before).sum().item()
    assert 0 < changed <= x.numel() // CHANGED_FRACTION and torch.equal(index, torch.arange(5))


def test_trial_seeds_are_drawn_unpredictably_and_replay_exactly():
    assert len({draw_seed() for _ in range(8)}) > 1
    setup = _setup(ROWS)
    seed = draw_seed()
    first = make_inputs(setup, Draw(seed, pattern="shifted"))[0]
    assert torch.equal(first, make_inputs(setup, Draw(seed, pattern="shifted"))[0])
    assert not torch.equal(first, make_inputs(setup, Draw(seed + 1, pattern="shifted"))[0])


def test_a_reported_trial_seed_reproduces_the_failure(warm_executor):
    """The seed a failure names, given back as trial_seed, draws the same inputs: the same verdict and reason."""
    source = (FIXTURES / "candidates" / "argmax_last_on_ties.py").read_text()
    spec = TaskSpec(str(FIXTURES / "task_argmax.py"))
    first = warm_executor.submit(EvalJob(spec, source, trials=3, profile=False)).result()
    seed = int(first.reason.rsplit("trial seed ", 1)[1].rstrip(").").strip())
    again = warm_executor.submit(EvalJob(spec, source, trials=3, profile=False, trial_seed=seed)).result()
    assert first.verdict == "incorrect" and again.reason == first.reason


def test_a_task_with_no_tensor_to_judge_is_a_task_error(warm_executor, tmp_path):
    """An empty output, or a forward that returns a Python number: the task's fault in one sentence, where the
    empty input once crashed the masked pattern and read as the candidate's crash."""
    number = tmp_path / "task_number.py"
    number.write_text((FIXTURES / "task_identity.py").read_text().replace("return x.clone()", "return float(x[0])"))
    candidate = (FIXTURES / "candidates" / "honest_identity.py").read_text()
    empty, scalar = warm_executor.map([
        EvalJob(TaskSpec(str(FIXTURES / "task_identity.py"), shapes={"n": 0}), candidate, trials=3, profile=False),
        EvalJob(TaskSpec(str(number)), candidate, trials=3, profile=False)])
    assert empty.task_error and "output 0 has no elements (shape (0,))" in empty.reason, empty.reason
    assert scalar.task_error and "returns a Python number, not a tensor" in scalar.reason, scalar.reason


def test_probabilities_keep_their_range_through_the_trials(warm_executor, tmp_path):
    """Binary cross-entropy raises on a target outside [0, 1]: its trials keep get_inputs()' values (a shifted
    trial was a task error), and a task error on scaled inputs names the scale_inputs switch."""
    from agent.analysis import analyze
    from agent.templates import matching
    source = ("import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n\n\n"
              "class Model(nn.Module):\n    def forward(self, logits, target):\n{body}\n\n"
              "def get_inputs():\n    return [torch.randn(6, 37), torch.rand(6, 37)]\n\n\n"
              "def get_init_inputs():\n    return []\n")
    task, checked = tmp_path / "task_bce.py", tmp_path / "task_checked.py"
    task.write_text(source.format(body="        return F.binary_cross_entropy(torch.sigmoid(logits), target, "
                                       "reduction='none')\n"))
    checked.write_text(source.format(body=(  # the same math, the range checked by the task's own code
        "        if bool((target > 1).any()):\n            raise ValueError('a target past 1')\n"
        "        p = torch.sigmoid(logits)\n"
        "        return -(target * torch.log(p) + (1 - target) * torch.log(1 - p))\n")))
    a = analyze(str(task), small=True)
    honest = matching(a)[0].render(a, matching(a)[0].default(a))
    twin = honest.replace(task.read_text(), checked.read_text())  # a candidate carries its task's source
    good, told = warm_executor.map([EvalJob(TaskSpec(str(task)), honest, trials=3, profile=False),
                                    EvalJob(TaskSpec(str(checked)), twin, trials=3, profile=False)])
    assert good.verdict == "correct", good.reason
    assert told.task_error and "a target past 1" in told.reason and "set scale_inputs = false" in told.reason, \
        told.reason


def test_a_float64_output_is_judged_to_float64_s_tolerance(warm_executor, tmp_path):
    """A float64 task's kernel that computes in float32 is 1e-7 off: it passed at fp32's tolerance, the only one
    the evaluator applied; at float64's only a float64 computation passes."""
    task = tmp_path / "task_f64.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                    "        return torch.exp(x) * 2.5 + 1.0\n\n\ndef get_inputs():\n"
                    "    return [torch.randn(1000, dtype=torch.float64)]\n\n\ndef get_init_inputs():\n    return []\n")
    kernel = ("import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n\n\n@triton.jit\n"
              "def k(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
              "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
              "    x = tl.load(x_ptr + offs, mask=offs < n){cast}\n"
              "    tl.store(y_ptr + offs, tl.exp(x) * 2.5 + 1.0, mask=offs < n)\n\n\nclass ModelNew(nn.Module):\n"
              "    def forward(self, x):\n        y = torch.empty_like(x)\n"
              "        k[(triton.cdiv(x.numel(), 256),)](x, y, x.numel(), BLOCK=256)\n        return y\n")
    single, double = warm_executor.map([
        EvalJob(TaskSpec(str(task)), kernel.format(cast=".to(tl.float32)"), trials=2, profile=False),
        EvalJob(TaskSpec(str(task)), kernel.format(cast=""), trials=2, profile=False)])
    assert single.verdict == "incorrect" and "bound 1e-10" in single.reason, single.reason
    assert double.verdict == "correct", double.reason


def test_each_timed_run_of_a_candidate_sees_its_inputs_changed():
    """A result memoized under a hash of all the inputs was right at every verification (each changes them) and
    cost only the hash in the timing loop, which called it on the same inputs: now one element of each floating
    input moves before each timed run, outside its time."""
    from tools.inputs import Nudge
    from tools.profile import time_call
    x, index = torch.randn(40, 12), torch.arange(5)
    seen = []
    time_call(lambda: seen.append(x.clone()), torch.device("cpu"), target_ms=5.0, before_each=Nudge([x, index], 3))
    timed = seen[1:]  # the first call warms up
    assert len(timed) >= 3 and all(not torch.equal(a, b) for a, b in zip(timed, timed[1:]))
    assert torch.equal(index, torch.arange(5))


def test_new_parameter_values_reach_the_candidate_by_name():
    """The reference's parameters move from what the constructor drew (a norm's ones and zeros too) and the
    candidate's tensors of the same names take the same values; a candidate with no such tensor cannot take a
    trained model's values, and says so."""
    from tools.worker import vary_state
    torch.manual_seed(0)
    reference, twin = torch.nn.LayerNorm(7), torch.nn.LayerNorm(7)
    assert vary_state(reference, twin, seed=1) is None
    assert torch.equal(reference.weight, twin.weight) and torch.equal(reference.bias, twin.bias)
    assert not torch.equal(reference.weight, torch.ones(7)) and not torch.equal(reference.bias, torch.zeros(7))
    assert (reference.weight >= 0.5).all() and (reference.weight <= 1.5).all()
    other = torch.nn.Module()
    other.scale = torch.nn.Parameter(torch.ones(7))
    assert "holds no tensor weight of shape (7,)" in vary_state(torch.nn.LayerNorm(7), other, seed=1)
