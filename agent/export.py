"""`kernelwright export RUN_DIR --name NAMESPACE::OP --out DIR`: the best kernel of an `optimize` run as one
importable module, DIR/OP.py, holding

- the kernel (best.py, verbatim),
- `torch.ops.NAMESPACE.OP`, a `torch.library.custom_op` taking the task's inputs and the module's parameters and
  buffers, with a fake implementation (the task's reference run on fake tensors), so that it works under
  `torch.compile(fullgraph=True)` and `torch.export`,
- a drop-in `nn.Module` with the task's constructor and parameters whose forward calls the op,
- a safe fallback: a call whose shapes, dtypes or constructor arguments were not verified runs the task's own
  reference computation instead of the kernel, and says so once through `warnings`.

    kernelwright optimize tasks/02_swish_bias.py --out runs/swish
    kernelwright export runs/swish --name mylib::swish_bias --out kernels
    # model code:  from kernels.swish_bias import SwishBias

Exit codes: 0 written; 2 bad input (no run or no correct kernel in RUN_DIR, an invalid op name, a module
already in --out without --force), one sentence on stderr.
"""
from __future__ import annotations

import argparse
import ast
import json
import keyword
import re
from dataclasses import dataclass
from pathlib import Path

from agent.optimize import UsageError

OP_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)::([A-Za-z_][A-Za-z0-9_]*)$")
TORCH_NAMESPACES = {"aten", "prim", "prims", "torch", "inductor"}


def register(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("export", help="write a run's best kernel as a PyTorch custom op and drop-in module",
                              description="Write the best kernel of an optimize run as one importable module: a "
                                          "torch.library custom op, a drop-in nn.Module, and the task's reference "
                                          "as the fallback for shapes that were not verified.")
    p.add_argument("run_dir", metavar="RUN_DIR", help="an optimize output folder (best.py, report.json)")
    p.add_argument("--name", required=True, metavar="NAMESPACE::OP", help="the custom op's name, e.g. mylib::gelu")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write OP.py in (created if missing)")
    p.add_argument("--force", action="store_true", help="overwrite an existing OP.py in --out")
    p.set_defaults(func=export)
    return p


@dataclass
class Verified:
    """What the run verified the kernel on, found by running the task on the meta device."""

    init: list  # the constructor's arguments
    signature: tuple  # one entry per op argument (inputs, then parameters and buffers): (shape, dtype, contiguous)
    # for a tensor, the value itself otherwise
    input_names: list[str]
    state_names: list[str]  # the module's parameters and buffers, in op argument order
    schema: str


def export(args: argparse.Namespace) -> int:
    namespace, op = parse_name(args.name)
    run_dir, out = Path(args.run_dir), Path(args.out)
    report, best_source = read_run(run_dir)
    target = out / f"{op}.py"
    if target.exists() and not args.force:
        raise UsageError(f"{target} already exists; pass --force to overwrite it.")
    task_path = Path(report["task"])
    if not task_path.is_file():
        raise UsageError(f"The run's task file {task_path} no longer exists, so its reference cannot be embedded.")
    config = report.get("config") or {}
    small = bool(config.get("small")) or report["best"].get("verified_on") == "interpreter"
    verified = verify_signature(task_path, best_source, small, config.get("dtype"))
    out.mkdir(parents=True, exist_ok=True)
    target.write_text(render(f"{namespace}::{op}", class_name(op), report, best_source,
                             task_path.read_text(), verified, small))
    print(f"wrote {target}: torch.ops.{namespace}.{op} and the drop-in {class_name(op)} "
          f"(from {target.stem} import {class_name(op)})")
    return 0


def parse_name(name: str) -> tuple[str, str]:
    """NAMESPACE::OP split in two, or a UsageError naming what is wrong."""
    m = OP_NAME.match(name)
    if not m or keyword.iskeyword(m[1]) or keyword.iskeyword(m[2]):
        raise UsageError(f"The op name {name!r} is not NAMESPACE::OP (two Python identifiers joined by ::, "
                         f"e.g. mylib::gelu).")
    if m[1] in TORCH_NAMESPACES:
        raise UsageError(f"The namespace {m[1]!r} belongs to PyTorch; choose your own (e.g. mylib::{m[2]}).")
    return m[1], m[2]


def read_run(run_dir: Path) -> tuple[dict, str]:
    """report.json and best.py of an optimize run holding a correct kernel."""
    if not (run_dir / "report.json").is_file():
        raise UsageError(f"There is no optimize run in {run_dir} (no report.json).")
    try:
        report = json.loads((run_dir / "report.json").read_text())
    except ValueError:
        raise UsageError(f"{run_dir / 'report.json'} is not valid JSON.") from None
    best = report.get("best")
    if not best or best.get("verdict") != "correct" or not (run_dir / "best.py").is_file():
        raise UsageError(f"The run in {run_dir} found no correct kernel, so there is nothing to export.")
    return report, (run_dir / "best.py").read_text()


def verify_signature(task_path: Path, best_source: str, small: bool, dtype: str | None) -> Verified:
    """The shapes and dtypes the run verified on: the task's inputs and its Model's state made on the meta device
    (SMALL_SHAPES where the run used them, cast as the run cast them), and the op schema for the output."""
    import torch

    from tools.results import TaskSpec
    from tools.task import TaskError, load_task_module
    try:
        task = load_task_module(TaskSpec(path=str(task_path)), small)
        with torch.device("meta"):
            init = list(task.get_init_inputs())
            reference = task.Model(*init)
            inputs = list(task.get_inputs())
            if dtype:
                reference = reference.to(getattr(torch, dtype))
                inputs = [x.to(getattr(torch, dtype)) if isinstance(x, torch.Tensor) and x.is_floating_point()
                          else x for x in inputs]
            outputs = reference(*inputs)
    except (TaskError, Exception) as e:
        raise UsageError(f"The task's reference could not be run on the meta device to find its shapes "
                         f"({type(e).__name__}: {str(e)[:160]}).") from None
    for value in init:
        if not _literal(value):
            raise UsageError(f"The task's constructor takes {type(value).__name__} {value!r}, which cannot be "
                             f"written into the module as a literal.")
    if not inputs:
        raise UsageError("The task's forward takes no inputs, so there is nothing for an op to take.")
    state = dict(reference.named_parameters()) | dict(reference.named_buffers())
    _check_kernel_state(best_source, init, state)
    args = inputs + list(state.values())
    signature = tuple(_describe(a) for a in args)
    input_names = [f"x{i}" for i in range(len(inputs))]
    arg_types = [_schema_type(a) for a in args]
    names = input_names + [f"s{i}" for i in range(len(state))]
    if isinstance(outputs, torch.Tensor):
        returns = "Tensor"
    elif isinstance(outputs, (tuple, list)) and outputs and all(isinstance(o, torch.Tensor) for o in outputs):
        returns = "(" + ", ".join("Tensor" for _ in outputs) + ")"
    else:
        raise UsageError("The task's Model returns something other than a tensor or a tuple of tensors, which a "
                         "custom op cannot.")
    schema = "(" + ", ".join(f"{t} {n}" for t, n in zip(arg_types, names)) + ") -> " + returns
    return Verified(init, signature, input_names, list(state), schema)


def _check_kernel_state(best_source: str, init: list, state: dict) -> None:
    """The kernel's ModelNew must hold the task's parameters and buffers under the same names and shapes: the op
    hands the drop-in's own tensors to it."""
    import tempfile

    import torch

    from tools.task import import_file
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "best.py"
        path.write_text(best_source)
        try:
            with torch.device("meta"):
                kernel = import_file(path, "kw_export_best").ModelNew(*init)
        except Exception as e:
            raise UsageError(f"The best kernel's ModelNew could not be built on the meta device "
                             f"({type(e).__name__}: {str(e)[:160]}).") from None
    mine = dict(kernel.named_parameters()) | dict(kernel.named_buffers())
    if {k: tuple(v.shape) for k, v in mine.items()} != {k: tuple(v.shape) for k, v in state.items()}:
        raise UsageError("The best kernel's ModelNew does not hold the task's parameters and buffers under the same "
                         "names and shapes, so the drop-in cannot hand them to it.")


def _literal(value) -> bool:
    try:
        return ast.literal_eval(repr(value)) == value
    except (ValueError, SyntaxError):
        return False


def _describe(value):
    import torch
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), str(value.dtype).removeprefix("torch."), True)
    if not _literal(value):
        raise UsageError(f"The task takes an input of type {type(value).__name__}, which a custom op cannot.")
    return value


def _schema_type(value) -> str:
    import torch
    if isinstance(value, torch.Tensor):
        return "Tensor"
    for kind, name in ((bool, "bool"), (int, "int"), (float, "float")):
        if isinstance(value, kind):
            return name
    raise UsageError(f"The task takes an input of type {type(value).__name__}, which a custom op cannot.")


def class_name(op: str) -> str:
    """The drop-in's class name: the op name in CamelCase (swish_bias: SwishBias)."""
    name = "".join(part[:1].upper() + part[1:] for part in op.split("_") if part)
    return name if name.isidentifier() and name != "Model" else f"{name or 'Op'}Module"


def header(report: dict, verified: Verified, small: bool) -> str:
    """The comment the module opens with: what was verified, and what was measured where."""
    b = report["best"]
    shapes = ", ".join(str(list(s[0])) if isinstance(s, tuple) else repr(s) for s in verified.signature)
    dtypes = sorted({s[1] for s in verified.signature if isinstance(s, tuple)})
    lines = [f"kernelwright export of {Path(report['task']).name} (run {report.get('run')}, candidate #{b['id']}, "
             f"{b['operator']} operator)",
             f"verified shape set: constructor {verified.init}; op arguments "
             f"({', '.join(verified.input_names + [f'{n}' for n in verified.state_names])}) of shapes {shapes}"
             + (" (the task's SMALL_SHAPES)" if small else " (the task's own sizes)"),
             f"dtypes: {', '.join(dtypes) or 'none'}"]
    if b.get("interpreted"):
        lines.append(f"measured on: {b.get('device')}. The verdict is an interpreter one on a CPU: no GPU time was "
                     f"taken and no speedup is claimed; not tamper-proof, races and TF32 not checked. Verify and "
                     f"time it on your GPU (kernelwright eval) before relying on it.")
    elif b.get("ms") is not None:
        speed = [f"{b['ms']:.4g} ms",
                 f"{b['speedup_vs_eager']:.2f}x eager ({b['eager_ms']:.4g} ms)" if b.get("speedup_vs_eager") else "",
                 f"{b['speedup_vs_compile']:.2f}x torch.compile ({b['compile_ms']:.4g} ms)"
                 if b.get("speedup_vs_compile") else ""]
        lines.append(f"measured on: {b.get('device')}: " + ", ".join(s for s in speed if s))
        if report.get("slower_than_eager"):
            lines.append("SLOWER THAN EAGER PYTORCH on that device: keep PyTorch unless you measure otherwise.")
    else:
        lines.append(f"measured on: {b.get('device')}: no timing was recorded.")
    lines.append("Other shapes, dtypes, non-contiguous inputs or constructor arguments run the task's reference "
                 "(one warning). Forward only: backward is not defined.")
    return "".join(f"# {line}\n" for line in lines)


def render(name: str, cls: str, report: dict, best_source: str, task_source: str, verified: Verified,
           small: bool) -> str:
    """The module's text: header, best.py verbatim, then the op and the drop-in around it."""
    future = [ln for ln in best_source.splitlines() if ln.startswith("from __future__ import")]
    body = "\n".join(ln for ln in best_source.splitlines() if ln not in future)
    params = ", ".join(verified.input_names + [f"s{i}" for i in range(len(verified.state_names))])
    glue = GLUE.format(name=name, cls=cls, params=params, inputs=", ".join(verified.input_names),
                       n_inputs=len(verified.input_names), schema=verified.schema,
                       reference=repr(task_source), init=repr(verified.init), state=repr(verified.state_names),
                       signature=repr(verified.signature))
    return header(report, verified, small) + "".join(ln + "\n" for ln in future) + \
        f"# ---- the kernel: best.py of the run, verbatim\n{body}\n\n{glue}"


GLUE = '''
# ---- the export: torch.ops.{name} and the drop-in {cls}
import inspect as _kw_inspect  # noqa: E402
import sys as _kw_sys  # noqa: E402
import types as _kw_types  # noqa: E402
import warnings as _kw_warnings  # noqa: E402

import torch as _kw_torch  # noqa: E402
from torch._subclasses.fake_tensor import unset_fake_temporarily as _kw_real_mode  # noqa: E402
from torch.func import functional_call as _kw_functional_call  # noqa: E402

KW_OP_NAME = "{name}"
KW_INIT = {init}  # the constructor arguments the kernel was verified with
KW_STATE = {state}  # the module's parameters and buffers, in op argument order
KW_VERIFIED = {{{signature}}}  # per verified call: (shape, dtype, contiguous) per tensor argument, else the value

# The task file, verbatim: its Model is the reference the fallback runs and the drop-in's base class.
_KW_REFERENCE_SOURCE = {reference}
_kw_reference = _kw_sys.modules.setdefault(__name__ + "_reference", _kw_types.ModuleType(__name__ + "_reference"))
exec(compile(_KW_REFERENCE_SOURCE, "<" + __name__ + " reference>", "exec"), _kw_reference.__dict__)
_kw_hosts = {{}}
_kw_warned = []


class KernelFallbackWarning(UserWarning):
    """A call ran the task's reference instead of the kernel, because the kernel was not verified for it."""


def _kw_host(kind, device):
    """A module whose forward runs with the op's tensors swapped in: ModelNew (the kernel) or the reference Model,
    built once per device with the verified constructor arguments."""
    if (kind, device) not in _kw_hosts:
        with _kw_real_mode(), _kw_torch.device(device):
            model = (ModelNew if kind == "kernel" else _kw_reference.Model)(*KW_INIT)
        _kw_hosts[kind, device] = model.eval()
    return _kw_hosts[kind, device]


def _kw_signature(args):
    return tuple((tuple(a.shape), str(a.dtype).removeprefix("torch."), a.is_contiguous())
                 if isinstance(a, _kw_torch.Tensor) else a for a in args)


def _kw_fresh(out, args, fake=False):
    """The output with any tensor that shares memory with an argument copied (a custom op must not alias); under
    fake tensors, where memory cannot be read, every output is copied."""
    ptrs = set() if fake else {{a.untyped_storage().data_ptr() for a in args if isinstance(a, _kw_torch.Tensor)}}
    one = isinstance(out, _kw_torch.Tensor)
    outs = [o.clone() if fake or o.untyped_storage().data_ptr() in ptrs else o for o in ((out,) if one else out)]
    return outs[0] if one else tuple(outs)


def _kw_call(kind, args, fake=False):
    device = next((a.device for a in args if isinstance(a, _kw_torch.Tensor)), _kw_torch.device("cpu"))
    state = dict(zip(KW_STATE, args[{n_inputs}:]))
    return _kw_fresh(_kw_functional_call(_kw_host(kind, device), state, tuple(args[:{n_inputs}])), args, fake)


def _kw_fallback_warning(what):
    if not _kw_warned:
        _kw_warned.append(what)
        _kw_warnings.warn(f"{{KW_OP_NAME}}: {{what}} was not verified for the Triton kernel; running the task's "
                          f"PyTorch reference instead (said once).", KernelFallbackWarning, stacklevel=3)


@_kw_torch.library.custom_op(KW_OP_NAME, mutates_args=(), schema="{schema}")
def kw_op({params}):
    """The kernel on a verified call, the task's reference (with one warning) on any other."""
    args = ({params},)
    if _kw_signature(args) in KW_VERIFIED:
        return _kw_call("kernel", args)
    _kw_fallback_warning("a call with " + ", ".join(f"{{s[1]}}{{list(s[0])}}{{'' if s[2] else ' (strided)'}}"
                                                    if isinstance(s, tuple) else repr(s) for s in _kw_signature(args)))
    return _kw_call("reference", args)


@kw_op.register_fake
def _kw_op_fake({params}):
    return _kw_call("reference", ({params},), fake=True)


class {cls}(_kw_reference.Model):
    """Drop-in for the task's Model: the same constructor and parameters; forward calls torch.ops.{name}. With
    constructor arguments other than the verified ones it runs the reference's forward (one warning)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        bind = _kw_inspect.signature(_kw_reference.Model).bind
        given, verified = bind(*args, **kwargs), bind(*KW_INIT)
        given.apply_defaults()
        verified.apply_defaults()
        self.kw_verified_init = given.arguments == verified.arguments
        if not self.kw_verified_init:
            _kw_fallback_warning(f"the constructor arguments {{dict(given.arguments)}}")

    def forward(self, {inputs}):
        if not self.kw_verified_init:
            return super().forward({inputs})
        state = dict(self.named_parameters()) | dict(self.named_buffers())
        return kw_op({inputs}, *[state[k] for k in KW_STATE])


{cls}.__init__.__signature__ = _kw_inspect.signature(_kw_reference.Model.__init__)
'''
