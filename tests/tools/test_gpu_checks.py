"""What only a GPU shows (tools/gpu_checks.py): the rule over the device's activity trace and the race check run
here on plain data and plain modules; the trace itself, and a racing kernel, need a GPU (marked `gpu`). The
precision flags the evaluator fixes are checked after every candidate call, on any device."""
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from torch.autograd import DeviceType

from tools.compare import TOLERANCES, Failed, compare
from tools.gpu_checks import DeviceWork, check_repeatable, judge_activity, kernel_times
from tools.verify import Checked

FIXTURES = Path(__file__).parent / "fixtures"
TRITON = {"softmax_kernel"}
GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32_warpgroupsize1x1_execute_segment_k_off_kernel"


def _kernel(name, *ops):
    return DeviceWork(name, "kernel", tuple(ops))


@pytest.mark.parametrize("work,declared,fragment", [
    ([_kernel("softmax_kernel")], [], None),
    ([_kernel(GEMM, ("aten::mm", "default"), ("aten::matmul", "default"))], ["aten.mm"], None),
    ([_kernel(GEMM, ("aten::mm", "default"))], ["aten.mm.default"], None),
    ([_kernel("vectorized_elementwise_kernel<FillFunctor>", ("aten::fill_", "Scalar"), ("aten::zero_", "default"),
              ("aten::zeros", "default"))], [], None),
    ([_kernel(GEMM, ("aten::mm", "default"))], [], "from aten::mm"),
    ([_kernel(GEMM, ("aten::mm", "out"))], ["aten.mm.default"], "from aten::mm"),  # overloads match exactly
    ([_kernel(GEMM, ("evil::mm", "default"))], ["aten.mm"], "from evil::mm"),  # namespaces too, never a prefix
    ([_kernel(GEMM, ("aten::mm_evil", ""))], ["aten.mm"], "from aten::mm_evil"),
    ([_kernel("softmax_kernel"), _kernel("cunn_SoftMaxForward", ("aten::_softmax", ""), ("aten::softmax", ""))],
     [], "from aten::_softmax"),  # work hidden in a launch callback still shows on the device
    ([_kernel("softmax_kernel_v2")], [], "outside any op"),
    ([DeviceWork("Memcpy DtoH (Device -> Pageable)", "memcpy"), _kernel("softmax_kernel")], [], "Memcpy DtoH"),
    ([DeviceWork("Memcpy DtoD (Device -> Device)", "memcpy", (("aten::copy_", ""),)), _kernel("softmax_kernel")],
     [], None),
])
def test_device_activity_rule(work, declared, fragment):
    problem = judge_activity(work, TRITON, declared)
    assert (problem is None) if fragment is None else (fragment in (problem or "")), problem


class _Noisy(torch.nn.Module):
    def forward(self, x):
        return x + 1e-2 * torch.rand_like(x)  # stands for programs racing: another answer each run


class _Steady(torch.nn.Module):
    def forward(self, x):
        return x * 2


def _setup(model, reference=None):
    """A CPU evaluation's setup: `model` the candidate, judged against `reference` (x * 2 by default)."""
    from tools.guard import LaunchRecorder
    from tools.verify import Setup
    return Setup(None, reference or _Steady(), model, torch.device("cpu"), None, TOLERANCES[torch.float32], [],
                 LaunchRecorder())


@dataclass
class Event:
    """What tools/gpu_checks.activity reads of a profiler event."""

    name: str
    device_type: object
    id: int = 0
    linked_correlation_id: int = 0
    thread: int = 1
    span: tuple[float, float] = (0.0, 0.0)
    cpu_parent: object = None
    overload_name: str = ""
    is_async: bool = False

    @property
    def time_range(self):
        return SimpleNamespace(start=self.span[0], end=self.span[1])


def test_a_kernel_is_traced_to_the_op_that_launched_it():
    """As PyTorch 2.11 reported it on an H200: a kernel's id is that of the runtime call that launched it, a
    child of aten::mm; a runtime call with no parent op is placed by time; a Triton launch sits in no op."""
    from tools.gpu_checks import activity
    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    mm = Event("aten::mm", cpu, id=4, span=(247.0, 2355.0), overload_name="default")
    outer = Event("aten::linear", cpu, id=3, span=(240.0, 2400.0))
    mm.cpu_parent = outer
    events = [outer, mm, Event("Activity Buffer Request", cpu, id=4, span=(382.0, 2281.0), cpu_parent=mm),
              Event("cudaLaunchKernelExC", cpu, id=11, span=(2283.0, 2335.0), cpu_parent=mm),
              Event(GEMM, cuda, id=11),
              Event("cudaLaunchKernel", cpu, id=12, span=(300.0, 310.0)),  # no parent, inside aten::mm in time
              Event("gemm_by_time", cuda, linked_correlation_id=12),
              Event("cudaLaunchKernel", cpu, id=13, thread=2, span=(300.0, 310.0)),  # the same time, another thread
              Event("other_thread", cuda, id=13),
              Event("cuLaunchKernelEx", cpu, id=27, span=(2555.0, 2567.0)),
              Event("softmax_kernel", cuda, id=27)]
    chains = {w.name: w.ops for w in activity(events)}
    assert chains[GEMM] == (("cudaLaunchKernelExC", ""), ("aten::mm", "default"), ("aten::linear", ""))
    assert chains["gemm_by_time"] == (("aten::mm", "default"), ("aten::linear", ""))
    assert chains["other_thread"] == (("cudaLaunchKernel", ""),)
    assert chains["softmax_kernel"] == (("cuLaunchKernelEx", ""),)
    work = activity(events)
    assert judge_activity([w for w in work if w.name != "other_thread"], TRITON, ["aten.mm"]) is None
    assert "other_thread (outside any op)" in judge_activity(work, TRITON, ["aten.mm"])
    assert GEMM[:40] in judge_activity(work, TRITON, [])  # undeclared, the same GEMM is foreign


def test_two_runs_on_the_same_inputs_must_agree():
    inputs = [torch.randn(33, 17)]
    check_repeatable(_setup(_Steady()), inputs)
    with pytest.raises(Failed) as e:
        check_repeatable(_setup(_Noisy()), inputs)
    assert e.value.verdict == "incorrect" and "two runs on the same inputs disagree" in str(e.value)


class _Reordered(torch.nn.Module):
    """(x @ a) @ b summed in another order on each call: the rounding moves from run to run, as cuDNN's
    transposed convolution's does (atomics), and each run is as accurate as PyTorch's."""

    def __init__(self, reference):
        super().__init__()
        self.a, self.b, self.calls = reference.a, reference.b, 0

    def forward(self, x):
        self.calls += 1
        p = torch.randperm(x.shape[1], generator=torch.Generator().manual_seed(self.calls))
        return (x[:, p] @ self.a[p]) @ self.b


def test_rounding_that_varies_from_run_to_run_is_no_race():
    """Two runs of an ill-conditioned product differ past the fp32 tolerance, yet each is right against a
    float64 run: no race. A candidate 1% off each run is still one."""
    from test_fp32_math import IllConditioned
    reference = IllConditioned().float()
    x = torch.randn(256, 64, generator=torch.Generator().manual_seed(4))
    setup = _setup(_Reordered(reference), reference)
    with pytest.raises(Failed):
        compare(setup.candidate(x), setup.candidate(x), setup.tolerance, Checked())  # past the tolerance
    check_repeatable(setup, [x])
    with pytest.raises(Failed, match="two runs on the same inputs disagree"):
        check_repeatable(_setup(_Noisy()), [x])


def test_precision_flags_are_fixed_for_the_whole_evaluation():
    cases = [[str(FIXTURES / "task_softmax.py"), str(FIXTURES / "candidates" / "precision_flip.py")]]
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(Path(__file__).parents[2]))
    run = subprocess.run([sys.executable, str(FIXTURES.parent / "verify_probe.py"), json.dumps(cases)], env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    (r,) = json.loads(run.stdout.strip().splitlines()[-1])
    assert r["verdict"] == "rejected" and "torch.backends.cuda.matmul.allow_tf32" in r["reason"], r["reason"]


# --- on a GPU ------------------------------------------------------------------------------------------
def _gpu_setup(candidate: str, declared=()):
    from tools.guard import LaunchRecorder
    from tools.task import import_file
    recorder = LaunchRecorder()
    recorder.install()
    model = import_file(str(FIXTURES / "candidates" / candidate), f"kw_gpu_{candidate[:-3]}").ModelNew(2.0).cuda()
    x = torch.randn(64, 1000, device="cuda")
    with torch.no_grad():
        model(x)  # first launch: compiled and recorded
    return SimpleNamespace(candidate=model, launches=recorder, declared_ops=list(declared),
                           tolerance=TOLERANCES[torch.float32], device=torch.device("cuda")), [x]


@pytest.mark.gpu
def test_gpu_trace_accepts_the_candidates_own_kernels():
    from tools.gpu_checks import check_activity
    setup, inputs = _gpu_setup("honest.py")
    check_activity(setup, inputs)
    check_repeatable(setup, inputs)


@pytest.mark.gpu
def test_gpu_trace_sees_work_the_python_recorders_miss():
    from tools.gpu_checks import check_activity
    setup, inputs = _gpu_setup("grid_callback.py")  # softmax computed inside the launch's grid callback
    with pytest.raises(Failed) as e:
        check_activity(setup, inputs)
    assert e.value.verdict == "rejected" and "the GPU ran" in str(e.value)


def test_device_time_by_kernel():
    """One forward's device time per kernel: Triton kernels by name over their launches, a vendor op's kernels
    under the outermost op that launched them, fills and copies as "other"; the largest first."""
    work = [DeviceWork("softmax_kernel", "kernel", (), us=300.0),
            DeviceWork(GEMM, "kernel", (("aten::mm", "default"), ("aten::linear", "default")), us=900.0),
            DeviceWork("softmax_kernel", "kernel", (), us=200.0),
            DeviceWork("vectorized_elementwise_kernel<FillFunctor>", "kernel",
                       (("aten::fill_", "Scalar"), ("aten::zero_", "default")), us=5.0),
            DeviceWork("Memcpy DtoD (Device -> Device)", "memcpy", (("aten::copy_", ""),), us=15.0)]
    times = kernel_times(work, TRITON)
    assert times == {"aten::linear": 0.9, "softmax_kernel": 0.5, "other": 0.02}
    assert list(times) == ["aten::linear", "softmax_kernel", "other"]


def test_eval_lists_the_kernels_by_device_time():
    from tools.cli_eval import summary
    from tools.results import EvalResult
    r = EvalResult("correct", "Correct on every trial.", kernel_ms={f"k{i}": 12.0 - i for i in range(12)})
    text = summary(r)
    assert "device time by kernel (one profiled forward, 78.0000 ms in all):" in text
    assert "    12.0000 ms   15.4%  k0" in text and "k9" in text and "k10" not in text
    assert "... and 2 more" in text
