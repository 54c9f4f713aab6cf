"""Task analysis: trace a task's reference Model to an ATen graph and describe it.

    a = analyze("tasks/07_rms_norm.py", small=True)
    a.family, a.roofline, a.dominant_bytes_op, a.to_json()

The task module is executed fresh (SMALL_SHAPES applied when `small`, then `shapes` overrides), the Model
is built under torch.manual_seed(0) and traced by the first capture that succeeds (CAPTURES: make_fx over
fake tensors, then allowing real constants, then over a model built on the CPU, then over real tensors, then
torch.export). Small shapes build the model on the CPU; full shapes build it on the meta device where it
can be, so a GPU-scale task costs no memory here. The model's parameters, buffers and tensor attributes are
graph placeholders; `Traced.access` gives the Python expression a candidate reads each from `self` with
(self.network[0].weight). The description: every ATen op in order with shapes and dtypes, reduction axes,
the pointwise chains that can fuse, FLOPs (flop_counter for matmul/conv, one per element otherwise) and bytes
per op, the op dominating each, the minimum traffic (inputs and parameters read once, outputs written once),
the roofline class against an arch's ridge point, and a family guess. `trace()` is shared with agent/templates, which traces with decompositions.
"""
from __future__ import annotations

import contextlib
import functools
import inspect
import io
import keyword
import logging
import math
import operator
import sys
import types
from dataclasses import asdict, dataclass, field, fields, is_dataclass
from pathlib import Path

import torch
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv
from torch.func import functional_call
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode

from agent import attention_ops, checked_ops, recurrent_ops
from tools.language import refused_on_self
from tools.task import output_fault

aten = torch.ops.aten

# (peak fp32 FLOP/s, peak DRAM B/s). A CPU is classed by intensity against the sm_90 ridge point.
PEAKS = {"sm_90": (51e12, 4.27e12)}
FAMILIES = ("elementwise", "softmax", "norm", "reduction", "argreduce", "scan", "pooling", "loss", "matvec",
            "matmul", "gemm_epilogue", "conv", "recurrent", "attention", "unknown")

REDUCTIONS = {"sum", "mean", "amax", "amin", "max", "min", "prod", "var", "std", "var_mean", "logsumexp",
              "linalg_vector_norm", "norm", "any", "all"}
ARGREDUCTIONS = {"argmax", "argmin"}
SCANS = {"cumsum", "cumprod", "logcumsumexp", "cummax", "cummin"}
MATMULS = {"mm", "addmm", "bmm", "baddbmm", "matmul", "linear", "dot", "mv", "addmv"}
CONVS = {"convolution", "_convolution", "conv2d", "conv1d"}
RECURRENT = {"lstm": 4, "gru": 3, "rnn_tanh": 1, "rnn_relu": 1}  # gates per unit
ATTENTION = {"attention", "_scaled_dot_product_flash_attention_for_cpu"}  # agent/attention_ops.py
POOLS = {"max_pool2d_with_indices", "max_pool1d", "max_pool2d", "avg_pool2d", "avg_pool1d", "max_pool3d_with_indices",
         "avg_pool3d", "adaptive_avg_pool2d", "_adaptive_avg_pool2d", "adaptive_max_pool2d"}
NORMS = {"native_layer_norm", "native_group_norm", "native_batch_norm", "_native_batch_norm_legit",
         "_native_batch_norm_legit_no_training", "_native_batch_norm_legit_functional"}
SOFTMAXES = {"_softmax", "_log_softmax"}
LOSSES = {"mse_loss", "huber_loss", "smooth_l1_loss", "l1_loss", "nll_loss_forward", "nll_loss2d_forward",
          "kl_div", "binary_cross_entropy", "binary_cross_entropy_with_logits", "soft_margin_loss",
          "hinge_embedding_loss", "margin_ranking_loss", "cosine_embedding_loss", "triplet_margin_loss"}
VIEWS = {"view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "permute", "t", "transpose",
         "select", "slice", "detach", "alias", "clone", "lift_fresh_copy", "contiguous", "getitem", "flatten",
         "unflatten", "as_strided", "split", "chunk", "unbind", "expand_as", "view_as", "_reshape_alias"}
PER_ELEMENT_FLOPS = {"softmax": 5, "norm": 8, "loss": 3, "pool": 1, "scan": 1, "reduction": 1, "argreduce": 1,
                     "pointwise": 1}


@dataclass
class TensorInfo:
    name: str
    shape: list[int]
    dtype: str


@dataclass
class OpInfo:
    index: int
    name: str  # the FX node's name
    target: str  # "aten.add.Tensor"
    kind: str  # pointwise, reduction, argreduce, scan, matmul, conv, pool, norm, softmax, loss, view, factory, other
    inputs: list[list[int]]  # shapes of the tensor arguments
    shape: list[int]  # the (first) output's shape
    dtype: str
    axes: list[int] | None = None  # reduction / scan / softmax axes, non-negative
    flops: float = 0.0
    bytes: float = 0.0


@dataclass
class TaskAnalysis:
    name: str
    small: bool
    shapes: dict  # the module globals overridden (SMALL_SHAPES and `shapes`)
    arch: str
    tf32: bool
    inputs: list[TensorInfo]
    params: list[TensorInfo]  # parameters and buffers the forward reads
    outputs: list[TensorInfo]
    ops: list[OpInfo]
    reduction_axes: list[list[int]]  # per reduction-like op, in order
    fusable_chains: list[list[str]]  # connected pointwise ops (node names), each fusable into one pass
    dominant_flops_op: str | None
    dominant_bytes_op: str | None
    total_flops: float
    min_bytes: float
    intensity: float  # total_flops / min_bytes
    ridge: float  # peak FLOP/s / peak B/s of the arch
    roofline: str  # "memory" or "compute"
    floor_s: float  # max(flops / peak, bytes / bandwidth)
    family: str
    dtype: str | None = None  # the cast the evaluator applies (TaskSpec.dtype); None: the task's own dtypes
    shape_sets: list = field(default_factory=list)  # TaskSpec.shape_sets: more shapes every candidate is verified
    # at, so the templates build shape-general kernels where they can (params["shapes"] = "dynamic")
    source: str = field(repr=False, default="")
    module: types.ModuleType | None = field(repr=False, compare=False, default=None)

    def to_json(self) -> dict:
        skip = ("module", "source")
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self) if f.name not in skip}


def _plain(value):
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return value


@dataclass
class Traced:
    """An ATen graph of a task's forward, with what each placeholder stands for."""

    gm: torch.fx.GraphModule
    roles: list[tuple[str, str]]  # per placeholder: ("param"|"buffer"|"attribute", "linear.weight") or ("input", "x")
    arg_names: list[str]  # the forward's parameter names
    constants: dict  # non-tensor forward arguments, by name
    model: torch.nn.Module
    out_spec: object  # pytree spec of the forward's return value
    capture: str = "make_fx"  # which of CAPTURES produced the graph

    def access(self, path: str) -> str:
        """The Python expression that reads the model state at `path` ("network.0.weight") from `self`."""
        return attribute_expr(self.model, path)

    def attribute_path(self, tensor: torch.Tensor) -> str | None:
        """Where on the model a tensor the graph holds as a constant lives (a tensor in a list attribute), or None."""
        for prefix, mod in self.model.named_modules():
            for key, value in vars(mod).items():
                items = enumerate(value) if isinstance(value, (list, tuple)) else \
                    value.items() if isinstance(value, dict) else [(None, value)]
                for index, item in items:
                    if item is tensor:
                        return prefix + ("." if prefix else "") + key + ("" if index is None else f".{index}")
        return None


def attribute_expr(root, path: str) -> str:
    """`self.network[0].weight` for "network.0.weight": attribute access where Python allows it, an index into
    a ModuleList, Sequential, list or dict, and getattr with a constant name otherwise."""
    if any(refused_on_self(part) for part in path.split(".")):
        # a buffer a module keeps private (spectral norm's _u), or one under a submodule named as a tensor method
        # (a recommender's `item` embedding): the candidate language refuses those names, so it is looked up by path
        owner, _, name = path.rpartition(".")
        module = root.get_submodule(owner)
        if name in module._buffers:
            return f"self.get_buffer({path!r})"
        if name in module._parameters:
            return f"self.get_parameter({path!r})"
    expr, obj = "self", root
    for part in path.split("."):
        if isinstance(obj, (list, tuple)):
            obj, expr = obj[int(part)], f"{expr}[{part}]"
            continue
        if isinstance(obj, (dict, torch.nn.ModuleDict, torch.nn.ParameterDict)):
            obj, expr = obj[part], f"{expr}[{part!r}]"
            continue
        child = getattr(obj, part)
        if part.isdigit() and isinstance(obj, (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ParameterList)) \
                and int(part) < len(obj) and obj[int(part)] is child:
            expr = f"{expr}[{part}]"
        elif part.isidentifier() and not keyword.iskeyword(part):
            expr = f"{expr}.{part}"
        else:
            expr = f"getattr({expr}, {part!r})"
        obj = child
    return expr


def load_task(source_or_path: str, small: bool, shapes: dict | None = None) -> tuple[types.ModuleType, str, dict]:
    """Executes a task's source as a fresh module with its shape overrides; returns (module, source, overrides).
    The module is importable by name while it executes (dataclasses and pickling look their class's module up)."""
    text, filename = source_or_path, "<task>"
    if "\n" not in source_or_path and source_or_path.endswith(".py") and Path(source_or_path).is_file():
        text, filename = Path(source_or_path).read_text(), source_or_path
    module = types.ModuleType("kw_analysis_task")
    module.__file__ = filename
    previous = sys.modules.get(module.__name__)
    sys.modules[module.__name__] = module
    try:
        exec(compile(text, filename, "exec"), module.__dict__)
    finally:
        if previous is None:
            sys.modules.pop(module.__name__, None)
        else:
            sys.modules[module.__name__] = previous
    for required in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, required):
            raise ValueError(f"The task does not define {required} (KernelBench format).")
    overrides = dict(getattr(module, "SMALL_SHAPES", {}) if small else {})
    overrides.update(shapes or {})
    for key, value in overrides.items():
        if key not in module.__dict__:
            raise ValueError(f"Shape override {key!r} is not a global of the task.")
        setattr(module, key, value)
    return module, text, overrides


# --- tracing -----------------------------------------------------------------------------------------
REAL_LIMIT = 1 << 30  # bytes the real-tensor capture may allocate building the model and inputs at full shapes


class TraceError(RuntimeError):
    """No capture could trace the task; the message names each capture and why it failed, in one sentence."""


class TaskFault(TraceError):
    """The task's own code fails, or its forward returns no tensor to compute: bad input, not a limit of ours."""


class _Skipped(Exception):
    """A capture that did not try (the task is too large for it)."""


# how each capture says the forward read a value out of a tensor it traced (an `if` on a tensor, .item(), a
# tensor given where an int goes: a size, as pack_padded_sequence's lengths)
DATA_DEPENDENT = ("GuardOnDataDependentSymNode", "_local_scalar_dense", "but got FakeTensor")


def trace(module: types.ModuleType, *, meta: bool, decompositions: dict | None = None,
          dtype: str | None = None) -> Traced:
    """The ATen graph of Model(*get_init_inputs()).forward(*get_inputs()), built under manual_seed(0), from the
    first capture in CAPTURES that succeeds. meta=True builds the model on the meta device (no memory, no
    values) where a capture can. `dtype` casts the floating parameters, buffers and inputs as the evaluator
    does for a task list's or --dtype's cast (tools/worker.py, tools/inputs.py). Parameters, buffers and
    tensors stored as plain module attributes (an RNN's initial hidden state) are placeholders of the graph,
    read by a candidate from `self`."""
    failures = []
    table = {**(decompositions or {}), **attention_ops.DECOMPOSITIONS}  # attention: one node per call
    for name, capture in CAPTURES:
        try:
            with recurrent_ops.kept(), attention_ops.kept(), checked_ops.replaced(), _quiet_fake_tensors():
                traced = capture(module, meta, table, dtype=dtype)
        except _Skipped as e:
            failures.append(f"{name} skipped ({e})")
            continue
        except Exception as e:
            failures.append(f"{name} failed ({type(e).__name__}: {_first_line(e)})")
            continue
        traced.gm.graph.eliminate_dead_code()
        traced.gm.recompile()
        traced.capture = name
        return traced
    if failures and all(any(m in f for m in DATA_DEPENDENT) for f in failures if "skipped" not in f):
        raise TraceError("The forward branches on the values in its tensors (a tensor used as a Python bool or "
                         "number, as in `if torch.any(x < 0)`), which a traced kernel cannot follow.")
    fault = _eager_fault(module)
    if fault:
        raise TaskFault(fault)
    raise TraceError("The task could not be traced: " + "; ".join(failures) + ".")


@contextlib.contextmanager
def _quiet_fake_tensors():
    """FakeTensorMode logs a traceback for each op that fails on fake tensors before it raises, and the shape
    solver the graph so far for a tensor read as a Python bool; a capture that fails says why in its own failure,
    so the log would only repeat it on the terminal."""
    loggers = [logging.getLogger(n) for n in ("torch._subclasses.fake_tensor", "torch.fx.experimental.symbolic_shapes")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:200].rstrip(".") if text else "no message"


def _eager_fault(module: types.ModuleType) -> str | None:
    """Where the task's own code raises, run as written on the CPU (within REAL_LIMIT bytes), or its forward
    returns no tensor: one sentence. None where it runs, or is too large to try."""
    stage = "Model(*get_init_inputs())"
    try:
        torch.manual_seed(0)
        with _Budget(REAL_LIMIT), torch.no_grad():
            model = module.Model(*module.get_init_inputs())
            stage = "get_inputs()"
            inputs = list(module.get_inputs())
            stage = "the forward on get_inputs()"
            out = model(*inputs)
    except _Skipped:
        return None
    except Exception as e:
        return f"The task's own code fails: {stage} raised {type(e).__name__}: {_first_line(e)}."
    return output_fault(out)


def _build(module: types.ModuleType, meta: bool, limit: int | None = None,
           dtype: str | None = None) -> tuple[torch.nn.Module, list]:
    """Model(*get_init_inputs()) and get_inputs() under manual_seed(0), on the meta device or on the CPU within
    `limit` bytes (measured on the meta device first where the model builds there), floating tensors cast to
    `dtype` as the evaluator casts them (the model built first, then cast)."""
    if limit:
        try:
            model, inputs = _build(module, True, dtype=dtype)
        except Exception:  # it may not build on the meta device (.item() in __init__): build it and count
            model = inputs = None
        if model is not None:
            tensors = [t for _, _, t in _state(model)] + [x for x in inputs if isinstance(x, torch.Tensor)]
            if sum(t.numel() * t.element_size() for t in tensors) > limit:
                raise _Skipped(f"the model and inputs at the task's shapes take more than {limit >> 30} GiB")
    torch.manual_seed(0)
    with torch.device("meta") if meta else _Budget(limit) if limit else contextlib.nullcontext():
        model, inputs = module.Model(*module.get_init_inputs()), list(module.get_inputs())
        # traced as the kernels read them: a candidate makes its inputs contiguous (templates/program.py)
        inputs = [x.contiguous() if isinstance(x, torch.Tensor) else x for x in inputs]
    _fixed_momentum(model)
    if dtype is None:
        return model, inputs
    cast = getattr(torch, dtype)
    return model.to(cast), [x.to(cast) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                            for x in inputs]


def _fixed_momentum(model: torch.nn.Module) -> None:
    """A batch norm with momentum=None keeps a cumulative average: its factor, 1 / the batches seen, is a buffer
    read as a Python number, which no capture can follow. It moves only the running statistics, whose updates
    the kernels leave out, so the traced copy takes a fixed factor; the outputs are the same."""
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.momentum is None:
            m.momentum = 0.1


def _state(model: torch.nn.Module) -> list[tuple[str, str, torch.Tensor]]:
    """(role, path, tensor) of the model's parameters, buffers and plain tensor attributes, each tensor once."""
    named = [("param", n, t) for n, t in model.named_parameters()]
    named += [("buffer", n, t) for n, t in model.named_buffers()]
    seen = {id(t) for _, _, t in named}
    for prefix, mod in model.named_modules():
        for key, value in vars(mod).items():
            if isinstance(value, torch.Tensor) and id(value) not in seen:
                seen.add(id(value))
                named.append(("attribute", prefix + ("." if prefix else "") + key, value))
    return named


def _make_fx(module, meta: bool, decompositions: dict, *, build: str = "", real: bool = False,
             constants: bool = False, dtype: str | None = None) -> Traced:
    """make_fx over a functional call of the model: its state and the tensor inputs are the graph's
    placeholders. The model is built on the meta device when `meta`, unless `build` is "real" (on the CPU, at
    most REAL_LIMIT bytes). Fake placeholders live on the CPU even for a meta-built model, so a tensor the
    forward creates on its input's device is a constant with a value; `real` traces real tensors instead."""
    if build == "real" and not meta:
        raise _Skipped("the model is built on the CPU already")
    on_meta = meta and not real and build != "real"
    model, inputs = _build(module, on_meta, REAL_LIMIT if meta and not on_meta else None, dtype)
    arg_names = list(inspect.signature(model.forward).parameters)[:len(inputs)]
    named = _state(model)
    tensor_pos = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)]
    placeholders = [t for _, _, t in named] + [inputs[i] for i in tensor_pos]
    if not real:
        mode = FakeTensorMode(allow_non_fake_inputs=constants, allow_fallback_kernels=True, static_shapes=True,
                              shape_env=ShapeEnv())
        with mode:
            placeholders = [torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="cpu")
                            .requires_grad_(t.requires_grad) for t in placeholders]
    out_spec = []

    def forward(state: list, *tensors):
        args = list(inputs)
        for i, t in zip(tensor_pos, tensors):
            args[i] = t
        out = functional_call(model, {n: t for (_, n, _), t in zip(named, state)}, tuple(args))
        out_spec.append(torch.utils._pytree.tree_flatten(out)[1])
        return out

    state = placeholders[:len(named)]
    gm = make_fx(forward, tracing_mode="real" if real else "fake", decomposition_table=decompositions,
                 _allow_non_fake_inputs=constants)(state, *placeholders[len(named):])
    roles = [(kind, name) for kind, name, _ in named] + [("input", arg_names[i]) for i in tensor_pos]
    constants_ = {arg_names[i]: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
    return Traced(gm, roles, arg_names, constants_, model, out_spec[-1])


class _Budget(TorchDispatchMode):
    """Counts the bytes of the storages the ops inside it create; stops the work once they pass `limit`."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit, self.used, self.seen = limit, 0, set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in torch.utils._pytree.tree_leaves(out):
            if isinstance(t, torch.Tensor) and t.device.type != "meta" and not isinstance(t, FakeTensor):
                storage = t.untyped_storage()
                if storage.data_ptr() not in self.seen:
                    self.seen.add(storage.data_ptr())
                    self.used += storage.nbytes()
        if self.used > self.limit:
            raise _Skipped(f"the model and inputs at the task's shapes take more than {self.limit >> 30} GiB")
        return out


def _export(module, meta: bool, decompositions: dict, *, dtype: str | None = None) -> Traced:
    """torch.export of the model, decomposed to the ATen level make_fx gives. Constants the forward creates
    become get_attr nodes; buffer mutations the export returns are dropped (module bookkeeping)."""
    model, inputs = _build(module, meta, dtype=dtype)
    arg_names = list(inspect.signature(model.forward).parameters)[:len(inputs)]
    table = torch.export.default_decompositions()
    for op, fn in decompositions.items():
        table[op] = fn
    with contextlib.redirect_stderr(io.StringIO()):  # a failing export prints its partial graph there; the
        # capture's own failure says why in a sentence
        ep = torch.export.export(model, tuple(inputs), strict=False)
    ep = ep.run_decompositions(table)
    gm, sig = ep.graph_module, ep.graph_signature
    kinds = {"PARAMETER": "param", "BUFFER": "buffer", "CONSTANT_TENSOR": "attribute"}
    user = iter(arg_names[i] for i, x in enumerate(inputs) if isinstance(x, torch.Tensor))
    roles, placeholders = [], [n for n in gm.graph.nodes if n.op == "placeholder"]
    for spec, node in zip(sig.input_specs, placeholders):
        kind = spec.kind.name
        if kind == "USER_INPUT":
            roles.append(("input", next(user)))
        elif kind == "CONSTANT_TENSOR" and not _on_model(model, spec.target):
            gm.register_buffer(spec.target.replace(".", "_"), ep.constants[spec.target])
            with gm.graph.inserting_before(node):
                node.replace_all_uses_with(gm.graph.get_attr(spec.target.replace(".", "_")))
            gm.graph.erase_node(node)
        elif kind in kinds:
            roles.append((kinds[kind], spec.target))
        else:
            raise ValueError(f"the export has an input of kind {kind}")
    output = next(n for n in gm.graph.nodes if n.op == "output")
    keep = [o for o, spec in zip(output.args[0], sig.output_specs) if spec.kind.name == "USER_OUTPUT"]
    output.args = (tuple(keep),)
    constants = {arg_names[i]: x for i, x in enumerate(inputs) if not isinstance(x, torch.Tensor)}
    return Traced(gm, roles, arg_names, constants, model, ep.call_spec.out_spec)


def _on_model(model: torch.nn.Module, path: str) -> bool:
    try:
        functools.reduce(getattr, path.split("."), model)
    except AttributeError:
        return False
    return True


CAPTURES = [  # (name, capture), tried in order
    ("make_fx", functools.partial(_make_fx, constants=False)),
    ("make_fx with non-fake constants", functools.partial(_make_fx, constants=True)),
    ("make_fx of a model built on the CPU", functools.partial(_make_fx, build="real", constants=True)),
    ("make_fx with real tensors", functools.partial(_make_fx, real=True)),
    ("torch.export", _export),
]


def analyze(task_source_or_path: str, small: bool, *, shapes: dict | None = None, arch: str = "sm_90",
            tf32: bool = False, name: str = "", dtype: str | None = None) -> TaskAnalysis:
    """The task traced and described at the shapes (`small`, `shapes`) and the cast (`dtype`: "bfloat16", ...,
    as TaskSpec.dtype) the evaluator will run it at."""
    module, source, overrides = load_task(task_source_or_path, small, shapes)
    traced = trace(module, meta=not small, dtype=dtype)
    gm = traced.gm
    for node in gm.graph.nodes:
        values = node.meta.get("val")
        values = values if isinstance(values, (tuple, list)) else [values]  # torch.unique's (values, counts)
        if any(isinstance(v, torch.Tensor) and not all(isinstance(d, int) for d in v.shape) for v in values):
            raise TraceError(f"The forward makes a tensor whose size depends on its input's values ({node.target}), "
                             "which a kernel of fixed shapes cannot compute.")
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    values = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a
              for a in torch.utils._pytree.tree_leaves(out_node.args[0])]
    spec = traced.out_spec
    fault = output_fault(torch.utils._pytree.tree_unflatten(values, spec) if spec.num_leaves == len(values) else values)
    if fault:
        raise TaskFault(fault)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    used = [(role, n) for role, n in zip(traced.roles, placeholders) if n.users]
    inputs = [_info(r[1], n) for r, n in used if r[0] == "input"]
    params = [_info(r[1], n) for r, n in used if r[0] != "input"]
    outs = [a for a in torch.utils._pytree.tree_leaves(out_node.args[0]) if isinstance(a, torch.fx.Node)]
    outputs = [_info(a.name, a) for a in outs]
    ops = _describe_ops(gm)
    compute = [o for o in ops if o.kind not in ("view", "factory")]
    total_flops = sum(o.flops for o in compute)
    min_bytes = float(sum(_nbytes(n) for _, n in used) + sum(_nbytes(a) for a in outs))
    peak_flops, peak_bw = PEAKS.get(arch, PEAKS["sm_90"])
    ridge = peak_flops / peak_bw
    intensity = total_flops / min_bytes if min_bytes else 0.0
    return TaskAnalysis(
        name=name or Path(getattr(module, "__file__", "task")).stem, small=small, shapes=overrides, arch=arch,
        tf32=tf32, inputs=inputs, params=params, outputs=outputs, ops=ops,
        reduction_axes=[o.axes for o in ops if o.axes is not None and o.kind != "pointwise"],
        fusable_chains=_pointwise_chains(gm, ops),
        dominant_flops_op=max(compute, key=lambda o: o.flops).name if compute else None,
        dominant_bytes_op=max(compute, key=lambda o: o.bytes).name if compute else None,
        total_flops=total_flops, min_bytes=min_bytes, intensity=intensity, ridge=ridge,
        roofline="compute" if intensity > ridge else "memory",
        floor_s=max(total_flops / peak_flops, min_bytes / peak_bw), family=_family(ops, outputs, inputs),
        dtype=dtype, source=source, module=module)


# --- per-op description ------------------------------------------------------------------------------
def _base(target) -> str:
    if target is operator.getitem:
        return "getitem"
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0].rstrip("_") if name != "_" else name


def _kind(target) -> str:
    base = _base(target)
    if base in VIEWS:
        return "view"
    for kind, names in (("recurrent", RECURRENT), ("attention", ATTENTION), ("reduction", REDUCTIONS),
                        ("argreduce", ARGREDUCTIONS), ("scan", SCANS), ("matmul", MATMULS), ("conv", CONVS),
                        ("pool", POOLS), ("norm", NORMS), ("softmax", SOFTMAXES), ("loss", LOSSES)):
        if base in names:
            return kind
    if base in ("empty", "zeros", "ones", "full", "arange", "scalar_tensor", "empty_like", "zeros_like",
                "full_like", "ones_like", "empty_strided"):
        return "factory"
    if isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags:
        return "pointwise"
    if base in ("where", "masked_fill", "clamp", "clamp_min", "clamp_max", "_to_copy", "flip", "gelu", "mish",
                "silu", "hardswish", "hardsigmoid", "hardtanh", "softplus", "elu", "leaky_relu", "relu"):
        return "pointwise"
    return "other"


def _tensors(args) -> list:
    return [a for a in torch.utils._pytree.tree_leaves(args) if isinstance(a, torch.fx.Node)
            and isinstance(a.meta.get("val"), torch.Tensor)]


def _val(node):
    v = node.meta.get("val")
    return v[0] if isinstance(v, (tuple, list)) else v


def _nbytes(node) -> int:
    v = _val(node)
    return v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 0


def _info(name: str, node) -> TensorInfo:
    v = _val(node)
    return TensorInfo(name, list(v.shape), str(v.dtype).replace("torch.", ""))


def _axes(node) -> list[int] | None:
    base = _base(node.target)
    if base not in REDUCTIONS | ARGREDUCTIONS | SCANS | SOFTMAXES and base != "native_layer_norm":
        return None
    rank = _val(node.args[0]).dim() if node.args and isinstance(node.args[0], torch.fx.Node) else 0
    dims = node.kwargs.get("dim", node.args[1] if len(node.args) > 1 else None)
    if base == "native_layer_norm":
        return list(range(rank - len(node.args[1]), rank))
    if base in ("linalg_vector_norm", "norm"):  # the order first (aten.norm.ScalarOpt_dim of pairwise_distance)
        dims = node.args[2] if len(node.args) > 2 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return list(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return sorted(d % max(rank, 1) for d in dims if isinstance(d, int))


def _node_flops(node, kind: str) -> float:
    if kind == "recurrent":  # per step, layer and direction: the gates' input and hidden products
        x, hx, weights = node.args[:3]
        per = 4 if node.args[3] else 2
        batch_steps = _val(x).numel() // _val(x).shape[-1]
        return float(sum(2 * batch_steps * _val(w).numel() for i, w in enumerate(weights) if i % per < 2))
    if kind == "attention":  # the two products, q k^T and p v (a causal mask skips about half of each)
        q, k, v = (_val(a) for a in node.args[:3])
        causal = node.args[4] if len(node.args) > 4 and isinstance(node.args[4], bool) else False
        total = 2.0 * (q.numel() // q.shape[-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])
        return total / 2 if causal else total
    if kind in ("matmul", "conv"):
        args = torch.utils._pytree.tree_map(
            lambda a: torch.empty_strided(_val(a).shape, _val(a).stride(), dtype=_val(a).dtype, device="meta")
            if isinstance(a, torch.fx.Node) and isinstance(_val(a), torch.Tensor) else a, (node.args, node.kwargs))
        counter = FlopCounterMode(display=False)
        with counter:
            node.target(*args[0], **args[1])
        return float(counter.get_total_flops())
    if kind in PER_ELEMENT_FLOPS:
        biggest = max([_val(a).numel() for a in _tensors(node.args)] + [_val(node).numel()])
        if kind == "pool":
            window = node.args[1] if len(node.args) > 1 else [1]
            return float(_val(node).numel() * math.prod(window))
        return float(PER_ELEMENT_FLOPS[kind] * biggest)
    return 0.0


def _describe_ops(gm) -> list[OpInfo]:
    ops = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not isinstance(_val(node), torch.Tensor):
            continue
        kind = _kind(node.target)
        ins = _tensors((node.args, node.kwargs))
        v = _val(node)
        nbytes = 0 if kind in ("view", "factory") else sum(_nbytes(a) for a in ins) + _nbytes(node)
        ops.append(OpInfo(len(ops), node.name, str(node.target), kind, [list(_val(a).shape) for a in ins],
                          list(v.shape), str(v.dtype).replace("torch.", ""), _axes(node),
                          _node_flops(node, kind), float(nbytes)))
    return ops


def _pointwise_chains(gm, ops: list[OpInfo]) -> list[list[str]]:
    """Connected components of pointwise ops (through views): each one can run as one pass over memory."""
    kinds = {o.name: o.kind for o in ops}
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            a = parent[a]
        return a

    members = [n for n in gm.graph.nodes if kinds.get(n.name) == "pointwise"]
    for node in members:
        find(node.name)
        for a in _tensors(node.args):
            src = a
            while kinds.get(src.name) == "view" and _tensors(src.args):
                src = _tensors(src.args)[0]
            if kinds.get(src.name) == "pointwise":
                parent[find(src.name)] = find(node.name)
    groups: dict[str, list[str]] = {}
    for node in members:
        groups.setdefault(find(node.name), []).append(node.name)
    return list(groups.values())


def _family(ops: list[OpInfo], outputs: list[TensorInfo], inputs: list[TensorInfo]) -> str:
    compute = [o for o in ops if o.kind not in ("view", "factory")]
    kinds = {o.kind for o in compute}
    bases = {o.target.split(".")[1] if o.target.startswith("aten.") else o.target for o in compute}
    if not compute:
        return "unknown"
    if "recurrent" in kinds:
        return "recurrent"
    if "conv" in kinds:
        return "conv"
    if "attention" in kinds:
        return "attention"
    if "matmul" in kinds:
        mm = next(o for o in compute if o.kind == "matmul")
        operands = mm.inputs[1:] if "addmm" in mm.target or "baddbmm" in mm.target else mm.inputs
        if len(mm.shape) < 2 or mm.shape[-1] == 1 or mm.shape[-2] == 1 or any(len(s) == 1 for s in operands):
            return "matvec"
        return "gemm_epilogue" if len(compute) > 1 else "matmul"
    if "pool" in kinds:
        return "pooling"
    if "scan" in kinds:
        return "scan"
    scalar_out = all(len(o.shape) == 0 for o in outputs)
    if "loss" in kinds or (scalar_out and len(inputs) >= 2 and kinds & {"reduction", "softmax"}):
        return "loss"
    if "norm" in kinds or "linalg_vector_norm" in bases or (
            "reduction" in kinds and bases & {"rsqrt", "sqrt"} and outputs and len(outputs[0].shape) >= 1
            and any(outputs[0].shape == i.shape for i in inputs)):
        return "norm"
    if "softmax" in kinds:
        return "softmax"
    if "argreduce" in kinds:
        return "argreduce"
    if "reduction" in kinds:
        return "reduction"
    if kinds == {"pointwise"}:
        return "elementwise"
    return "unknown"
