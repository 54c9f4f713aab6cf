"""A complete candidate file from a scheduled program: the task's source verbatim (so ModelNew inherits
Model's constructor and parameters), the generated @triton.jit kernels, and `class ModelNew(Model)` whose
forward checks its guards, allocates outputs and launches the kernels. The forward runs no torch compute:
only .contiguous(), .detach(), torch.empty and, for the "torch" GEMM variant, torch.mm/bmm declared in
KERNELWRIGHT_TORCH_OPS.

Guards are the shapes the kernels hold at: every tensor input's (the shape it was generated for) and the
model state a rewrite relies on (ir.Guard). A call that breaks one takes the fallback: the task's own forward
(Model's, the reference), with one warning per broken guard through `warnings`; never a wrong answer, never
an error. The evaluator calls a candidate only at the shapes it was generated for, and would reject the
fallback's PyTorch compute if it ever ran there.

With params["shapes"] = "dynamic" the batch (the leading dim of the tensor inputs, where every value that
depends on it keeps it leading) is a run-time kernel argument: `batch_of` finds the buffers and kernels that
scale with it (flat, row and column kernels, and matrix products whose M is the batch: a Linear, its epilogue
fused or its product a vendor torch.mm or addmm; anything else that reads the batch is refused), the kernels
mask by it and their grids and buffers follow the input's shape at call time, and the guards check only the
rank and the inner sizes (a batch from 1 up to where 32-bit offsets still hold).
"""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass, field

import torch

from agent.templates.codegen import DESCRIPTOR_SUFFIX, KernelCode, Launch, _extent, _leaves
from agent.templates.implicit_gemm import gemm_dims
from agent.templates.ir import Leaf, Node, Program, Value, contiguous_strides
from agent.templates.kernels import render_kernel, small_batch
from agent.templates.params import SMS, kernel_default, sizes, splittable
from agent.templates.pointwise_ops import helpers_for
from agent.templates.reductions import INT32_MAX
from agent.templates.schedule import Kernel
from agent.templates.split_operands import pays
from agent.templates.stats_epilogue import Pool, combine_params, recomputed, requested

SHAPES = ("static", "dynamic")  # params["shapes"]: sizes baked in, or the batch a run-time argument
BATCH = "kw_batch"  # the forward's name for the batch under shapes="dynamic"


def _from_self(base: str) -> bool:
    """Whether a base is model state read from `self` (self.linear.weight, self.network[0].weight) rather than
    a forward argument."""
    return re.match(r"(getattr\()*self\b", base) is not None


def _local(base: str) -> str:
    """The forward's local name for a base: the argument itself, or w_network_0_weight for model state."""
    if not _from_self(base):
        return base
    return "w_" + re.sub(r"\W+", "_", re.sub(r"getattr\(|\bself\b", "", base)).strip("_")


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype)


def _host_view(leaf: Leaf, bases: dict, batched: bool = False) -> str:
    """A leaf as a host tensor: its base as it is when the leaf is all of it, else a strided view (a buffer
    read through a reshape, say a (N, C, 1, 1) pooled map flattened to (N, C) for a vendor GEMM), whose leading
    size is the call's batch where the leaf is `batched` (shapes="dynamic")."""
    base, whole = _local(leaf.base), bases.get(leaf.base)
    if whole is not None and tuple(whole.shape) == tuple(leaf.shape) and leaf.offset == 0 and \
            leaf.strides == contiguous_strides(leaf.shape):
        return base
    shape = "(" + ", ".join([BATCH] + [str(n) for n in leaf.shape[1:]]) + ",)" if batched else tuple(leaf.shape)
    return f"{base}.as_strided({shape}, {tuple(leaf.strides)}, {leaf.offset})"


def _parts(p: dict, k: Kernel) -> dict:
    """A matrix product other than the primary kernel, in tf32x3 by the plan's products (base.PRODUCT_KEYS):
    its operands split once in memory where its flops a byte pay for that (split_operands.pays), else its tiles
    split in registers at every K step, the primary's rule (gemm.split_operands, gemm.registers_split). Level 3's
    47_NetVladNoGhostClusters (15 flops a byte) wrote its second product's 419 MB operand, read once, as 1.07 GB
    of parts."""
    if p.get("precision") != "tf32x3" or "parts" in p or k.kind != "gemm" or k.nodes[0].fn == "conv":
        return p
    return {**p, "parts": "memory" if pays(k.nodes[0]) else "registers"}


def render_program(task_source: str, program: Program, kernels: list[Kernel], buffers: dict, primary: int,
                   params: dict, header: str, products: dict | None = None, overrides: dict | None = None,
                   sfu: bool = True) -> str:
    """The candidate file: `params` for the primary kernel, defaults for the others except where `overrides`
    ({kernel index: params}) tunes one, and `products` (how tl.dot multiplies: precision, operands) for every
    kernel. With `sfu`, a log or a sigmoid is the special function unit's on a GPU (_sfu), else tl.log or
    tl.sigmoid."""
    inputs = [b for b, leaf in program.bases.items() if not _from_self(b)]
    tensor_inputs = [b for b in inputs if b in program.arg_names]
    batch = batch_of(program, kernels, tensor_inputs) if shapes_of(params) == "dynamic" else None
    stats = requested(kernels, primary, params, tuple(buffers[o] for o in program.outputs if o in buffers))
    codes: list[KernelCode | None] = []
    smalls: dict[int, tuple[str, KernelCode]] = {}  # kernel index -> (when, its form for a call with few rows)
    torch_ops = []
    for i, k in enumerate(kernels):
        if k.kind == "torch_gemm":
            codes.append(None)
            torch_ops.append(_vendor_op(k.nodes[0]))
            continue
        p = params if i == primary else _parts({**kernel_default(k), **(overrides or {}).get(i, {}),
                                                 **(products or {})}, k)
        p = {key: v for key, v in p.items() if key != "shapes"}
        if stats and i == primary:  # the row kernel's statistics in this convolution's epilogue
            p["stats"] = stats
        elif isinstance(stats, Pool) and i == stats.row_kernel:  # its sums of the convolution's partial sums
            k = stats.row(k)
            p = {**kernel_default(k), **(products or {})}
        elif stats and i == stats.row_kernel:
            p = combine_params(k, stats, {**(overrides or {}).get(i, {}), **(products or {})})
            if params.get("recompute"):  # row statistics stored, the output the convolution's second launch's
                p = {**p, "FLAT": 1, "recompute": 1}
        if batch is not None and i in batch.kernels:
            p["shapes"] = "dynamic"
            p["offsets64"] = i in batch.wide
            small = _small_rows(k, f"_{k.layout}_kernel{i}_small", p, batch.size)
            if small:
                smalls[i] = (small[0], _sfu(small[1], sfu))
        code = render_kernel(k, f"_{k.layout}_kernel{i}", p)
        if stats and params.get("recompute") and i == stats.row_kernel:
            code = _then(code, _again(kernels, primary, stats, params))
        codes.append(_sfu(code, sfu))
    if batch is None:
        _one_launch(codes, kernels)
    sources = "\n\n\n".join(_shared(codes, kernels) + [c.source for _, c in smalls.values()])
    helpers = helpers_for(sources)

    device = tensor_inputs[0] if tensor_inputs else _local(next(iter(program.bases)))
    body = []
    call = ", ".join(program.arg_names)
    fallback = [f"    return super().forward({call})"]
    guarded = {g.base for g in program.guards}
    for base, shape, why in guards(program, tensor_inputs):
        if batch is not None and base in batch.inputs and base not in guarded:
            said = f"{base} of shape (N, {', '.join(map(str, shape[1:]))}) for any batch N" if len(shape) > 1 \
                else f"{base} of one dim"
            body += [f"if {base}.dim() != {len(shape)} or tuple({base}.shape[1:]) != {shape[1:]}:",
                     f"    _kw_fallback({f'{said} (the sizes it was generated for)'!r})"] + fallback
            continue
        body += [f"if tuple({base}.shape) != {shape}:",
                 f"    _kw_fallback({f'{base} of shape {shape} ({why})'!r})"] + fallback
    if batch is not None:
        same = [f"{b}.shape[0] != {BATCH}" for b in batch.inputs[1:]]
        said = f"a batch of 1 to {batch.limit}" + (f" shared by {', '.join(batch.inputs)}" if same else "")
        body += [f"{BATCH} = {batch.inputs[0]}.shape[0]",
                 f"if {' or '.join([f'not 1 <= {BATCH} <= {batch.limit}'] + same)}:",
                 f"    _kw_fallback({f'{said} (32-bit offsets)'!r})"] + fallback
    body += [f"{b} = {b}.contiguous()" for b in tensor_inputs]
    used = {a for c in codes if c for launch in c.launches for a in launch.args}
    used |= {base for c in codes if c for base in c.host_args}
    used |= {base for c in codes if c for _, base, _ in c.prep}
    used |= {leaf.base for k in kernels if k.kind == "torch_gemm" for leaf in k.nodes[0].args}
    used |= {k.nodes[0].attrs["bias"] for k in kernels if k.kind == "torch_gemm" and k.nodes[0].attrs.get("bias")}
    for b in program.bases:
        if _from_self(b) and b in used:
            real = b in program.complex_bases  # complex state: its pairs of reals, a view (complex_ops.py)
            body.append(f"{_local(b)} = torch.view_as_real({b}.detach())" if real else f"{_local(b)} = {b}.detach()")
    outputs = {buffers[o] for o in program.outputs}  # an output's buffer (an output reshaping one shares it)
    # a vendor GEMM or convolution takes its operands in their own dtype, rounded there as PyTorch rounds them
    vendor_reads = {leaf.base for k in kernels if k.kind == "torch_gemm" for leaf in k.nodes[0].args
                    if isinstance(leaf, Leaf)}
    float_dt = f"{program.float_base}.dtype" if program.float_base else None
    vendor_outs = {buffers_of(k) for k in kernels if k.kind == "torch_gemm"}  # the vendor op returns its own
    unwritten = stats.buffer if stats and (params.get("recompute") or not stats.kept) else None
    shapes = {}  # each buffer's shape, that of the first node it holds
    for node, buf in buffers.items():
        if buf in shapes:
            continue
        shapes[buf] = tuple(node.shape)
        if buf in vendor_outs or buf == unwritten:  # never written
            continue
        if node.dtype.is_floating_point:
            dt = float_dt if buf in outputs and float_dt and node.dtype == program.bases[program.float_base].dtype \
                else _dtype(torch.float32 if buf not in outputs and buf not in vendor_reads else node.dtype)
        else:
            dt = _dtype(node.dtype)
        shape = tuple(node.shape)
        if batch is not None and buf in batch.buffers:
            shape = "(" + ", ".join([BATCH] + [str(n) for n in shape[1:]]) + ("," if len(shape) == 1 else "") + ")"
        body.append(f"{buf} = torch.empty({shape}, device={device}.device, dtype={dt})")
    for c in codes:
        for name, (shape, dtype) in (c.temps.items() if c else ()):
            alloc = "zeros" if dtype == torch.int32 else "empty"  # int32 scratch: counters, starting at zero
            body.append(f"{name} = torch.{alloc}({shape}, device={device}.device, dtype={_dtype(dtype)})")
    for i, (k, c) in enumerate(zip(kernels, codes)):
        if c is None:
            batched = batch is not None and i in batch.kernels
            body.append(f"{buffers_of(k)} = {_vendor_call(k.nodes[0], program.bases, batched)}")
            continue
        body += [f"{name} = {_local(base)}{rest}" for name, base, rest in c.prep]
        fields = {name: _local(base) for base, name in c.host_args.items()}
        body += [line.format(**fields) for line in c.host]
        if i in smalls:
            when, small = smalls[i]
            body.append(f"if {when}:")
            body += [f"    {name} = torch.empty({shape}, device={device}.device, dtype={_dtype(dtype)})"
                     for name, (shape, dtype) in small.temps.items()]
            body += ["    " + line for line in _launches(small)] + ["else:"]
            body += ["    " + line for line in _launches(c)]
        else:
            body += _launches(c)
    names = [buffers[o] if tuple(o.shape) == shapes[buffers[o]] else f"{buffers[o]}.view({tuple(o.shape)})"
             for o in program.outputs]
    body.append(f"return {_render_tree(torch.utils._pytree.tree_unflatten(names, program.out_tree))}")
    signature = ", ".join(["self"] + program.arg_names)
    imports = sorted({line for c in codes if c for line in c.imports})
    lines = [task_source.rstrip(), "", "", header, "import warnings", "", "import torch", "import triton",
             "import triton.language as tl"] + imports + [""]
    if torch_ops:
        lines += [f"KERNELWRIGHT_TORCH_OPS = {sorted(set(torch_ops))!r}", ""]
    lines += [FALLBACK]
    for h in helpers:
        lines += ["", h]
    lines += ["", sources, "", "", "class ModelNew(Model):", f"    def forward({signature}):"]
    lines += ["        " + line for line in body]
    return "\n".join(lines) + "\n"


FALLBACK = '''_kw_warned = []  # the guards broken so far, each said once


def _kw_fallback(guard):
    """A call outside the shapes the kernels were generated for: the caller runs the task's reference instead."""
    if guard not in _kw_warned:
        _kw_warned.append(guard)
        warnings.warn("kernelwright candidate: the Triton kernels need " + guard + "; this call breaks that, so it "
                      "runs the task's PyTorch reference instead (said once per guard).", stacklevel=3)
'''


# pointwise_ops' helpers that take the SFU's instructions on a GPU
SFU_HELPERS = ("_log", "_sigmoid", "_exp", "_fast_tanh")


def _sfu(code: KernelCode | None, sfu: bool) -> KernelCode | None:
    """`code` with each of its kernels that takes a log, an exp or a sigmoid (pointwise_ops' _log, _exp,
    _sigmoid) given the constexpr SFU: true where the launch's first tensor is on a GPU and `sfu` holds (they are
    then the SFU's), else false (tl.log, tl.exp, tl.sigmoid)."""
    calls = re.compile(rf"\b({'|'.join(SFU_HELPERS)})\(")
    if code is None or not calls.search(code.source):
        return code
    blocks, named = re.split(r"(?m)^(?=@triton\.jit)", code.source), []
    for i, block in enumerate(blocks):
        if calls.search(block):
            named.append(re.search(r"(?m)^def (\w+)\(", block).group(1))
            block = block.replace("):\n", ", SFU: tl.constexpr):\n", 1)  # the def line's end
            blocks[i] = calls.sub(r"\1(SFU, ", block)
    for launch in code.launches:
        if launch.kernel in named:  # its first tensor: not a TMA descriptor (split_operands.descriptors)
            first = next(a for a in launch.args if not a.endswith(DESCRIPTOR_SUFFIX))
            launch.meta["SFU"] = f"{_local(first)}.is_cuda" if sfu else "False"
    for i, line in enumerate(code.host):  # launches in a host loop: kernel[grid](first, ..., num_warps=...)
        launch = re.match(r"\s*(\w+)\[.*?\]\(([^,]+),", line)
        if launch and launch.group(1) in named:
            on = f"{launch.group(2)}.is_cuda" if sfu else "False"
            code.host[i] = line.replace(", num_warps=", f", SFU={on}, num_warps=", 1)
    code.source = "".join(blocks)
    return code


def _again(kernels: list[Kernel], i: int, stats, params: dict) -> KernelCode:
    """The convolution's second launch under params["recompute"]: kernel i again, the row kernel's output pass
    its epilogue (stats_epilogue.recomputed), at the convolution's own parameters. The first launch made its
    packed weight and its input's copy (xlast: its launch and buffer come first), which this one reads: the
    kernels of the launches before its last are left out with them."""
    p = {key: v for key, v in params.items() if key not in ("stats", "recompute", "shapes")}
    code = render_kernel(recomputed(kernels, i, stats), f"_gemm_kernel{i}_again", p)
    dropped = [f"def {launch.kernel}(" for launch in code.launches[:-1]]
    kept = [block for block in code.source.split("\n\n\n") if not any(name in block for name in dropped)]
    return dataclasses.replace(code, source="\n\n\n".join(kept), launches=code.launches[-1:], temps={}, prep=[])


def _then(first: KernelCode, second: KernelCode) -> KernelCode:
    """One kernel's code followed by another's: both sources, then both launches in order."""
    return KernelCode(first.source + "\n\n\n" + second.source, first.launches + second.launches,
                      {**first.temps, **second.temps}, first.host + second.host,
                      {**first.host_args, **second.host_args}, first.prep + second.prep,
                      first.imports + [i for i in second.imports if i not in first.imports])


def _launches(code: KernelCode) -> list[str]:
    out = []
    for launch in code.launches:
        args = ", ".join(_local(a) for a in launch.args)
        meta = ", ".join(f"{key}={value}" for key, value in launch.meta.items())
        out.append(f"{launch.kernel}[{_grid(launch.grid)}]({args}, {meta}, {launch.options()})")
    return out


SMALL_ROWS_MIN_R = 2048  # rows at least this long are worth splitting over programs when a call has few of them


def _small_rows(kernel: Kernel, name: str, p: dict, traced: int) -> tuple[str, KernelCode] | None:
    """A shape-general row kernel's split form and when to launch it: a call with fewer rows than the SMs and than
    the traced batch had (where the tuned kernel runs, as the search measured it) and rows of SMALL_ROWS_MIN_R or
    more, each then split over programs. On the H200, one program per row took 1.64x eager's time for an L1 norm
    over one row of 65,535, and 21x torch.compile's for a group norm at batch 1. None where it does not apply."""
    o, r, _ = sizes(kernel)
    per = o // kernel.domain[0]
    if kernel.layout != "row" or p.get("SPLIT", 1) > 1 or r < SMALL_ROWS_MIN_R or not splittable(kernel, p):
        return None
    limit = min(SMS, traced * per)
    if limit <= 1:
        return None
    split = max(2, min(256, 1 << ((r // SMALL_ROWS_MIN_R).bit_length() - 1)))
    rows = BATCH if per == 1 else f"{BATCH} * {per}"
    return f"{rows} < {limit}", small_batch(kernel, name, p, split)


def _grid(grid: tuple) -> str:
    """A launch grid as host code: constants, or expressions of the batch (shapes="dynamic")."""
    if all(isinstance(g, int) for g in grid):
        return str(grid)
    return "(" + ", ".join(map(str, grid)) + ",)"


def shapes_of(params: dict) -> str:
    shapes = params.get("shapes", "static")
    if shapes not in SHAPES:
        raise ValueError(f"shapes must be one of {', '.join(SHAPES)}, not {shapes!r}")
    return shapes


@dataclass
class Batch:
    """What varies with the batch under shapes="dynamic": the leading dim of `inputs` (size `size` when traced),
    the buffers allocated with it leading, the kernels that take it as their run-time argument n0, and the
    largest batch whose offsets those kernels still compute in 32 bits; a kernel where that would be under twice
    the traced batch computes them in 64 bits instead (`wide`)."""
    size: int
    inputs: list[str]
    buffers: set[str] = field(default_factory=set)
    kernels: set[int] = field(default_factory=set)
    limit: int = INT32_MAX
    wide: set[int] = field(default_factory=set)  # kernels given 64-bit offsets so the batch may double or more


def batch_of(program: Program, kernels: list[Kernel], tensor_inputs: list[str]) -> Batch:
    """The batch of a program under shapes="dynamic", kernel by kernel in launch order: a value scales with it
    when it reads a batched input or buffer along its leading dim, through pointwise ops (every full-rank operand
    batched or broadcast), reductions over other dims, views that keep the leading dim and a matrix product's A
    (the batch its M). ValueError, in one sentence, where a kernel reads the batch otherwise (a reduction over
    it, a GEMM's K or N, a bmm, a convolution, SPLIT_K, a window, a transpose) or writes a piece of a cat into
    its place."""
    ranked = [b for b in tensor_inputs if program.bases[b].shape]
    if not ranked:
        raise ValueError("shapes='dynamic' needs a tensor input with a leading (batch) dim")
    size = program.bases[ranked[0]].shape[0]
    if size < 2:
        raise ValueError(f"shapes='dynamic' needs the task traced at a batch above 1 (it was {size}), so that "
                         f"the batch dim is not a broadcast one")
    inputs = [b for b in ranked if program.bases[b].shape[0] == size]
    batch = Batch(size, inputs)
    stride = {b: math.prod(program.bases[b].shape[1:]) for b in inputs}  # elements per batch entry
    for i, k in enumerate(kernels):
        memo: dict[int, bool] = {}
        if k.store_when or any(isinstance(b, Leaf) for b in k.stores.values()):
            raise ValueError(f"shapes='dynamic' does not cover kernel {i}, which writes a piece of a cat into its "
                             f"place")

        def scales(v) -> bool:
            if isinstance(v, Leaf):
                if v.kind != "tensor" or v.base not in stride:
                    return False
                if v.shape and v.shape[0] == size and v.strides[0] == stride[v.base] and \
                        all(d != 0 for d, _, _ in v.bounds):
                    return True
                raise ValueError(f"shapes='dynamic': kernel {i} reads {v.base} other than along its leading "
                                 f"(batch) dim")
            if not isinstance(v, Node):
                return False
            if id(v) not in memo:
                args = [a for a in v.args if isinstance(a, Value)]
                batched = [a for a in args if scales(a)]
                if batched:
                    _batched_node(v, args, batched, i)
                memo[id(v)] = bool(batched)
            return memo[id(v)]

        leaves = _leaves(k.nodes, k.level)
        if not any([scales(m) for m in k.nodes] + [scales(a) for a in leaves]):
            if any(buf in batch.buffers for buf in k.stores.values()):  # a fill by an index, into a batched copy
                raise ValueError(f"shapes='dynamic': kernel {i} writes into a buffer that has the batch without "
                                 f"reading it")
            continue
        d = k.domain
        gemm = k.kind in ("gemm", "torch_gemm")
        # a GEMM kernel's product takes the batch as its M (_batched_node checked how), never its epilogue alone
        if gemm and not scales(k.nodes[0]):
            raise ValueError(f"shapes='dynamic': in kernel {i}, the epilogue of {k.nodes[0].name} reads the batch "
                             f"but its GEMM does not")
        if not gemm and (k.kind != "tile" or k.layout not in ("flat", "row", "col") or d[0] != size or 0 in k.rdims):
            raise ValueError(f"shapes='dynamic' covers flat, row, column and GEMM kernels over the batch; kernel {i} "
                             f"is a {k.layout} kernel over {list(d)}")
        weight = k.nodes[0].args[1] if gemm else None  # B, (K, N): its rows are not the batch's
        for v in list(k.nodes) + leaves:
            if len(v.shape) == len(d) and v.shape[0] > 1 and not scales(v) and v is not weight and \
                    not (isinstance(v, Leaf) and v.kind == "const"):
                raise ValueError(f"shapes='dynamic': in kernel {i}, {v.name} has the batch's size {size} "
                                 f"without depending on it")
        batch.kernels.add(i)
        for m, buf in k.stores.items():
            if scales(m):
                batch.buffers.add(buf)
                stride[buf] = math.prod(m.shape[1:])
        if max([math.prod(d)] + [_extent(a) for a in leaves]) <= INT32_MAX:  # else offsets are 64-bit already
            # what grows with the batch: the domain and the batched leaves (a GEMM's weight stays its size)
            per = max([math.prod(d) // size] + [-(-_extent(a) // size) for a in leaves if scales(a)])
            limit = (INT32_MAX - 2**20) // per
            if limit < 2 * size:  # near 2**31 elements already (a 32768 x 65535 input): 64-bit offsets, no limit
                batch.wide.add(i)
            else:
                batch.limit = min(batch.limit, limit)
    return batch


def _batched_node(v: Node, args: list, batched: list, kernel: int) -> None:
    """Raises ValueError where a node that reads the batch does not keep it as its leading dim."""
    why = ""
    if v.op == "pw" and v.fn == "gather":
        src, dims = v.args[0], v.attrs["src_dims"]
        if any(a is src for a in batched) and (dims[0] != 0 or 0 in v.attrs["index_dims"]):
            why = "gathers across the batch"
        args = [a for a in args if a is not src]
    if v.op == "pw":
        for a in args:
            full = len(a.shape) == len(v.shape)
            if any(a is b for b in batched) and not (full and a.shape[0] == v.shape[0]):
                why = "broadcasts a batched operand to another dim"
            elif full and a.shape[0] != 1 and not any(a is b for b in batched):
                why = "meets an operand of the batch's size that does not depend on it"
    elif v.op == "reduce":
        why = "reduces over the batch" if 0 in v.attrs["dims"] else ""
    elif v.op == "view":
        a = batched[0]
        if v.shape[:1] != a.shape[:1] or math.prod(v.shape[1:]) != math.prod(a.shape[1:]):
            why = "reshapes the batch dim"
    elif v.op == "gemm":  # the batch may be M, the rows of A and of the output, of a plain matrix product
        if v.attrs.get("split_k", 1) > 1:
            why = "splits its GEMM's K over programs (SPLIT_K), which takes only static shapes"
        elif v.fn != "mm" or len(v.shape) != 2:
            why = f"is a {'convolution' if v.fn == 'conv' else 'batched GEMM (bmm)'}, which takes only static shapes"
        elif any(b is v.args[1] for b in batched):
            why = "is a GEMM whose batch is not its M (the rows of its output)"
    else:
        why = f"is a {v.op} ({v.fn}), which takes only static shapes"
    if why:
        raise ValueError(f"shapes='dynamic': in kernel {kernel}, {v.name} {why}")


def guards(program: Program, tensor_inputs: list[str]) -> list[tuple[str, tuple, str]]:
    """(host expression, shape, why) per guarded tensor: each tensor input at the shape it was generated for,
    then the model state the program's rewrites rely on (ir.Guard); one entry per tensor, its reasons joined."""
    out: dict[str, tuple[tuple, list[str]]] = {b: (tuple(program.bases[b].shape), ["the shape it was generated for"])
                                               for b in tensor_inputs}
    for g in program.guards:
        shape, why = out.setdefault(g.base, (tuple(g.shape), []))
        if tuple(g.shape) != shape:
            raise ValueError(f"Two guards on {g.base} disagree: {shape} and {tuple(g.shape)}.")
        why.append(g.why)
    return [(base, shape, "; ".join(why)) for base, (shape, why) in out.items()]


def _one_launch(codes: list[KernelCode | None], kernels: list[Kernel]) -> None:
    """Runs of consecutive flat kernels, none reading or writing what another of the run writes, launch as one:
    each becomes a function of its program id, and one kernel calls the right one for each program (rotary
    embedding of queries and keys, two outputs of different sizes, took two launches). The run's first code
    takes the merged kernel, the others become empty."""
    def alone(i: int) -> bool:
        c = codes[i]
        return c is not None and kernels[i].layout == "flat" and len(c.launches) == 1 and not c.host and \
            not c.temps and isinstance(c.launches[0].grid[0], int)

    def writes(i: int) -> set[str]:
        return {b.base if isinstance(b, Leaf) else b for b in kernels[i].stores.values()}

    i = 0
    while i < len(codes):
        run = [i] if alone(i) else []
        while run and run[-1] + 1 < len(codes) and alone(run[-1] + 1):
            j, first = run[-1] + 1, codes[run[0]].launches[0]
            same = (codes[j].launches[0].num_warps, codes[j].launches[0].num_stages) == \
                (first.num_warps, first.num_stages)
            touched = writes(j) | set(codes[j].launches[0].args)
            if not same or any(writes(r) & touched or writes(j) & set(codes[r].launches[0].args) for r in run):
                break
            run.append(j)
        if len(run) > 1:
            codes[run[0]] = _merged([codes[r] for r in run], f"_flat_kernel{run[0]}_run")
            for r in run[1:]:
                codes[r] = KernelCode("", [])
        i = run[-1] + 1 if run else i + 1


def _merged(parts: list[KernelCode], name: str) -> KernelCode:
    """One kernel over the programs of `parts` (single-launch flat kernels) in turn: each part's function takes
    its program id as an argument, and `name` calls the part whose programs this one falls in."""
    sources, params, calls, args, meta, start = [], [], [], [], {}, 0
    for n, c in enumerate(parts):
        launch = c.launches[0]
        _, head, body = c.source.split("\n", 2)
        pointers = head[head.index("(") + 1:head.index("BLOCK")].rstrip(", ").split(", ")
        sources.append("@triton.jit\n" + head.replace("BLOCK: tl.constexpr", "pid, BLOCK: tl.constexpr") + "\n" +
                       body.replace("tl.program_id(0)", "pid"))
        mine = [f"q{n}_{x}" for x in pointers]
        params += mine
        args += launch.args
        meta.update({f"{key}_{n}": value for key, value in launch.meta.items()})  # BLOCK, then SFU where taken
        end = start + launch.grid[0]
        branch = "else" if n == len(parts) - 1 else f"{'elif' if n else 'if'} pid < {end}"
        constexprs = ", ".join(f"{key}_{n}" for key in launch.meta)
        calls += [f"    {branch}:", f"        {launch.kernel}({', '.join(mine)}, pid - {start}, {constexprs})"]
        start = end
    signature = ", ".join(params + [f"{m}: tl.constexpr" for m in meta])
    dispatch = "\n".join(["@triton.jit", f"def {name}({signature}):", "    pid = tl.program_id(0)"] + calls)
    first = parts[0].launches[0]
    return KernelCode("\n\n\n".join(sources + [dispatch]),
                      [Launch(name, (start,), args, meta, first.num_warps, first.num_stages)])


def _shared(codes: list[KernelCode | None], kernels: list[Kernel]) -> list[str]:
    """The kernel sources to write, each once: a kernel identical to an earlier one but for its name (the
    repeated blocks of a network) launches the earlier one instead, so Triton compiles it once."""
    first: dict[str, str] = {}  # source with its name blanked -> the name it was first written under
    out = []
    for i, (k, c) in enumerate(zip(kernels, codes)):
        if c is None or not c.source:  # a vendor op, or a kernel merged into an earlier launch (_one_launch)
            continue
        if c.host:
            out.append(c.source)
            continue
        name = f"_{k.layout}_kernel{i}"
        key = c.source.replace(name, "_kernel")
        if key in first:
            for launch in c.launches:
                launch.kernel = launch.kernel.replace(name, first[key])
        else:
            first[key] = name
            out.append(c.source)
    return out


def _vendor_op(g) -> str:
    """The ATen op a vendor GEMM or convolution runs as (what KERNELWRIGHT_TORCH_OPS declares)."""
    if g.fn == "conv":
        return "aten.convolution"
    return "aten.bmm" if len(g.shape) == 3 else "aten.addmm" if g.attrs.get("bias") else "aten.mm"


def _vendor_call(g, bases: dict, batched: bool = False) -> str:
    """The host call of a vendor GEMM or convolution, with the Linear's or convolution's own bias where the
    schedule folded it in (attrs["bias"]: its base); the rest stays in Triton. `batched`: its A's rows are the
    call's batch (batch_of)."""
    a, b = _host_view(g.args[0], bases, batched), _host_view(g.args[1], bases)
    bias = _local(g.attrs["bias"]) if g.attrs.get("bias") else None
    if g.fn != "conv":
        if bias:
            return f"torch.addmm({bias}, {a}, {b})"
        return f"{'torch.bmm' if len(g.shape) == 3 else 'torch.mm'}({a}, {b})"
    t = g.attrs
    return (f"torch.convolution({a}, {b}, {bias}, {list(t['stride'])}, {list(t['padding'])}, "
            f"{list(t['dilation'])}, {t['transposed']}, {list(t['output_padding'])}, {t['groups']})")


def buffers_of(kernel: Kernel) -> str:
    return next(iter(kernel.stores.values()))


def _render_tree(tree) -> str:
    if isinstance(tree, str):
        return tree
    if type(tree).__module__ == "torch.return_types":  # (values, indices) as torch.max returns them
        return f"torch.return_types.{type(tree).__name__}(({', '.join(_render_tree(t) for t in tree)}))"
    if isinstance(tree, tuple) and hasattr(type(tree), "_fields") and "<" not in type(tree).__qualname__:
        # the task's own namedtuple, defined at its top level (the candidate holds the task's source)
        return f"{type(tree).__qualname__}({', '.join(_render_tree(t) for t in tree)})"
    if isinstance(tree, tuple):
        inner = ", ".join(_render_tree(t) for t in tree)
        return f"({inner},)" if len(tree) == 1 else f"({inner})"
    if isinstance(tree, list):
        return "[" + ", ".join(_render_tree(t) for t in tree) + "]"
    if isinstance(tree, dict):
        return "{" + ", ".join(f"{k!r}: {_render_tree(v)}" for k, v in tree.items()) + "}"
    return repr(tree)


def work(kernel: Kernel) -> float:
    """Rough size of a kernel's job, to pick the primary kernel whose parameters the search tunes."""
    if kernel.kind in ("gemm", "torch_gemm"):
        batch, m, n, k = gemm_dims(kernel.nodes[0])
        return 8.0 * batch * m * n * k
    if kernel.kind == "attention":  # the two products over every query and key
        q, k, v = kernel.nodes[0].args[:3]
        return 4.0 * math.prod(q.shape[:-1]) * k.shape[-2] * (q.shape[-1] + v.shape[-1])
    if kernel.kind == "rnn":  # a GEMM of the hidden state per step and layer, at least
        return 8.0 * math.prod(kernel.domain) * kernel.domain[-1] * kernel.nodes[0].attrs["layers"]
    return float(math.prod(kernel.domain))

