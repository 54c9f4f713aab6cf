"""The candidate language: what a candidate file may say, checked over its parsed module before any of it runs.

A candidate is a module of imports, constants, `@triton.jit` kernels, host functions and `torch.nn` modules.
Outside the kernels, code may allocate tensors, take views and shapes, compute launch grids with arithmetic,
launch its own kernels (given tensors, or TMA descriptors of them), call the vendor ops it declares in
KERNELWRIGHT_TORCH_OPS, use `math` and call `warnings.warn` (nothing else of `warnings`: a template candidate's
guard says once that it runs the reference); random draws and `torch.nn` constructors belong in `__init__`.
Inside the kernels: `triton.language` and arithmetic. Nothing else is in the language, however it is reached:
an alias, a computed attribute name, a private or hook API, a tensor read into Python or NumPy, a Tensor
subclass, a grad or dispatch mode, an attribute assigned outside `self`. The task's own code, copied verbatim (a
candidate carries its reference), is the task's and exempt.

This file holds the language as data (what may be imported, called, read; the rules a line can break and the
sentence each gives); tools/language_check.py walks a candidate's parsed module against it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

IMPORTABLE = frozenset("""torch torch.nn torch.nn.functional triton triton.language triton.language.extra
triton.language.extra.libdevice triton.language.extra.cuda triton.language.extra.cuda.libdevice
triton.tools.tensor_descriptor math __future__ typing warnings""".split())
TORCH_HOST = frozenset("""empty empty_like empty_strided zeros zeros_like ones ones_like full full_like arange
tensor as_strided reshape flatten unflatten transpose permute squeeze unsqueeze t movedim narrow select split
chunk unbind broadcast_to broadcast_shapes Size device finfo iinfo promote_types is_tensor view_as_real""".split())
RETURN_TYPES = frozenset("""max min sort topk kthvalue mode median nanmedian cummax cummin aminmax
frexp""".split())  # torch.return_types: the named pairs such ops return, which a candidate returns as they do
HOST_CALLS = frozenset({f"torch.{n}" for n in TORCH_HOST} | {f"torch.return_types.{n}" for n in RETURN_TYPES} | {
    "torch.cuda.is_available", "triton.cdiv", "triton.next_power_of_2", "triton.Config",
    "triton.tools.tensor_descriptor.TensorDescriptor", "warnings.warn"})  # TMA: a tensor, its shape and tiles
INIT_CALLS = frozenset(f"torch.{n}" for n in "randn rand randint randn_like rand_like randperm".split())
VENDOR_CALLS = frozenset({f"torch.{n}" for n in "mm addmm bmm baddbmm matmul convolution conv1d conv2d conv3d "
                          "conv_transpose1d conv_transpose2d conv_transpose3d".split()} |
                         {f"torch.nn.functional.{n}" for n in "linear conv1d conv2d conv3d conv_transpose1d "
                          "conv_transpose2d conv_transpose3d".split()})
VENDOR_METHODS = frozenset("mm addmm bmm baddbmm matmul".split())
TENSOR_METHODS = frozenset("""view view_as reshape reshape_as contiguous permute transpose t expand expand_as
unsqueeze squeeze flatten unflatten narrow select split chunk unbind movedim moveaxis as_strided detach size
stride dim numel nelement element_size is_contiguous storage_offset new_empty new_zeros new_ones new_full
new_empty_strided zero_ fill_ to float half bfloat16 double clone is_floating_point is_complex get_device
append extend insert index count keys values items get""".split())  # the last line: the candidate's lists, dicts
TENSOR_ATTRS = frozenset("""shape dtype device ndim T mT is_cuda itemsize is_signed type min max eps tiny bits
""".split())  # of tensors, dtypes, devices and finfo
TORCH_VALUES = frozenset("""float16 float32 float64 bfloat16 half float double int8 int16 int32 int64 uint8 bool
long int short complex64 complex128 float8_e4m3fn float8_e5m2 Tensor Size device dtype""".split())
# on self: in __init__, and the readers of the module's own state by path (a buffer a module keeps under a private
# name, spectral norm's _u, which no attribute access may spell)
MODULE_METHODS = frozenset("register_buffer register_parameter add_module get_buffer get_parameter".split())
BUILTINS = frozenset("""range len min max abs int float bool tuple list dict set enumerate zip isinstance all
any sum round divmod pow reversed sorted slice super print str repr ValueError TypeError RuntimeError
AssertionError NotImplementedError IndexError KeyError True False None""".split())
JIT_BUILTINS = frozenset("range len min max abs int float bool tuple isinstance print True False None".split())
ARITH_CALLS = frozenset("triton.cdiv triton.next_power_of_2 min max int abs len round".split())
SHAPE_METHODS = frozenset("size stride numel dim nelement element_size".split())
TO_PYTHON = frozenset("item tolist numpy data_ptr untyped_storage storage __array__ __float__ __int__ "
                      "__index__ __bool__ __dlpack__".split())
FORBIDDEN_ATTRS = TO_PYTHON | frozenset("""set_ apply_ map_ map2_ as_subclass backward retain_grad requires_grad_
requires_grad grad grad_fn is_leaf data pin_memory share_memory_ cpu cuda apply register_module train eval
load_state_dict""".split())


def refused_on_self(attr: str) -> bool:
    """Whether the checker refuses `attr` as a link of a `self.` path (language_check's attribute_name: hooks,
    private names, tensor-to-Python reads and other forbidden attributes), so that model state under it is read by
    its path instead (agent/analysis.py attribute_expr)."""
    return "hook" in attr.lower() or attr in FORBIDDEN_ATTRS or attr.startswith("_") and attr != "__init__"


JIT_DECORATOR_KEYS = {"triton.jit": {"do_not_specialize", "do_not_specialize_on_alignment", "debug", "noinline"},
                      "triton.autotune": {"configs", "key", "reset_to_zero", "restore_value", "warmup", "rep",
                                          "cache_results"},
                      "triton.heuristics": {"values"}}

# (path prefix, rule) naming why a call or import outside the language is there; the first that matches wins.
KNOWN_PATHS = [
    ("tools", "evaluator-access"), ("kernelwright", "evaluator-access"),
    ("sys", "introspection"), ("inspect", "introspection"), ("gc", "introspection"), ("importlib", "introspection"),
    ("threading", "concurrency"), ("multiprocessing", "concurrency"), ("subprocess", "concurrency"),
    ("socket", "concurrency"), ("asyncio", "concurrency"), ("concurrent", "concurrency"),
    ("ctypes", "native-code"), ("cffi", "native-code"), ("torch.utils.cpp_extension", "native-code"),
    ("torch.cuda.Stream", "side-stream"), ("torch.cuda.stream", "side-stream"), ("torch.cuda.set_stream",
    "side-stream"), ("torch.cuda.ExternalStream", "side-stream"), ("torch.Stream", "side-stream"),
    ("torch.compile", "torch-compiler"), ("torch.jit", "torch-compiler"), ("torch.export", "torch-compiler"),
    ("torch.no_grad", "grad-mode"), ("torch.enable_grad", "grad-mode"), ("torch.set_grad_enabled", "grad-mode"),
    ("torch.is_grad_enabled", "grad-mode"), ("torch.inference_mode", "grad-mode"), ("torch.autograd", "grad-mode"),
    ("torch.is_inference_mode_enabled", "grad-mode"), ("torch.overrides", "dispatch-mode"),
    ("torch.utils._python_dispatch", "dispatch-mode"), ("torch.library", "custom-ops"), ("torch.ops", "custom-ops"),
    ("torch.save", "file-io"), ("torch.load", "file-io"), ("torch.hub", "file-io"), ("torch.from_file", "file-io"),
]
RULES = {  # rule -> the sentence a rejection gives, with {what}
    "imports": "it imports {what}; a candidate may import torch, torch.nn, torch.nn.functional, triton, "
               "triton.language, triton.tools.tensor_descriptor, math, warnings (to warn) and what its task imports",
    "evaluator-access": "it imports the evaluator's own modules ({what})",
    "introspection": "it uses {what}, which inspects the evaluator's frames, modules or objects",
    "concurrency": "it uses {what}, which starts threads, processes or network connections",
    "native-code": "it uses {what}, which loads native code outside Triton",
    "side-stream": "it uses {what}, which launches work on a stream other than the evaluator's",
    "torch-compiler": "it uses {what}, which hands the work to a PyTorch compiler instead of a kernel",
    "grad-mode": "it queries or changes the grad mode ({what})",
    "dispatch-mode": "it queries or changes PyTorch's dispatch or function modes ({what})",
    "custom-ops": "it reaches registered or custom operators ({what})",
    "file-io": "it reads or writes files ({what})",
    "hooks": "it reaches a hook API ({what})",
    "python-internals": "it reaches the private or internal name {what}",
    "monkeypatch": "it assigns {what}; a candidate may assign only names and attributes of self",
    "tensor-to-python": "it reads a tensor's values into Python or NumPy ({what})",
    "tensor-subclass": "it defines a class on {what}; classes may derive only from torch.nn modules and its own "
                       "classes",
    "computed-names": "it uses {what}, which looks attributes or names up by computed names",
    "builtins": "it uses the builtin {what}, which the candidate language does not include",
    "calls": "it calls {what}, which is outside the candidate language (outside kernels: allocation, views and "
             "shapes, triton.cdiv, kernel launches, declared vendor ops and math)",
    "values": "it takes {what} as a value; library functions may only be called, as the language allows",
    "vendor": "it calls the vendor op {what} without declaring it in KERNELWRIGHT_TORCH_OPS",
    "init-only": "it calls {what} outside __init__ (random draws and torch.nn modules belong in the constructor)",
    "statements": "it uses {what}, which the candidate language does not include",
    "callbacks": "it passes Python code where Triton calls it back ({what}); grids and heuristics are arithmetic",
    "overrides": "it binds {what} on its module: nn.Module's own are what the evaluator calls, and a tensor "
                 "method's name is read as the tensor's (a module may define forward and methods of other names)",
    "kernel-language": "a @triton.jit function uses {what}; kernels may use only triton.language and arithmetic",
}


@dataclass
class Violation:
    rule: str
    line: int
    what: str

    @property
    def reason(self) -> str:
        return f"line {self.line}: " + RULES[self.rule].format(what=self.what)


@functools.cache
def module_methods() -> frozenset[str]:
    """nn.Module's public methods and attributes but forward: what the evaluator calls on a candidate."""
    import torch
    return frozenset(n for n in dir(torch.nn.Module) if not n.startswith("_")) - {"forward", "extra_repr"}


def known_rule(path: str) -> str | None:
    """The rule a well-known module or builtin outside the language breaks, if one names it better than 'calls'."""
    for prefix, rule in KNOWN_PATHS:
        if path == prefix or path.startswith(prefix + "."):
            return rule
    if path in ("open", "exec", "eval", "compile", "exit", "quit", "input", "breakpoint", "__import__"):
        return "builtins"
    if path in ("type", "id", "object", "memoryview"):
        return "python-internals"
    if "hook" in path.lower():
        return "hooks"
    if any(p.startswith("_") for p in path.split(".")[1:]):
        return "python-internals"
    return None
