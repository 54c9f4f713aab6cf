"""Runtime recorders installed in the worker before candidate code loads: which Triton kernels it
launches (and on which stream), and which ATen ops it runs outside them, poisoning every fresh allocation
so that an output element the kernel never writes cannot pass."""
from __future__ import annotations

import gc
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tools.rules import ALLOWED_OPS, op_base

ALLOCATING_OPS = frozenset("empty empty_like empty_strided new_empty new_empty_strided".split())
IGNORING_OPS = frozenset("nll_loss_forward nll_loss2d_forward".split())  # argument 4: a target that counts nothing
# Layout ops that write a tensor's data (clone, and contiguous through it; copy_ into its first argument; a
# dtype or device copy), and ops whose result is a fresh allocation: memory a copy left and a later
# allocation reused is that allocation's, no longer the copy's (OpRecorder.copies).
COPYING_OPS = frozenset("clone copy _to_copy".split())
FRESH_OPS = ALLOCATING_OPS | frozenset(
    "zeros zeros_like new_zeros ones ones_like new_ones full full_like new_full arange scalar_tensor".split())
# The Triton interpreter's launch leaves reference cycles that hold its tensor arguments until the next full
# collection; after a launch over more than this, the recorder collects them at once.
INTERPRETER_COLLECT_BYTES = 4 << 20


@dataclass
class TensorArg:
    """What compile metadata needs of a tensor argument; the tensor itself is not kept alive."""

    dtype: torch.dtype
    aligned: bool = True  # its data 16-byte aligned: Triton's launcher compiles a kernel for that (vector loads)


@dataclass
class DescriptorArg:
    """What compile metadata needs of a TMA descriptor argument (triton.tools.tensor_descriptor): its tensor's
    dtype and its tile."""

    dtype: torch.dtype
    block_shape: tuple


@dataclass
class Launch:
    name: str
    jit_fn: object  # the JITFunction or InterpretedFunction
    args: tuple  # tensors replaced by TensorArg, descriptors by DescriptorArg
    kwargs: dict
    kernel: object | None  # the CompiledKernel on a GPU, None in the interpreter


@dataclass
class LaunchRecorder:
    """Wraps Triton's launch entry points for the life of the worker."""

    first: dict[str, Launch] = field(default_factory=dict)  # the first launch of each kernel
    count: int = 0
    foreign_streams: int = 0  # launches on a stream other than the evaluator's
    depth: int = 0  # > 0 while inside a Triton launch

    def install(self) -> None:
        from triton.runtime.interpreter import InterpretedFunction
        from triton.runtime.jit import JITFunction
        for cls in (JITFunction, InterpretedFunction):  # a persistent worker installs one per job:
            original = cls.__dict__.get("_kw_unwrapped_run", cls.run)  # always wrap Triton's own
            cls._kw_unwrapped_run = original
            cls.run = self._wrap(original)

    def _wrap(self, run):
        recorder, on_gpu = self, torch.cuda.is_available()

        def recorded_run(fn, *args, grid, warmup, **kwargs):
            if warmup:
                return run(fn, *args, grid=grid, warmup=warmup, **kwargs)
            recorder.foreign_streams += on_gpu and _off_default_stream()
            recorder.depth += 1
            try:
                kernel = run(fn, *args, grid=recorder._outside(grid), warmup=warmup, **kwargs)
            finally:
                recorder.depth -= 1
            recorder.count += 1
            if not on_gpu and _tensor_bytes(args, kwargs) > INTERPRETER_COLLECT_BYTES:
                gc.collect()
            name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", "kernel")
            if name not in recorder.first:
                recorder.first[name] = Launch(name, fn, _light(args), _light(kwargs),
                                              kernel if hasattr(kernel, "metadata") else None)
            return kernel

        return recorded_run

    def _outside(self, grid):
        """A grid callback, run as the candidate's own host code: what it does in PyTorch is recorded, where the
        launch around it is not (a grid that ran the task's Model went unseen)."""
        if not callable(grid):
            return grid

        def recorded_grid(meta):
            self.depth -= 1
            try:
                return grid(meta)
            finally:
                self.depth += 1

        return recorded_grid


_DEFAULT_STREAMS: dict[int, int] = {}  # device -> its default stream's handle


def _off_default_stream() -> bool:
    """Whether the current CUDA stream is not the device's default stream, by raw handle (0.1 us of host time
    on an H200), where comparing two Stream objects cost every recorded launch more (torch.cuda.current_stream()
    alone took 5 us); compile's launches, not recorded, paid none of it."""
    device = torch.cuda.current_device()
    default = _DEFAULT_STREAMS.get(device)
    if default is None:
        default = _DEFAULT_STREAMS[device] = torch.cuda.default_stream(device).cuda_stream
    return torch._C._cuda_getCurrentRawStream(device) != default


def _tensor_bytes(args: tuple, kwargs: dict) -> int:
    return sum(v.numel() * v.element_size() for v in (*args, *kwargs.values()) if isinstance(v, torch.Tensor))


def _light(values):
    if isinstance(values, dict):
        return {k: _light_arg(v) for k, v in values.items()}
    return tuple(_light_arg(v) for v in values)


def _light_arg(value):
    from triton.tools.tensor_descriptor import TensorDescriptor
    if isinstance(value, torch.Tensor):
        return TensorArg(value.dtype, value.data_ptr() % 16 == 0)
    if isinstance(value, TensorDescriptor):
        return DescriptorArg(value.base.dtype, tuple(value.block_shape))
    return value


class OpRecorder(TorchDispatchMode):
    """Records the ATen ops run outside Triton launches; poisons allocations with NaN (or INT_POISON)."""

    def __init__(self, launches: LaunchRecorder, poison: bool = True):
        super().__init__()
        self.launches = launches
        self.poison = poison
        self.ops: list[str] = []
        self.ignored: set[int] = set()  # the ignore_index of each loss it ran (IGNORING_OPS)
        self.copies: dict[int, str] = {}  # storage address -> the op that copied data into it (COPYING_OPS)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if self.launches.depth > 0:
            return out  # the Triton interpreter's own tensor handling
        name = str(func.overloadpacket)
        self.ops.append(name)
        base = op_base(name)
        if base in IGNORING_OPS:
            self.ignored.add(int(args[4]))
        written = args[0] if name.endswith("_") else out  # copy_ writes its first argument
        if base in COPYING_OPS and isinstance(written, torch.Tensor):
            self.copies[written.untyped_storage().data_ptr()] = name
        elif base in FRESH_OPS and isinstance(out, torch.Tensor):
            self.copies.pop(out.untyped_storage().data_ptr(), None)
        if self.poison and base in ALLOCATING_OPS and isinstance(out, torch.Tensor):
            out.fill_(_poison(out.dtype))
        return out

    def compute_ops(self) -> list[str]:
        """The distinct ops that are arithmetic rather than allocation, views or layout."""
        return sorted({n for n in self.ops if op_base(n) not in ALLOWED_OPS})


def _poison(dtype: torch.dtype):
    """NaN for floats; for integers the largest value, never a sensible index or count."""
    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    return True if dtype == torch.bool else torch.iinfo(dtype).max
