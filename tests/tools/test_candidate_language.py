"""The candidate language (tools/language.py): every cheat below is `rejected` before any of its code runs, with a
reason naming its line; every honest candidate the project writes or keeps (seed kernels, task candidates, the
honest evaluator fixtures) is inside it. The templates' renders are checked where they are made
(tests/agent/test_templates.py and the lowering tests)."""
import re
import tomllib
from pathlib import Path

import pytest

from tools.evaluate import WarmWorker
from tools.results import EvalJob, TaskSpec
from tools.rules import check_source

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
SOFTMAX = (FIXTURES / "task_softmax.py").read_text()

# cheat (against task_softmax.py), the rule it breaks, a fragment of the reason, text on the line it names:
# from fixtures/cases.toml
CHEATS = [(c["candidate"], c["refused_by"], c["reason"][0], c["line"])
          for c in tomllib.loads((FIXTURES / "cases.toml").read_text())["case"]
          if c["test"] == "test_candidate_language.py::test_cheat_is_outside_the_language"]


@pytest.mark.parametrize("candidate, rule, fragment, on_line", CHEATS, ids=[c[0] for c in CHEATS])
def test_cheat_is_outside_the_language(candidate, rule, fragment, on_line):
    source = (FIXTURES / "candidates" / candidate).read_text()
    reason = check_source(source, SOFTMAX)
    assert reason is not None and reason.startswith(f"Rejected ({rule}): line ") and fragment in reason, reason
    line = int(re.search(r"line (\d+)", reason).group(1))
    assert on_line in source.splitlines()[line - 1], reason


def test_cheats_are_rejected_by_the_evaluator_before_they_run(tmp_path, monkeypatch):
    """Through the worker: `rejected` before any of the candidate ran (no setup phase was timed). What the language
    cannot tell (a tensor from a number: `out * self.scale`), the runtime rules still catch."""
    monkeypatch.setenv("KERNELWRIGHT_CACHE", str(tmp_path))
    with WarmWorker(isolation="persistent") as worker:
        for candidate in ("lasting_rebind.py", "global_forward_hook.py", "library_prefix_op.py"):
            r = worker.run(_job(candidate))
            assert r.verdict == "rejected" and "line " in r.reason, (candidate, r.reason)
            assert r.phase_seconds == {}, r
        for candidate, fragment in (("host_arithmetic.py", "it ran aten.mul in PyTorch outside any Triton kernel"),
                                    ("declares_arithmetic.py", "only vendor GEMM and convolution")):
            r = worker.run(_job(candidate))
            assert r.verdict == "rejected" and fragment in r.reason, (candidate, r.reason)


def _job(candidate: str) -> EvalJob:
    return EvalJob(TaskSpec(str(FIXTURES / "task_softmax.py")), (FIXTURES / "candidates" / candidate).read_text(),
                   trials=1, profile=False)


HONEST = [  # (candidate, its task); seed kernels have no task
    *[(p, None) for p in sorted((ROOT / "knowledge" / "kernels").glob("*.py"))],
    *[(p, ROOT / "tasks" / p.name) for p in sorted((ROOT / "tasks" / "candidates").glob("*.py"))],
    *[(FIXTURES / "candidates" / c, FIXTURES / t) for c, t in [
        ("honest.py", "task_softmax.py"), ("honest_identity.py", "task_identity.py"),
        ("linear_relu_declared_mm.py", "task_linear_relu.py"), ("affine.py", "task_affine.py"),
        ("zeros_output.py", "task_softmax.py"), ("hang.py", "task_softmax.py"),  # wrong, but in the language
        ("hook_via_task_helper.py", "task_softmax_helpers.py")]],  # its task's code, copied verbatim
]


@pytest.mark.parametrize("candidate, task", HONEST, ids=[f"{p.parent.name}/{p.name}" for p, _ in HONEST])
def test_honest_candidates_are_inside_the_language(candidate, task):
    assert check_source(candidate.read_text(), task.read_text() if task else "") is None


KERNEL = '''import torch
import triton
import triton.language as tl


@triton.jit
def copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)

'''


@pytest.mark.parametrize("body", [
    "def f(x):\n    y = torch.empty_like(x)\n    grid = lambda meta: (triton.cdiv(x.numel(), meta['BLOCK']),)\n"
    "    copy_kernel[grid](x, y, x.numel(), BLOCK=128)\n    return y.view(x.shape)\n",
    "def f(x):\n    k = copy_kernel\n    y = x.new_empty(x.shape)\n    k[(1,)](x, y, x.numel(), BLOCK=1024)\n"
    "    return y\n",
    "KERNELWRIGHT_TORCH_OPS = ['aten.mm']\n\ndef f(a, b):\n    return torch.mm(a, b.t().contiguous())\n",
    "def f(x):\n    if tuple(x.shape) != (3, 4):\n        raise ValueError(f'got {tuple(x.shape)}')\n"
    "    return torch.empty(x.shape[0], math.prod(x.shape[1:]), device=x.device, dtype=torch.float32)\n",
    "class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
    "        self.w = torch.nn.Parameter(torch.randn(3))\n\n    def forward(self, x):\n        p = self.w\n"
    "        return x.to(p.dtype).reshape(-1)\n",
    "from triton.tools.tensor_descriptor import TensorDescriptor\n\ndef f(x):\n"
    "    d = TensorDescriptor(x, [64, 64], [64, 1], [32, 32])\n    copy_kernel[(4,)](d, x, 1, BLOCK=1)\n",
    "class M(torch.nn.Module):\n    def forward(self, x):\n"  # a buffer a module keeps private, by its path
    "        return x.to(self.get_buffer('norm.parametrizations.weight.0._u').dtype)\n",
    "import typing\n\ndef f(x: typing.Optional[torch.Tensor]) -> typing.Callable:\n"  # library values
    "    return (tl.float32, tl.core.tensor, tl.extra.cuda.libdevice.tanh, math.pi)\n",
])
def test_what_honest_code_does_is_inside(body):
    assert check_source(KERNEL + ("import math\n" if "math." in body else "") + body) is None


@pytest.mark.parametrize("body, rule", [
    ("def f(a, b):\n    return torch.mm(a, b)\n", "vendor"),  # not declared
    ("def f(x):\n    return torch.relu(x)\n", "calls"),
    ("def f(x):\n    return x.sum()\n", "calls"),
    ("def f(x):\n    g = lambda: x.sum()\n    return g()\n", "callbacks"),
    ("def f(x):\n    with torch.no_grad():\n        return x\n", "grad-mode"),
    ("def f(x):\n    try:\n        return x\n    except Exception:\n        return x\n", "statements"),
    ("def f(x):\n    global cache\n    cache = x\n", "statements"),
    ("def f(x):\n    x[0] = 1.0\n    return x\n", "monkeypatch"),
    ("def f(x):\n    return str(x)\n", "tensor-to-python"),
    ("def f(x):\n    return x.__class__\n", "python-internals"),
    ("class M(torch.nn.Module):\n    def forward(self, x):\n        return self._buffers\n", "python-internals"),
    ("def f(x):\n    return vars(x)\n", "computed-names"),
    ("def f(x):\n    return torch.randn(3)\n", "init-only"),
    ("torch.manual_seed(0)\n", "statements"),
    ("import os\n", "imports"),
    ("from triton.tools import disasm\n", "imports"),  # of triton.tools, only the TMA descriptor
    ("import triton.tools.tensor_descriptor as td\n\ndef f(x):\n    return td.os\n", "values"),
    ("import torch.utils.cpp_extension\n", "native-code"),
    ("@triton.jit\ndef k(x_ptr):\n    tl.store(x_ptr, torch.tensor(1.0))\n", "kernel-language"),
    ("def helper(x):\n    return x\n\n@triton.jit\ndef k(x_ptr):\n    helper(x_ptr)\n", "kernel-language"),
    ("def f(x):\n    copy_kernel[lambda meta: (x.sum(),)](x, x, 1, BLOCK=1)\n", "callbacks"),
    ("class T(torch.autograd.Function):\n    pass\n", "tensor-subclass"),
    ("def f(x):\n    return tl.core.builtins.exec\n", "values"),  # Python's builtins, under triton.language
    ("from triton.language import core\n\ndef f(x):\n    return core.builtins\n", "values"),
    ("import typing\n\ndef f(x):\n    return typing.operator.setitem\n", "values"),
    ("from typing import get_type_hints\n", "values"),  # which evaluates strings
    ("class M(torch.nn.Module):\n    to = torch.nn.Module.float\n", "overrides"),
    ("class M(torch.nn.Module):\n    def view(self, x):\n        return x\n", "overrides"),
    ("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.size = torch.nn.Identity()\n", "overrides"),
    ("def f(self):\n    return self.builtins\n", "python-internals"),  # given tl.core as self
    ("def f(x):\n    self = x\n    return self.anything\n", "python-internals"),
    ("def f(x):\n    return [self.anything for self in [x]]\n", "python-internals"),
    ("class M(torch.nn.Module):\n    @staticmethod\n    def f(self):\n        return self.builtins\n",
     "python-internals"),
    ("class M(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
     "        self.lib = tl.core\n", "values"),  # a module held on self, read later through self.lib
])
def test_what_cheats_reach_for_is_outside(body, rule):
    reason = check_source(KERNEL + body)
    assert reason is not None and reason.startswith(f"Rejected ({rule})"), reason


def test_the_task_code_a_candidate_carries_is_its_tasks_only_verbatim():
    """A copy of the task's Model passes (docstrings aside); a copy changed in any statement is the candidate's
    own code, and judged as such."""
    task = (FIXTURES / "task_softmax.py").read_text()
    copied = KERNEL + task.split('"""', 2)[2].replace("class Model(nn.Module):",
                                                      'class Model(nn.Module):\n    """A copy."""')
    assert check_source(copied, task) is None
    changed = copied.replace("* self.scale", "* self.scale * 1.0")
    assert "torch.softmax" in (check_source(changed, task) or "")
    assert "torch.softmax" in (check_source(copied) or "")  # without its task, nothing is the task's
