"""Anti-cheat rules as data. Static rules read the candidate's source; the runtime rules are enforced by
tools/guard.py and tools/verify.py and named here so every rejection carries one sentence of reason."""
from __future__ import annotations

import ast
import re

# Pure-Python standard modules a candidate may import besides torch and triton (and their submodules).
STDLIB_ALLOWED = frozenset("__future__ math typing functools itertools operator dataclasses collections numbers "
                           "enum".split())
BANNED_BUILTINS = frozenset("open exec eval compile exit quit input breakpoint __import__".split())

# (rule, pattern in the candidate source or the name of a syntax check below, reason given to the user)
STATIC_RULES: list[tuple[str, str, str]] = [
    ("evaluator-access", r"\b(import\s+tools|from\s+tools\b|kernelwright)",
     "it imports the evaluator's own modules"),
    ("python-internals", r"__(setattr|delattr|dict|globals|builtins|subclasses|code|closure|class|bases|mro)__|"
                         r"\b(globals|vars|locals)\(",
     "it reaches into Python's internals (namespaces, classes or code objects) to change what it did not define"),
    ("introspection", r"sys\._getframe|inspect\.(stack|currentframe|getouterframes)|gc\.get_objects|"
                      r"gc\.get_referrers|sys\.settrace|sys\.setprofile|\bimportlib\b|__import__|\bkw_task\b|"
                      r"sys\.modules",
     "it inspects the evaluator's frames, modules or objects"),
    ("monkeypatch", "assigns-foreign-attribute", "it modifies PyTorch, Triton or Python builtins at run time"),
    ("side-stream", r"torch\.cuda\.(Stream|stream|ExternalStream)\b|set_stream\(",
     "it launches work on a stream other than the evaluator's"),
    ("concurrency", r"\b(import\s+(threading|multiprocessing|subprocess|socket|asyncio|concurrent)|"
                    r"from\s+(threading|multiprocessing|subprocess|socket|asyncio|concurrent)\b|"
                    r"os\.(system|popen|fork|exec\w*|spawn\w*|kill))",
     "it starts threads, processes or network connections"),
    ("torch-compiler", r"torch\.(compile|jit|_dynamo|_inductor|_export|export)\b",
     "it hands the work to a PyTorch compiler instead of writing a kernel"),
    ("native-code", r"\b(ctypes|cffi|load_inline|cpp_extension|load_library)\b",
     "it loads native code outside Triton"),
    ("file-io", r"\btorch\.(save|load|from_file|hub)\b|\.tofile\(",
     "it reads or writes files"),
    ("imports", "imports-outside-allow-list", "it imports a module kernels do not need (a candidate may import "
                                             "only torch, triton, " + ", ".join(sorted(STDLIB_ALLOWED)) +
                                             " and what its task imports)"),
    ("builtins", "dangerous-builtins", "it calls open, exec, eval, compile, exit or input, or looks attributes up "
                                       "by computed names"),
]

# ATen ops a candidate may run outside its Triton kernels: allocation, views and layout, never arithmetic.
ALLOWED_OPS: frozenset[str] = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like new_ones
full full_like new_full fill zero arange scalar_tensor lift_fresh detach alias view _unsafe_view reshape
as_strided t transpose permute expand squeeze unsqueeze select slice split split_with_sizes unbind chunk
narrow flatten unflatten contiguous clone copy _to_copy to _local_scalar_dense sym_size sym_stride sym_numel
is_same_size resize_ set_ view_as expand_as movedim
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
    "aliases-input": "its output {which} shares memory with an input",
    "output-type": "its output {which} is a {type}, not a plain torch.Tensor",
    "side-stream": "it launched a kernel on a stream other than the evaluator's",
    "stale-output": "it returned a wrong result once the inputs changed in place, so it reuses earlier results",
}


def op_base(name: str) -> str:
    """'aten.addmm.default' -> 'addmm'; 'aten.add_.Tensor' -> 'add'."""
    parts = name.split(".")
    base = parts[1] if len(parts) > 1 and parts[0] == "aten" else parts[0]
    return base.rstrip("_") if base != "_" else base


LIBRARY_NAMES = frozenset("torch triton tl F nn np math builtins __builtins__ sys os".split())


def check_source(source: str, task_source: str = "") -> str | None:
    """The reason the first static rule the source breaks gives, or None. A module the task itself imports
    (numpy, einops, ...) may be imported by the candidate too: a candidate carries its task's code."""
    code = _strip_comments_and_strings(source)
    task_imports = _import_roots(task_source)
    for rule, pattern, reason in STATIC_RULES:
        if pattern == "imports-outside-allow-list":
            broken = bool(_import_roots(source) - task_imports - {"torch", "triton"} - STDLIB_ALLOWED)
        else:
            broken = SYNTAX_CHECKS[pattern](source) if pattern in SYNTAX_CHECKS else re.search(pattern, code)
        if broken:
            return f"Rejected ({rule}): {reason}."
    return None


def _assigns_foreign_attribute(source: str) -> bool:
    """True when the code assigns (or setattr()s, or deletes) an attribute of something it did not define: a
    library module, a name it imported (`from torch.nn import Module; Module.__call__ = ...`), or an object
    reached by a call or subscript. Its own classes and `self` are its own."""
    imported = set(LIBRARY_NAMES)
    for node in _walk(source):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            imported |= {(a.asname or a.name).split(".")[0] for a in node.names}
    for node in _walk(source):
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = [_written(t) for t in node.targets if isinstance(t, (ast.Attribute, ast.Subscript))]
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [_written(node.target)] if isinstance(node.target, (ast.Attribute, ast.Subscript)) else []
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("setattr", "delattr"):
            targets = node.args[:1]
        else:
            continue
        for target in targets:
            root = _root_name(target)
            if root is None and not isinstance(target, ast.Name) or root in imported:
                return True
    return False


def _written(target: ast.AST) -> ast.AST:
    """What an assignment writes into: `x.a` writes into x, `x.a[k]` (a dict or list) into x.a too."""
    while isinstance(target, ast.Subscript):
        target = target.value
    return target


def _root_name(node: ast.AST) -> str | None:
    """The name an attribute chain starts from (`torch` in torch.nn.Module.x), or None if it starts elsewhere."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def _import_roots(source: str) -> set[str]:
    """The top-level modules a source imports ("." for a relative import)."""
    roots = set()
    for node in _walk(source):
        if isinstance(node, ast.Import):
            roots |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            roots.add((node.module or "").split(".")[0] if node.level == 0 else ".")
    return roots


def _dangerous_builtins(source: str) -> bool:
    for node in _walk(source):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            name = node.func.id
            if name in BANNED_BUILTINS:
                return True
            computed = len(node.args) > 1 and not isinstance(node.args[1], ast.Constant)
            if name in ("getattr", "hasattr", "setattr", "delattr") and computed:
                return True
    return False


def _walk(source: str):
    try:
        return ast.walk(ast.parse(source))
    except SyntaxError:
        return iter(())  # loading the candidate reports the syntax error


SYNTAX_CHECKS = {"assigns-foreign-attribute": _assigns_foreign_attribute,
                 "dangerous-builtins": _dangerous_builtins}


def _strip_comments_and_strings(source: str) -> str:
    import io
    import tokenize
    try:
        tokens = tokenize.generate_tokens(io.StringIO(source).readline)
        kept = [t.string if t.type not in (tokenize.COMMENT, tokenize.STRING) else '""' for t in tokens
                if t.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)]
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return source
    return " ".join(kept).replace(" . ", ".").replace(" .", ".").replace(". ", ".").replace(" (", "(")
