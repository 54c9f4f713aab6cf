"""Anti-cheat rules as data. The static rule is the candidate language (tools/language.py: an allow-list over
the parsed module, checked before any candidate code runs); the runtime rules are enforced by tools/guard.py and
tools/verify.py and named here so every rejection carries one sentence of reason."""
from __future__ import annotations

from tools.language_check import first_violation

# ATen ops a candidate may run outside its Triton kernels: allocation, views and layout, never arithmetic.
ALLOWED_OPS: frozenset[str] = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
full full_like new_full fill zero arange scalar_tensor lift_fresh detach alias view _unsafe_view reshape
as_strided t transpose permute expand squeeze unsqueeze select slice split split_with_sizes unbind chunk
narrow flatten unflatten contiguous clone copy _to_copy to sym_size sym_stride sym_numel
is_same_size resize_ set_ view_as expand_as movedim view_as_real
""".split())

# Vendor-library ops a candidate may keep in PyTorch, when it declares them in KERNELWRIGHT_TORCH_OPS and
# still does the rest of the task's work in Triton (a cuBLAS GEMM under a fused Triton epilogue).
DECLARABLE_OPS: frozenset[str] = frozenset(
    "mm addmm bmm baddbmm matmul linear convolution _convolution cudnn_convolution conv2d".split())

RUNTIME_REASONS = {
    "no-kernel": "it never launched a Triton kernel",
    "torch-compute": "it ran {ops} in PyTorch outside any Triton kernel",
    "undeclarable": "it declares {ops} in KERNELWRIGHT_TORCH_OPS, but only vendor GEMM and convolution ops "
                    "may stay in PyTorch",
    "all-in-torch": "every op of the task ran in PyTorch ({ops}); the Triton kernels do none of its work",
    "mutates-input": "it modified its input {which}",
    "writes-reference": "it changed the reference module's state (tensor {which} of its state_dict), which is not "
                        "its own",
    "aliases-input": "its output {which} shares memory with an input",
    "copied-output": "the task only moves data, and its output {which} is a copy PyTorch made ({op}) outside any "
                     "Triton kernel",
    "output-type": "its output {which} is a {type}, not a plain torch.Tensor",
    "side-stream": "it launched a kernel on a stream other than the evaluator's",
    "stale-output": "it returned a wrong result once the inputs changed in place, so it reuses earlier results",
    "precision-flags": "it changed {flags}, which the evaluator fixes for the whole evaluation",
    "gpu-activity": "the GPU ran {kernels}, which is neither one of its Triton kernels nor launched by a declared "
                    "vendor op or an allocation",
    "host-copy": "it copied memory between host and device ({copies}) during its forward",
    "nondeterministic": "two runs on the same inputs disagree ({detail}): a race between its programs",
}


def op_base(name: str) -> str:
    """'aten.addmm.default' -> 'addmm'; 'aten.add_.Tensor' -> 'add'."""
    parts = name.split(".")
    base = parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[0]
    return base.rstrip("_") if base != "_" else base


def check_source(source: str, task_source: str = "") -> str | None:
    """Why the source is outside the candidate language, naming its first such line, or None. The task's own
    code (its statements, copied verbatim) and its imports are allowed: a candidate carries its task's code."""
    broken = first_violation(source, task_source)
    return None if broken is None else f"Rejected ({broken.rule}): {broken.reason}."
