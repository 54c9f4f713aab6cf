"""Whether a worker process is still clean: a cheap snapshot of the global state a candidate could change to
sway later verdicts (identities, not copies), and the differences between two snapshots in words.

A persistent worker takes one snapshot before a candidate's code runs and one after its evaluation; any
difference rejects the candidate and replaces the worker (tools/worker.py, tools/forkserver.py).

    watch = StateWatch()
    watch.start()             # the evaluator has set the job's flags
    watch.candidate_starts()  # just before the candidate's module is imported
    changed, clean = watch.finish()
"""
from __future__ import annotations

import sys
import types

import torch

# Namespaces whose every entry's identity is kept: a rebinding anywhere in them changes what later code runs.
WHOLE = ("builtins", "torch.nn.functional", "torch.Tensor", "torch._C.TensorBase", "torch.nn.Module",
         "torch._C._VariableFunctionsClass", "torch.autograd.Function", "triton.runtime.jit.JITFunction",
         "triton.runtime.interpreter.InterpretedFunction", "triton.runtime.interpreter.InterpreterBuilder",
         "triton.runtime.autotuner.Autotuner")
PUBLIC = ("torch", "torch.nn", "torch.linalg", "torch.special", "torch.fft", "torch.nn.init", "math", "triton",
          "triton.language")  # only public names: these modules import lazily what the evaluator uses
EVALUATOR = "tools."  # the evaluator's own modules, every name
# Bookkeeping that Triton and Python do on their own, which no later verdict reads: Triton's driver loads each
# compiled kernel's launcher as the module __triton_launcher; copy and pickle cache a class's __slotnames__;
# Inductor loads each kernel it compiles as a module of compile_tasks, again (a new module) each time the same
# graph is compiled anew, as the evaluator's torch.compile baseline does in a job that measures it after an
# earlier job of the worker did (on an H200 that rejected honest candidates; every compile reloads from disk).
OWN_MODULES = ("__triton_launcher", "torch._inductor.runtime.compile_tasks.")
OWN_NAMES = ("__slotnames__",)


def _resolve(path: str):
    """The object a dotted path names, or None where its module is not imported (nothing to change there)."""
    parts = path.split(".")
    for i in range(len(parts), 0, -1):
        module = sys.modules.get(".".join(parts[:i]))
        if module is not None:
            obj = module
            for p in parts[i:]:
                obj = getattr(obj, p, None)
            return obj
    return None


def _identities(namespace: dict, public: bool) -> dict[str, int]:
    return {k: id(v) for k, v in namespace.items() if not public or not k.startswith("_")}


def _evaluator_contents(module) -> dict[str, object]:
    """What an evaluator module's names hold, where their identities stay: each function's code, its classes'
    too (a swapped `judge.__code__` kept judge's identity), and each constant table's contents (a tolerance
    widened in place kept the dict's)."""
    out: dict[str, object] = {}
    for name, value in vars(module).items():
        if isinstance(value, types.FunctionType):
            out[name] = id(value.__code__)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            out.update({f"{name}.{k}": id(f.__code__) for k, f in vars(value).items()
                        if isinstance(f, types.FunctionType)})
        elif name.isupper() and not name.startswith("_") and isinstance(value, (dict, list, set)):  # not caches
            out[name] = hash(repr(value))
    return out


def precision_flags() -> dict[str, object]:
    """The flags that change how PyTorch rounds matmuls and convolutions: the evaluator sets them for the task
    (TF32 only where the task allows it) and they must hold through every call of the candidate (tools/verify.py)
    and from one job to the next (the snapshot below)."""
    matmul, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    return {"torch.backends.cuda.matmul.allow_tf32": matmul.allow_tf32,
            "torch.backends.cudnn.allow_tf32": cudnn.allow_tf32,
            "float32 matmul precision": torch.get_float32_matmul_precision(),
            "torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction":
                matmul.allow_fp16_reduced_precision_reduction,
            "torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction":
                matmul.allow_bf16_reduced_precision_reduction,
            "torch.backends.cudnn.deterministic": cudnn.deterministic}


def _flags() -> dict[str, object]:
    """Modes and settings that change what the reference computes or how the evaluator sees it."""
    from torch.nn.modules import module as nn_module
    backends = torch.backends
    flags = {
        "grad mode": torch.is_grad_enabled(), "inference mode": torch.is_inference_mode_enabled(),
        "anomaly mode": torch.is_anomaly_enabled(), "default dtype": torch.get_default_dtype(),
        "default device": str(torch.get_default_device()),
        **precision_flags(),
        "torch.backends.cudnn.enabled": backends.cudnn.enabled,
        "torch.backends.cudnn.benchmark": backends.cudnn.benchmark,
        "deterministic algorithms": (torch.are_deterministic_algorithms_enabled(),
                                     torch.is_deterministic_algorithms_warn_only_enabled()),
        "autocast": (torch.is_autocast_enabled("cpu"), torch.is_autocast_enabled("cuda")),
        "dispatch modes": torch._C._len_torch_dispatch_stack(),
        "function modes": torch._C._len_torch_function_stack(),
        "torch function enabled": torch._C._is_torch_function_enabled(),
        "dispatch keys included": str(torch._C._dispatch_tls_local_include_set()),
        "dispatch keys excluded": str(torch._C._dispatch_tls_local_exclude_set()),
        "registered operators": len(torch._C._dispatch_get_all_op_names()),
        "Python operator registrations": (len(torch.library._impls), len(torch.library._defs)),
        "saved-tensor hooks": torch._C._autograd._top_saved_tensors_default_hooks(True) is not None,
        "trace function": id(sys.gettrace()), "profile function": id(sys.getprofile()),
        "import hooks": (tuple(map(id, sys.meta_path)), tuple(map(id, sys.path_hooks))),
    }
    for name, value in vars(nn_module).items():  # the global module hooks (forward, backward, registration)
        if name.startswith("_global_") and isinstance(value, dict):
            flags[f"torch.nn.modules.module.{name}"] = (id(value), tuple(map(id, value.values())))
    return flags


def snapshot() -> dict[str, object]:
    state: dict[str, object] = {f"flag {k}": v for k, v in _flags().items()}
    for path in WHOLE + PUBLIC:
        obj = _resolve(path)
        if obj is not None:
            namespace = vars(obj) if not isinstance(obj, dict) else obj
            state[f"names {path}"] = _identities(namespace, public=path in PUBLIC)
    for name, cls in vars(torch.nn).items():  # the module classes a task builds its reference from
        if isinstance(cls, type) and issubclass(cls, torch.nn.Module) and cls is not torch.nn.Module:
            state[f"class torch.nn.{name}"] = _identities(vars(cls), public=False)
    for name, module in list(sys.modules.items()):
        if name.startswith(EVALUATOR) and module is not None:
            state[f"names {name}"] = _identities(vars(module), public=False)
            state[f"contents {name}"] = _evaluator_contents(module)
    state["modules"] = {name: id(m) for name, m in sys.modules.items()}
    return state


def changes(before: dict, after: dict) -> list[str]:
    """What differs, in words ('torch.softmax was rebound', 'grad mode changed from True to False'); names
    that only appeared (lazy imports) are not changes, names rebound or removed are."""
    out = []
    for key, old in before.items():
        new = after.get(key)
        kind, _, what = key.partition(" ")
        if kind == "flag":
            if new != old:
                out.append(f"{what} changed from {_show(old)} to {_show(new)}")
        elif kind in ("names", "class"):
            for name, ident in old.items():
                if (new is None or new.get(name) != ident) and name not in OWN_NAMES:
                    out.append(f"{what}.{name} was {'rebound' if new and name in new else 'removed'}")
            if (what in WHOLE or kind == "class") and new is not None:
                out += [f"{what}.{name} was added" for name in new.keys() - old.keys() - set(OWN_NAMES)]
        elif kind == "contents" and new is not None:
            out += [f"{what}.{name} was changed in place" for name, held in old.items() if new.get(name, held) != held]
        elif kind == "modules":
            out += [f"the module {name} was replaced in sys.modules" for name, ident in old.items()
                    if new.get(name, ident) != ident and not name.startswith(OWN_MODULES)]
    return out


def _show(value) -> str:
    return repr(value) if not isinstance(value, tuple) or len(value) < 4 else f"{len(value)} entries"


class StateWatch:
    """Snapshots around one job: at its start, before the candidate's code runs, and at its end."""

    def __init__(self):
        self.at_start: dict | None = None
        self.before_candidate: dict | None = None

    def start(self) -> None:
        self.at_start = snapshot()

    def candidate_starts(self) -> None:
        self.before_candidate = snapshot()

    def finish(self) -> tuple[list[str], bool]:
        """(what the candidate changed, whether the process is still clean). Changes made before the
        candidate's code ran (by its task, or the evaluator) are no fault of the candidate's, but a process
        with them is not clean either."""
        if self.at_start is None:
            return [], True
        end = snapshot()
        by_candidate = changes(self.before_candidate, end) if self.before_candidate is not None else []
        return by_candidate, not by_candidate and not changes(self.at_start, end)
