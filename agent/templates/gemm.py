"""GEMM template: mm/bmm/addmm/Linear, and every convolution as an implicit GEMM (implicit_gemm.py), with the
following pointwise ops fused as an epilogue. Tiles of
BLOCK_M x BLOCK_N accumulate tl.dot products in fp32 (input_precision "ieee" unless the task allows TF32, or
"tf32x3" for a convolution's dot steps: split_products), programs walk the output in GROUP_M-row groups for L2
reuse, and SPLIT_K > 1 splits a long K over programs (the partial products are summed by a reduction kernel
that also runs the epilogue). The epilogue runs in fp32 and the output rounds once, on the store. bf16/fp16
operands go to tl.dot as they are (tensor cores) or upcast to fp32, the `operands` parameter
(base.default_operands says which is the default, and why the CPU's differs). With impl="torch" the product
stays a vendor GEMM or cuDNN convolution (declared in KERNELWRIGHT_TORCH_OPS) and only the epilogue is Triton,
for shapes where a Triton GEMM cannot win; never when the GEMM or convolution (with its own bias) is all the
task does, which the evaluator would reject."""
from __future__ import annotations

import math

from agent.analysis import TaskAnalysis
from agent.templates import base
from agent.templates.codegen import next_pow2
from agent.templates.implicit_gemm import gemm_dims, outer_steps, phased, pointwise, rows_fit, streams
from agent.templates.params import (CONV_BLOCK_K, ROWS_DOT_TILES, SMS, deep_steps, gemm_tiles, interleaved_tiles,
                                    kernel_default, kernel_invalid, kernel_space, phased_pair, pointwise_tiles,
                                    rows_form, rows_paired, rows_stacked, stream_stages,
                                    transposed_positions, wide_tiles)
from agent.templates.program import work
from agent.templates.split_operands import pays
from agent.templates.stats_epilogue import recompute_pays, stats_pair, worth_it

NAME = "gemm"
FAMILIES = ("matmul", "gemm_epilogue", "matvec", "conv")


def match(analysis: TaskAnalysis) -> bool:
    pl = base.default_plan(analysis)
    return pl is not None and pl.has("gemm")


def _gemm(analysis: TaskAnalysis):
    """(plan, the largest GEMM kernel, M, K, N, batch, whether the task has work beyond its GEMMs)."""
    pl = base.plan(analysis)
    k = max((x for x in pl.kernels if x.kind == "gemm"), key=lambda x: work(x))
    batch, m, n, kk = gemm_dims(k.nodes[0])
    epilogue = any(n.op not in ("gemm", "view") and not n.attrs.get("vendor_bias") for n in pl.program.nodes)
    return pl, k, m, kk, n, batch, epilogue


def split_products(analysis: TaskAnalysis, pl, k) -> bool:
    """Whether a convolution's fp32 dot steps default to input_precision "tf32x3": each fp32 operand split into a
    TF32 high part and a TF32 remainder, three tensor-core products summed in fp32 (the remainders' product
    dropped). Its error stays at fp32's scale: on an H200 (session 16), against a float64 run, the norm error of 25
    of level 1's convolutions in this form was 0.24-1.26x cuDNN's own fp32 result's, where one TF32 product was
    7,000-10,000x it. Against the same tiles in "ieee" (FMA) products it ran 1.17-2.31x faster on 26 of 28: 50,
    64, 67, 76_conv_standard 4.46 -> 1.99, 22.9 -> 10.5, 10.8 -> 4.9, 28.9 -> 13.3 ms, 81_conv_transposed_2D
    0.725 -> 0.489, 70_conv_transposed_3D 44.0 -> 36.7; slower on 72_conv_transposed_3D (0.726 -> 0.798), which
    variants() still gives the "ieee" form (and 86's main convolution stays cuDNN's). One pipeline stage: 81 ran
    0.583 ms at three. Outer-product steps (BLOCK_K 1) have no tl.dot; a plain matrix product stays "ieee" (level
    1's 2_Standard_matrix_multiplication_ ran 3.82 ms at three stages, against 3.27 in "ieee"), and a task that
    allows TF32 takes "tf32". Triton sums each step's three products in a zeroed accumulator, its NaNs (an
    infinite operand's remainder) set to 0, and adds that to the running sum in fp32: a third of a step's
    instructions for level 1's 75_conv_transposed_2D (SASS, 373 a step). Chained into the running sum instead,
    the same kernels ran 2-12% faster on an H200 (session 28: 67_conv_standard_1D 4.86 -> 4.26 ms) at up to 12x
    the error against float64 (50: 2.9e-07 -> 3.4e-06; 67 7.7x), fp32's scale no longer. Rounding to TF32 with
    integer operations in place of Triton's cvt.rna (the same values, the same error) gained 2-4% on 75 and 81
    and nothing on 50 and 67: not taken."""
    return k.nodes[0].fn == "conv" and not outer_steps(k.nodes[0]) and not analysis.tf32 and not pl.half_products()


def split_operands(analysis: TaskAnalysis, pl, k) -> bool:
    """Whether an fp32 matrix product defaults to input_precision "tf32x3" with its operands split once in
    memory (split_operands.py: 1.8x cuBLAS's fp32 on an H200 at 5x less error against float64), where its flops
    a byte of operand pay for the split (split_operands.pays), its tiles 128 x 128 at 8 warps and 3 stages, or
    64 x 128 at 4 warps and 4 stages where those still fit in one wave of the SMs (1024 x 2048 x 768: 0.0721 ms
    against 0.1032 and cuBLAS's 0.0824). Not where they take two: on an H200 (session 34, the GEMM alone), 48,
    72, 96 and 128 tiles of 128 x 128 ran 0.0867, 0.0872, 0.0884 and 0.0390 ms, their 64 x 128 tiles 0.0564,
    0.1096, 0.1106 and 0.0474. Not where the task allows TF32 (one TF32 product is its own), for
    16-bit operands, or where the task is verified at several shape sets: a shape-general kernel
    (shapes="dynamic") would split its tiles in registers, slower than FMA products."""
    return _static_fp32_product(analysis, pl, k) and pays(k.nodes[0])


def registers_split(analysis: TaskAnalysis, pl, k) -> bool:
    """Whether an fp32 matrix product whose flops a byte do not pay for splitting its operands in memory (a
    weight read about once: split_operands.pays) takes Triton's own "tf32x3", each tile split again in registers
    at every K step (parts "registers"), instead of FMA products. On an H200 (session 34, the GEMM alone, 128 x
    128 x 32 tiles at 8 warps and 3 stages), 128 rows by a 32768 x 32768 weight: cuBLAS's fp32 5.272 ms, in
    registers 3.314 (from parts split in memory 3.052, plus 2.8 for the 4 GB weight's split); 128 rows by 16384
    x 16384: 1.442 -> 0.825. Error against float64 5.9e-07 and 4.3e-07, where cuBLAS's was 3.2e-06 and
    2.3e-06. Through `kernelbench_bench.py --budget 3`: level 2's 55, 56, 59 (those 32768 x 32768 weights) and
    68 (16384) ran 3.468, 3.540, 3.477 and 0.889 ms, torch.compile 5.286, 5.281, 5.283 and 1.437. default()
    takes it only where the tiles and K splits fill the SMs: level 1's 6_Matmul_with_large_K_dimension_ (256 x
    256 outputs over K 524288, 4 tiles split 16 ways) ran 1.666 in registers against cuBLAS's 1.307."""
    return _static_fp32_product(analysis, pl, k) and not pays(k.nodes[0])


def _static_fp32_product(analysis: TaskAnalysis, pl, k) -> bool:
    """Whether the main GEMM is a matrix product (not a convolution) in fp32 without TF32, verified at one shape
    set: where tf32x3 can be its default, its parts split once in memory or in registers."""
    return k.nodes[0].fn != "conv" and not analysis.tf32 and not pl.half_products() and not analysis.shape_sets


def persistent_pays(m: int, n: int, batch: int, p: dict) -> bool:
    """Whether a matrix product's split operands default to persistent tiles (kernels._gemm: a program per SM
    walking the tiles, the parts read by TMA descriptors): where the tiles fill at least two waves of the SMs.
    On an H200 (session 34, 128 x 128 x 32 tiles at 8 warps and 3 stages), against the same tiles a program
    each, the GEMM alone: 2048 x 4096 outputs over K 8192 (512 tiles) 1.321 -> 1.228 ms, 4096^2 over 4096 1.313
    -> 1.260, 8205 x 2949 over 5921 2.991 -> 2.843; 1024 x 2048 over 768 (128 tiles, under a wave) 0.0388 ->
    0.0402. The whole candidate, splits included: KernelBench level 1's 2, 7, 8, 10, 11 and 16 1.435 -> 1.400,
    3.134 -> 2.998, 2.998 -> 2.882, 0.610 -> 0.595, 6.896 -> 6.717, 1.424 -> 1.400; level 2's 28, 40 and 86
    (their epilogues inside the tile loop) 1.547 -> 1.477, 5.558 -> 5.197, 1.529 -> 1.467."""
    return math.ceil(m / p["BLOCK_M"]) * math.ceil(n / p["BLOCK_N"]) * batch >= 2 * SMS


def space(analysis: TaskAnalysis) -> dict[str, list]:
    pl, k, m, kk, n, batch, epilogue = _gemm(analysis)
    s = dict(kernel_space(k))
    s["SPLIT_K"] = [1, 2, 4, 8, 16] if kk >= 2048 and k.nodes[0].fn == "mm" else [1]
    s["impl"] = ["triton", "torch"] if epilogue else ["triton"]
    s["precision"] = ["ieee", "tf32"] if analysis.tf32 else ["ieee"] + ["tf32x3"] * (not pl.half_products())
    if pl.half_products():
        s["operands"] = ["input", "fp32"]
    return s


def default(analysis: TaskAnalysis, rows: bool = True) -> dict:
    """The first parameters; without `rows`, those a convolution took before rows tiles (its next variant)."""
    pl, k, m, kk, n, batch, epilogue = _gemm(analysis)
    d = dict(kernel_default(k, rows))
    tiles = math.ceil(m / d["BLOCK_M"]) * math.ceil(n / d["BLOCK_N"]) * batch
    split = 1
    while tiles * split < SMS and kk // (split * 2) >= 1024 and split < 16 and k.nodes[0].fn == "mm":
        split *= 2
    # in fp32 without TF32 a vendor GEMM runs at the FMA peak, which a Triton tl.dot does not reach unless a
    # matrix product's operands are split once (split_operands): else keep the vendor's under the fused Triton
    # epilogue when there is one (a bare GEMM must stay Triton to count). The work
    # is the whole program's: a network's convolutions are each small (ResNet-18's largest under 1 GFLOP, its
    # Triton convolutions 0.41x eager on an H200) and together most of its time. In bf16 the vendor's tensor-core
    # kernels mostly win too: on an H200, KernelBench level 2's Triton GEMMs ran at 0.41-0.82x torch.compile and
    # 39 of its 60 Triton convolutions at 0.02-0.99x (most 3-D ones won, which variants() still tries second).
    # Not a strided transposed convolution in fp32 (vendor_loses).
    flops = sum(2 * math.prod(gemm_dims(x.nodes[0])) for x in pl.kernels if x.kind == "gemm")
    parts = split_operands(analysis, pl, k)  # a matrix product's operands split once, in memory
    registers = registers_split(analysis, pl, k) and tiles * split >= SMS  # or its tiles at every K step
    vendor = epilogue and not (analysis.tf32 and not pl.half_products()) and flops >= 2**30 and \
        not vendor_loses(pl, k.nodes[0]) and not parts and not registers
    # rows tiles in outer-product steps have no tl.dot
    in_registers = split_products(analysis, pl, k) and (d.get("tiles") != "rows" or d.get("BLOCK_K", 1) > 1)
    if in_registers and d.get("tiles") != "stream":  # streamed tiles pipeline their loads (params.stream_tiles)
        d["num_stages"] = 1
        if d.get("tiles") == "interleaved":  # tiles of their own (params.interleaved_tiles), or rows tiles
            d.update(interleaved_tiles(k, split=True))  # over the channels-last copy (params.phased_pair)
            d.update(phased_pair(k.nodes[0]) if rows else {})
        if pointwise(k.nodes[0]):  # a plain load pipelines (params.pointwise_tiles)
            d.update(pointwise_tiles(k.nodes[0]))
        elif not d.get("tiles") and d["BLOCK_N"] == 16:  # every channel in one tile (params.wide_tiles)
            d.update(wide_tiles(k.nodes[0]))
        if not d.get("tiles"):  # params.transposed_positions ({} but for some transposed convolutions)
            d.update(transposed_positions(k.nodes[0]))
        d.update(deep_steps(k.nodes[0], d))  # K steps of 64 for a plain deep convolution (params.deep_steps)
    if parts and 2 * math.ceil(m / 128) * math.ceil(n / 128) * batch <= SMS:  # 64 x 128 tiles fill one wave
        d.update({"BLOCK_M": min(64, d["BLOCK_M"]), "num_warps": 4, "num_stages": 4})
    if parts and split == 1 and persistent_pays(m, n, batch, d):
        d["persistent"] = 1
    if registers:
        d["parts"] = "registers"
    if d.get("tiles") == "stream" and not pointwise(k.nodes[0]):  # by what the streamed kernel stores
        d["num_stages"] = stream_stages(max((x for x in base.plan(analysis, d).kernels if x.kind == "gemm"),
                                            key=work), d)
    precision = "tf32" if analysis.tf32 else "tf32x3" if in_registers or parts or registers else "ieee"
    if precision == "tf32x3" and k.nodes[0].fn == "conv":  # each gathered tile split once (implicit_gemm.hand_split)
        d["parts"] = "hand"
    return {**d, "SPLIT_K": split, "impl": "torch" if vendor else "triton", "precision": precision,
            **({"operands": base.default_operands(analysis)} if pl.half_products() else {})}


def vendor_loses(pl, node) -> bool:
    """Whether GEMM node `node` of plan pl is a convolution whose cuDNN form loses to a Triton one, so that
    default() does not take it, nor do the roofline's moves: a strided transposed one (phased) in fp32, or one
    that can stream (implicit_gemm.streams). On an H200 cuDNN's ran level 2's 34_ConvTranspose3d_
    LayerNorm_GELU_Scaling in 21.85 ms and 44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean in 3.54,
    the Triton ones (their weights packed) in 4.07 and 1.19 (session 21); 26, 74 and 15 in 9.73, 2.36 and 2.85
    against 1.62, 0.31 and 0.49 (session 43, budget 3); level 1's 87_conv_pointwise_2D in 9.60 against 3.58
    streamed (session 44); level 2's 57's convolution alone in 1.06 against 0.35 for the whole task streamed
    with a window (session 45)."""
    return phased(node) and not pl.half_products() or streams(node)


def _rows_second(node) -> list[dict]:
    """Rows tiles as a convolution's next variants, where they are not its default ([] elsewhere): a strided
    transposed one, or an unstrided 2-D one over at most 8 input channels a group. On an H200 (session 17),
    against the candidates they displace: level 1's 72 and 75_conv_transposed_3D/2D 0.739 -> 0.580 and 0.485 ->
    0.730 ms (interleaved tiles in tf32x3, 32 by 128); level 2's 11 convolutions of 8 channels in 3x3 windows under an
    epilogue, against cuDNN's: 8 faster (57, 69, 71 0.914 -> 0.62-0.64 ms; 21, 65, 73, 85, 92 1.07-1.34x), 3
    slower (67, 82, 87: 254-wide rows, 1.06-1.56x). Other convolutions that can take them take them last, 128 a
    row: level 1's 50, 54, 59 and level 2's 23, 90 (3-D, or an 11x11 window at stride 4) ran 1.2-2.6x slower.
    A strided transposed one over more channels takes them in dot steps (params.rows_form says where they won).
    A phased one whose channels and a row's column offsets fill a stacked dot step takes those first, then its
    other rows tiles: level 1's 75 won in the stacked ones, 72 (3-D) in outer products (session 17, 0.580 ms)."""
    flat = len(node.shape) == 4 and not node.attrs["transposed"] and set(node.attrs["stride"]) == {1}
    if phased(node):
        return [{**tiles, "impl": "triton"} for tiles in (rows_stacked(node), rows_form(node)) if tiles]
    if flat and rows_fit(node):
        return [{**rows_form(node), "impl": "triton", "BLOCK_M": 128}]
    return []


def variants(analysis: TaskAnalysis) -> list[dict]:
    _, k, m, kk, n, batch, epilogue = _gemm(analysis)
    d, sp = default(analysis), space(analysis)
    out = [d]
    if d.get("tiles") == "stream":  # then the tiles it replaced, whose variants follow; with a window, after
        d = default(analysis, rows=False)  # the rows tiles that were its default before (_rows_second)
        out += [] if pointwise(k.nodes[0]) else [{**d, **tiles} for tiles in _rows_second(k.nodes[0])]
        out.append(d)
    conv = k.nodes[0].fn == "conv"
    second = [] if d.get("tiles") == "rows" or not conv else _rows_second(k.nodes[0])
    out += [{**d, **tiles} for tiles in second]
    wide = wide_tiles(k.nodes[0]) if conv and not d.get("tiles") else {}
    wide = {**wide, **deep_steps(k.nodes[0], wide)}  # as default() takes them
    narrow = gemm_tiles(k) if wide and wide.items() <= d.items() else {}  # default() took the wide tiles
    # the narrower channel tiles wide_tiles replaced, right after the first Triton candidate in wide ones
    narrowed = {**d, **{key: narrow[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps")},
                "impl": "triton"} if narrow else {}
    if narrow and d["impl"] == "triton":
        out.append(narrowed)
    # the channel tiles over the weight as it is, which positions tiles over it packed replaced
    # (params.transposed_positions), next to the first Triton candidate
    channels = {**{key: v for key, v in d.items() if key not in ("tiles", "packed")}, "impl": "triton"} \
        if conv and d.get("tiles") == "positions" and transposed_positions(k.nodes[0]) else None
    if channels and d["impl"] == "triton":
        out.insert(1, channels)
    if d.get("parts") == "hand" and d["impl"] == "triton":  # Triton's own split (hand_split: faster on most)
        out.append({**d, "parts": "registers"})
    if epilogue and "torch" in sp["impl"]:  # the other implementation next
        out.append({**d, "impl": "triton" if d["impl"] == "torch" else "torch"})
        if channels and d["impl"] == "torch":
            out.append(channels)
        if narrow and d["impl"] == "torch":
            out.append(narrowed)
    if d.get("tiles") == "rows":  # then the tiles rows replaced, and the variants of those
        d = default(analysis, rows=False)
        out.append({**d, "impl": "triton"})
    if d["precision"] == "tf32x3":  # and FMA products at their own tiles and stages
        fma = kernel_default(k, rows=False)
        keys = ("BLOCK_M", "BLOCK_N", "num_warps", "num_stages") + ("BLOCK_K",) * bool(narrow)  # narrow: K 16
        fma = {key: fma[key] for key in keys}
        off = {"persistent": 0} if "persistent" in d else {}  # persistent tiles read split operands only
        out.append({**d, "impl": "triton", "precision": "ieee", **fma, **off})
    if d.get("tiles") == "interleaved":  # and the channel tiles it replaced
        out.append({**d, **gemm_tiles(k), "impl": "triton", "tiles": "channels"})
    if d.get("BLOCK_K") == 1:  # and the dot steps outer products replaced (implicit_gemm.outer_steps)
        out.append({**d, "impl": "triton", "tiles": "positions", "BLOCK_M": 512, "BLOCK_K": CONV_BLOCK_K})
    out.append({**d, "impl": "triton", "BLOCK_M": min(64, d["BLOCK_M"]), "BLOCK_N": min(64, d["BLOCK_N"]),
                "num_warps": 4, "num_stages": 4})
    if kk >= 4096 and k.nodes[0].fn == "mm":
        out.append({**d, "impl": "triton", "SPLIT_K": 1 if d["SPLIT_K"] > 1 else min(8, next_pow2(kk // 2048))})
    if d.get("operands") == "input":  # exact fp32 products of 16-bit operands, slower (no "input" on a CPU)
        out.append({**d, "operands": "fp32"})
    if conv and rows_fit(k.nodes[0]) and not second and out[0].get("tiles") != "rows":
        out.append({**d, **rows_form(k.nodes[0]), "impl": "triton", "BLOCK_M": 128})  # last (_rows_second)
    sp = base.plan(analysis, out[0]) if out[0].get("tiles") == "stream" else None
    if sp and not isinstance(stats_pair(sp.kernels, sp.primary, out[0]), str):  # streamed tiles take them first
        stats = {**out[0], "stats": 1}  # at their tiles, and last at 128 positions where the sums fit registers
        wide = stats["BLOCK_M"] != 128 and stats["BLOCK_N"] <= 32  # (Stats.stream_lines: 92, 64 channels, spilled)
        out = [stats] + out + [{**stats, "BLOCK_M": 128}] * wide
    rows = next((i for i, p in enumerate(out) if p.get("tiles") == "rows" and p["impl"] == "triton"), None)
    if rows is not None and out[rows].get("xlast"):  # params.phased_pair: next its 256 x 64 tiles, K steps of 16
        one = {key: v for key, v in out[rows].items() if key != "SAMPLES"}
        out.insert(rows + 1, {**one, **{key: ROWS_DOT_TILES[key] for key in ("BLOCK_M", "BLOCK_N")}, "BLOCK_K": 16})
    elif rows is not None:  # and right after them the same reading the input channels innermost, where they can
        out.insert(rows + 1, {**out[rows], "xlast": 1})  # (implicit_gemm.channels_last; kernel_invalid says)
        paired = rows_paired(k.nodes[0], out[rows + 1])
        if paired:  # then that at two batch elements a program and two stages (params.rows_paired)
            out.insert(rows + 2, {**out[rows + 1], **paired})
    out = [p for p in out if kernel_invalid(k, base._kernel_params(p)) is None]
    rows = next((i for i, p in enumerate(out) if p.get("tiles") == "rows" and p["impl"] == "triton"), None)
    rp = base.plan(analysis, out[rows]) if rows is not None else None
    if rp and worth_it(rp.kernels, rp.primary, out[rows]):
        out.insert(rows, {**out[rows], "stats": 1})  # the next norm's statistics in its epilogue, first
        st = stats_pair(rp.kernels, rp.primary, out[rows])
        if recompute_pays(rp.kernels, rp.primary, st):  # and before those, its output never written
            out.insert(rows, {**out[rows], "recompute": 1})
    return out


def render(analysis: TaskAnalysis, params: dict) -> str:
    return base.render(analysis, params, NAME)
