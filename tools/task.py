"""Task files (KernelBench format) and suites: a folder of task files or a TOML list with overrides."""
from __future__ import annotations

import ast
import importlib.util
import sys
import tomllib
from pathlib import Path
from types import ModuleType

from tools.results import TaskSpec

REQUIRED = ("Model", "get_inputs", "get_init_inputs")
OVERRIDE_KEYS = {"path", "name", "dtype", "atol", "rtol", "shapes", "shape_sets", "tf32", "small", "scale_inputs"}
DTYPES = ("float32", "float16", "bfloat16", "float64")
RUN_DTYPES = ("float32", "bfloat16", "float16")  # what optimize, batch and ci offer as --dtype


class TaskError(Exception):
    """A task file or suite that cannot be used; the message is one sentence for a person."""


def add_dtype_option(parser) -> None:
    """--dtype for the commands that search: the same cast a task list's `dtype` gives every task."""
    parser.add_argument("--dtype", choices=RUN_DTYPES, help="cast the tasks' floating inputs and parameters to "
                                                            "this dtype (default: the tasks' own, or the task list's)")


def add_shapes_option(parser, scope: str = "") -> None:
    """--shapes for the commands that evaluate: verify every candidate at several sets of the task's shape
    globals (TaskSpec.shape_sets), besides the task's own. `scope`: which tasks it applies to, where several run."""
    parser.add_argument("--shapes", action="append", metavar="NAME=V1,V2,...",
                        help="also verify at these values of a shape global of the task, one shape set per value "
                             "(e.g. batch_size=1,7,64); repeat for more globals, whose values pair up in order"
                             + (f"; {scope}" if scope else ""))


def parse_shape_sets(texts: list[str] | None) -> list[dict[str, int]]:
    """`--shapes` values, ["batch_size=1,7,64", "dim=33"], as shape sets: [{"batch_size": 1, "dim": 33}, ...]; the
    i-th value of each name goes into set i, a name with one value into every set. TaskError if malformed."""
    columns: dict[str, list[int]] = {}
    for text in texts or []:
        name, eq, values = text.partition("=")
        try:
            parsed = [int(v) for v in values.split(",")]
        except ValueError:
            parsed = []
        if not eq or not name.strip().isidentifier() or not parsed or name.strip() in columns:
            raise TaskError(f"--shapes takes NAME=V1,V2,... with integer values, each name once, not {text!r}.")
        columns[name.strip()] = parsed
    count = max((len(v) for v in columns.values()), default=0)
    if any(len(v) not in (1, count) for v in columns.values()):
        raise TaskError("--shapes: every name needs as many values as the others, or one value.")
    return [{name: v[i] if len(v) > 1 else v[0] for name, v in columns.items()} for i in range(count)]


def check_task_file(path: str | Path) -> None:
    """Checks a task file without running it: it parses and defines Model, get_inputs, get_init_inputs."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"Task file {path} does not exist.")
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError) as e:
        raise TaskError(f"Task file {path} is not valid Python ({e}).") from None
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
    missing = [n for n in REQUIRED if n not in names]
    if missing:
        raise TaskError(f"Task file {path} does not define {', '.join(missing)} (KernelBench format needs "
                        f"Model, get_inputs and get_init_inputs).")


def check_spec(spec: TaskSpec) -> None:
    check_task_file(spec.path)
    if spec.dtype is not None and spec.dtype not in DTYPES:
        raise TaskError(f"Task {spec.path}: dtype {spec.dtype!r} is not one of {', '.join(DTYPES)}.")
    if spec.shape_sets:
        tree = ast.parse(Path(spec.path).read_text())
        names = {t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)}
        unknown = sorted({k for s in spec.shape_sets for k in s} - names)
        if unknown:
            raise TaskError(f"Task {spec.path}: shape set names {', '.join(unknown)}, not a global of the task file.")


def output_fault(out) -> str | None:
    """Why a task's outputs cannot judge a kernel, in one sentence, or None: its forward returns a tensor or a
    tuple (list, dict) of tensors, and every tensor has elements."""
    import torch
    leaves = torch.utils._pytree.tree_leaves(out)
    tensors = [x for x in leaves if isinstance(x, torch.Tensor)]
    if not tensors:
        what = "nothing" if not leaves else _kind(out) if len(leaves) == 1 else (
            f"a {type(out).__name__} of {', '.join(sorted({_kind(x) for x in leaves}))}")
        return (f"The task's forward returns {what}, not a tensor: a kernel computes tensors, so a task's forward "
                f"must return a tensor or a tuple of tensors.")
    empty = next((i for i, x in enumerate(tensors) if x.numel() == 0), None)
    if empty is not None:
        return (f"The task's output {empty} has no elements (shape {tuple(tensors[empty].shape)}): there is nothing "
                f"for a kernel to compute, so no verdict can be given.")
    return None


def _kind(value) -> str:
    import torch
    if value is None:
        return "None"
    if isinstance(value, (bool, int, float, torch.SymBool, torch.SymInt, torch.SymFloat)):
        return "a Python number"
    return f"a {type(value).__name__}"


def import_file(path: str | Path, module_name: str) -> ModuleType:
    """Executes a Python file as a fresh module (registered, so Triton can read kernel sources)."""
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def load_task_module(spec: TaskSpec, small: bool, shape_set: dict | None = None,
                     module_name: str = "kw_task") -> ModuleType:
    """The task as a module, its shape globals set: SMALL_SHAPES where `small`, then the spec's `shapes`, then
    `shape_set` (one of spec.shape_sets)."""
    module = import_file(spec.path, module_name)
    shapes = dict(getattr(module, "SMALL_SHAPES", {}) if small else {})
    shapes.update(spec.shapes)
    shapes.update(shape_set or {})
    for name, value in shapes.items():
        if not hasattr(module, name):
            raise TaskError(f"Task {spec.path}: shape override {name!r} is not a global of the task file.")
        setattr(module, name, value)
    return module


def load_suite(path: str | Path) -> list[TaskSpec]:
    """A folder of task files (KernelBench's own folders work as they are) or a TOML task list."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.glob("*.py") if not p.name.startswith("_"))
        specs = [TaskSpec(path=str(p), name=p.stem) for p in files]
    elif path.suffix == ".toml" and path.is_file():
        specs = _load_toml(path)
    elif path.suffix == ".py" and path.is_file():
        specs = [TaskSpec(path=str(path), name=path.stem)]
    else:
        raise TaskError(f"{path} is neither a task file, a folder of task files, nor a TOML task list.")
    if not specs:
        raise TaskError(f"{path} holds no task files.")
    for s in specs:
        check_spec(s)
    return specs


def _load_toml(path: Path) -> list[TaskSpec]:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise TaskError(f"Suite {path} is not valid TOML ({e}).") from None
    specs = []
    for i, entry in enumerate(data.get("task", [])):
        unknown = set(entry) - OVERRIDE_KEYS
        if "path" not in entry or unknown:
            what = f"unknown keys {sorted(unknown)}" if unknown else "no path"
            raise TaskError(f"Suite {path}: task entry {i + 1} has {what}.")
        entry = dict(entry)
        entry["path"] = str((path.parent / entry["path"]).resolve())
        entry.setdefault("name", Path(entry["path"]).stem)
        specs.append(TaskSpec(**entry))
    return specs
