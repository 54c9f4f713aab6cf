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

from tools.compare import TOLERANCES, Failed
from tools.gpu_checks import DeviceWork, check_repeatable, judge_activity

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


def _setup(model):
    return SimpleNamespace(candidate=model, tolerance=TOLERANCES[torch.float32], device=torch.device("cpu"))


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
    """Seen on an H200: a cuBLAS kernel's correlation id names the runtime call that launched it, not aten::mm;
    the op is the one on that thread that holds the call in time."""
    from tools.gpu_checks import activity
    cpu, cuda = DeviceType.CPU, DeviceType.CUDA
    mm = Event("aten::mm", cpu, id=7, span=(10.0, 50.0), overload_name="default")
    direct = Event("aten::fill_", cpu, id=8, span=(60.0, 70.0))
    events = [mm, direct, Event("cudaLaunchKernel", cpu, id=9, span=(20.0, 25.0)),
              Event("cudaLaunchKernel", cpu, id=10, span=(80.0, 85.0)),  # inside no op
              Event("cudaLaunchKernel", cpu, id=11, thread=2, span=(20.0, 25.0)),  # another thread
              Event("sm90_xmma_gemm", cuda, linked_correlation_id=9), Event("fill_kernel", cuda, linked_correlation_id=8),
              Event("stray_gemm", cuda, linked_correlation_id=10), Event("thread_gemm", cuda, linked_correlation_id=11)]
    chains = {w.name: w.ops for w in activity(events)}
    assert chains["sm90_xmma_gemm"] == (("aten::mm", "default"),)
    assert chains["fill_kernel"] == (("aten::fill_", ""),)
    assert chains["stray_gemm"] == chains["thread_gemm"] == (("cudaLaunchKernel", ""),)
    assert judge_activity(activity(events)[:1], TRITON, ["aten.mm"]) is None
    assert "stray_gemm" in judge_activity(activity(events), TRITON, ["aten.mm"])


def test_two_runs_on_the_same_inputs_must_agree():
    inputs = [torch.randn(33, 17)]
    check_repeatable(_setup(_Steady()), inputs)
    with pytest.raises(Failed) as e:
        check_repeatable(_setup(_Noisy()), inputs)
    assert e.value.verdict == "incorrect" and "two runs on the same inputs disagree" in str(e.value)


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
