"""What every template module shares: planning (lower + schedule + pick the primary kernel), validation,
rendering, and behaviour descriptors. A family module adds which plans it claims, its parameter space and
its structural variants.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from agent.analysis import TaskAnalysis
from agent.templates.ir import Program, Unsupported, lower
from agent.templates.params import kernel_default, kernel_invalid, kernel_space, sizes
from agent.templates.program import batch_of, render_program, shapes_of, work
from agent.templates.schedule import Kernel, schedule
from agent.templates.stats_epilogue import requested

PLAN_KEYS = ("SPLIT_K", "impl", "precision")  # parameters that change the schedule or the GEMM itself
PRODUCT_KEYS = ("precision", "operands")  # how every tl.dot of the plan multiplies, whichever kernel is tuned
EPILOGUE_FORMS = ("stats", "recompute")  # a Triton convolution's alone (stats_epilogue): refused without one
# How the kernels take a log, an exp, a sigmoid or a tanh (params["logs"]): "sfu", the special function unit's log2
# times ln 2 on a GPU (pointwise_ops' _log: within 2**-21.41 of ln x on [0.5, 2], 3 units in the last place
# elsewhere), its 2^x flushing subnormal results to zero (_exp), that and its reciprocal (_sigmoid, _fast_tanh), the
# default; "libdevice", tl.log (about 30 instructions), tl.exp (6), tl.sigmoid (about 11) and _tanh (about 30).
# The evaluator judges either against the math.
LOGS = ("sfu", "libdevice")
LOG_FNS = ("log", "log10", "xlogy", "sigmoid", "silu", "exp", "softplus", "logaddexp", "sinh", "cosh", "gelu",
           "tanh")


@dataclass
class Plan:
    program: Program
    kernels: list[Kernel]
    buffers: dict
    primary: int

    @property
    def main(self) -> Kernel:
        return self.kernels[self.primary]

    def has(self, op: str) -> bool:
        return any(n.op == op for n in self.program.nodes)

    def half_products(self) -> bool:
        """Whether a GEMM, convolution or attention of the task multiplies 16-bit (bf16, fp16) operands."""
        return any(a.dtype in (torch.float16, torch.bfloat16) for n in self.program.nodes
                   if n.op in ("gemm", "attention") for a in n.args[:3] if a is not None)


def plan(analysis: TaskAnalysis, params: dict | None = None) -> Plan:
    params = params or {}
    program = lower(analysis)
    # streamed convolution tiles hold every output channel, rows tiles BLOCK_N of them: a reduction over them
    # joins the convolution's kernel where one tile holds them all (not beside a norm's statistics in rows tiles)
    holds = params.get("tiles") == "stream" or params.get("tiles") == "rows" and not params.get("stats")
    channels = params.get("BLOCK_N", 0) if holds else 0
    kernels, buffers = schedule(program, split_k=params.get("SPLIT_K", 1), torch_gemm=params.get("impl") == "torch",
                                channels=channels, views=shapes_of(params) != "dynamic")
    primary = max(range(len(kernels)), key=lambda i: (work(kernels[i]), -i))
    reductions = [i for i, k in enumerate(kernels) if k.layout in ("row", "col")]
    if kernels[primary].layout == "flat" and reductions and \
            not any(n.op in ("gemm", "window", "scan", "rnn", "attention") for n in program.nodes):
        # a flat kernel beside reductions (a cat returned with a row's sum): no template takes it as the tuned
        # kernel, and the reduction is the one worth tuning, a flat kernel's defaults running near the copy
        primary = max(reductions, key=lambda i: (work(kernels[i]), -i))
    if kernels[primary].kind == "torch_gemm":  # the tunable kernel is then the largest Triton one
        rest = [i for i, k in enumerate(kernels) if k.kind != "torch_gemm"]
        if not rest:
            raise ValueError("impl torch leaves no Triton kernel: the vendor GEMM would be all of the task's work")
        primary = max(rest, key=lambda i: (work(kernels[i]), -i))
    return Plan(program, kernels, buffers, primary)


def default_plan(analysis: TaskAnalysis) -> Plan | None:
    """The plan under default parameters, or None when the task is unsupported (see why_unsupported)."""
    try:
        return plan(analysis)
    except Unsupported:
        return None


def why_unsupported(analysis: TaskAnalysis) -> str | None:
    try:
        plan(analysis)
    except Unsupported as e:
        return str(e)
    return None


def default_operands(analysis: TaskAnalysis) -> str:
    """How the default candidate feeds 16-bit operands to tl.dot (codegen.dot_cast): as they are ("input":
    tensor cores, fp32 accumulator) on a GPU; upcast ("fp32") when the task is analysed for a CPU (arch "cpu"),
    where the evaluator runs the candidate in Triton's interpreter, whose tl.dot reads bfloat16 operands as
    integers: there the default is the product the interpreter computes right. Either is one value of the
    `operands` parameter, named in the candidate's header, and the search may try the other."""
    return "fp32" if analysis.arch == "cpu" else "input"


def default(analysis: TaskAnalysis) -> dict:
    pl = plan(analysis)
    return {**kernel_default(pl.main), **({"operands": default_operands(analysis)} if pl.half_products() else {})}


def space(analysis: TaskAnalysis) -> dict[str, list]:
    pl = plan(analysis)
    logs = any(n.fn in LOG_FNS for n in pl.program.nodes)
    return {**kernel_space(pl.main), **({"operands": ["input", "fp32"]} if pl.half_products() else {}),
            **({"logs": list(LOGS)} if logs else {})}


def invalid(analysis: TaskAnalysis, params: dict) -> str | None:
    """Why `params` cannot be rendered or run for this task, or None."""
    try:
        pl = plan(analysis, params)
        tuned = overrides(pl, params)
        if shapes_of(params) == "dynamic":
            inputs = [b for b in pl.program.arg_names if b in pl.program.bases]
            batched = batch_of(pl.program, pl.kernels, inputs).kernels
            split = [i for i, p in {**tuned, pl.primary: params}.items() if i in batched and p.get("SPLIT", 1) > 1]
            if split:
                raise ValueError(f"shapes='dynamic' covers row and column kernels without SPLIT (kernel {split[0]} "
                                 "splits)")
        outputs = tuple(pl.buffers[o] for o in pl.program.outputs if o in pl.buffers)
        requested(pl.kernels, pl.primary, fitted(pl.main, _kernel_params(params)), outputs)  # ValueError if it cannot
        if params.get("recompute") and shapes_of(params) == "dynamic":
            raise ValueError("recompute covers shapes='static' only")
    except (Unsupported, ValueError) as e:
        return str(e)
    if params.get("logs", LOGS[0]) not in LOGS:
        return f"logs is one of {', '.join(LOGS)}, not {params['logs']!r}"
    return kernel_invalid(pl.main, fitted(pl.main, _kernel_params(params))) or next(
        (f"kernel {i}: {why}" for i, p in tuned.items() if (why := kernel_invalid(pl.kernels[i], p))), None)


def _kernel_params(params: dict) -> dict:
    return {k: v for k, v in params.items() if k not in ("template", "SPLIT_K", "impl", "kernels", "logs")}


def overrides(pl: Plan, params: dict) -> dict[int, dict]:
    """params["kernels"], {"7": {"BLOCK_R": 256}}: parameters for Triton kernels other than the main one, which
    the search tunes where a profile shows the time (agent/operators/param.py), each over its kernel's defaults.
    ValueError where one names no such kernel."""
    out = {}
    for key, p in params.get("kernels", {}).items():
        i = int(key)
        if not 0 <= i < len(pl.kernels) or i == pl.primary or pl.kernels[i].kind == "torch_gemm":
            raise ValueError(f"kernel {key} is not a Triton kernel of this plan other than the main one")
        out[i] = {**kernel_default(pl.kernels[i]), **p}
    return out


def fitted(kernel: Kernel, kp: dict) -> dict:
    """`kp`, unless they are GEMM parameters and the tuned kernel is no GEMM (nor attention, whose query and
    key tiles are BLOCK_M and BLOCK_N too): then that kernel's defaults, with kp's PRODUCT_KEYS kept, and its
    EPILOGUE_FORMS, which that kernel then refuses. With a vendor GEMM or convolution (impl "torch") the tuned
    Triton kernel is its epilogue, whose layout GEMM parameters do not describe: a row reduction handed them
    would hold its whole row at once."""
    if "BLOCK_M" in kp and kernel.layout not in ("gemm", "attention"):
        return {**kernel_default(kernel), **{k: kp[k] for k in PRODUCT_KEYS + EPILOGUE_FORMS if k in kp}}
    return kp


def render(analysis: TaskAnalysis, params: dict, template: str) -> str:
    pl = plan(analysis, params)
    kp = fitted(pl.main, _kernel_params(params))
    kp.update({"shapes": params["shapes"]} if "shapes" in params else {})
    tuned = overrides(pl, params)
    if analysis.arch == "cpu":  # the interpreter folds a tl.reduce of a tuple element by element: its sum of 4093
        # shifted values came out 1e-6 off where tl.sum's is 2e-8 (a GPU reduces both as a tree); every kernel's
        # sums are kept apart
        kp["group"] = 0
        tuned = {i: {**tuned.get(i, {}), "group": 0} for i in range(len(pl.kernels))}
    reason = kernel_invalid(pl.main, kp)
    if reason:
        raise ValueError(f"Invalid parameters for the {template} template: {reason}.")
    shown = {k: v for k, v in params.items() if k != "template"}
    header = f"# --- Triton candidate built by the {template} template from the traced task; parameters: {shown}"
    products = {k: kp[k] for k in PRODUCT_KEYS if k in kp}  # every GEMM and attention kernel, tuned or not
    return render_program(analysis.source, pl.program, pl.kernels, pl.buffers, pl.primary, kp, header, products,
                          tuned, params.get("logs", LOGS[0]) == "sfu")


def features(analysis: TaskAnalysis, params: dict) -> dict:
    """MAP-Elites behaviour descriptors of a configuration."""
    pl = plan(analysis, params)
    k = pl.main
    if any(x.kind == "torch_gemm" for x in pl.kernels):
        access = "vendor_gemm"
    elif params.get("SPLIT_K", 1) > 1:
        access = "split_k"
    elif k.layout == "gemm":
        access = "tiled_gemm"
    elif k.layout == "attention":
        access = "flash"
    elif params.get("SPLIT", 1) > 1:
        access = "split"
    elif k.layout == "row":
        access = params.get("mode", "one_pass")
    elif k.layout == "col":
        access = "one_pass" if params.get("BLOCK_R", 32) >= sizes(k)[1] else "looped"
    else:
        access = "window" if pl.has("window") else "one_pass"
    blocks = [v for key, v in params.items() if key.startswith("BLOCK") and isinstance(v, int)]
    biggest = max(blocks, default=0)
    return {"access": access,
            "block_class": "small" if biggest <= 64 else "medium" if biggest <= 1024 else "large",
            "fusion": sum(1 for n in pl.program.nodes if n.op != "view"),
            "tensor_cores": k.layout in ("gemm", "attention") and (params.get("precision", "ieee") != "ieee" or (
                pl.half_products() and params.get("operands", "input") == "input")),
            "launches": sum(1 for x in pl.kernels if x.kind != "torch_gemm")}
