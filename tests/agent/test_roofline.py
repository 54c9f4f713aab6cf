"""The roofline-guided proposer (issue 19) on fabricated GPU results: each rule picks the structural move it
should for the kernel that takes the time, its note says why, a candidate at its floor or without a GPU timing
gets none, and the floor stop waits longer for a one-way task, whose own floor is faster than copy's."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.context import Run, RunConfig
from agent.graph import FloorReached, check_limits, floor_bar, one_way
from agent.interfaces import Individual, TaskContext
from agent.operators.param import ParamOperator, _changes, _repeats
from agent.operators.roofline import moves, row_reads
from agent.policies import GreedyPolicy
from agent.runstore import RunStore
from agent.state import State
from agent.templates import BY_NAME, base
from agent.templates.params import tap_steps
from tools.results import CompileInfo, EvalResult, KernelInfo, TaskSpec, Timing

FIXTURES = Path(__file__).parent / "fixtures"
BIG_SOFTMAX = {"batch": 4096, "dim": 393216}  # rows of 1.5 MB, 6 GB in all: a two-pass row outgrows L2


def analysis_of(task: str, shapes: dict | None = None):
    return analyze(str(FIXTURES / f"{task}.py"), small=shapes is None, shapes=shapes)


def measured(gap: float | None, interpreted: bool = False, kernel_ms: dict | None = None,
             compile: CompileInfo | None = None, flops: float = 0.0, nbytes: float = 0.0,
             copy_share: float | None = None) -> EvalResult:
    """A correct candidate's result at `gap` times its floor (no timing at all for None)."""
    if gap is None:
        return EvalResult("correct", "ok", compile=compile)
    ms = 1.0
    copy_ms = None if copy_share is None else copy_share * ms / gap  # the floor's bytes part
    timing = Timing(ms, 2.0, 1.5, ms / gap, 2.0, 1.5, 1 / gap, 1.0, interpreted, flops, nbytes, copy_ms)
    return EvalResult("correct", "ok", device="cpu" if interpreted else "cuda", interpreted=interpreted,
                      timing=timing, kernel_ms=kernel_ms or {}, compile=compile)


def rowwise_moves(a, params: dict, result: EvalResult) -> list:
    t = BY_NAME["rowwise"]
    return moves(a, t, {**t.default(a), **params}, result, a.to_json())


def loops(source: str, kernel: str = "_row_kernel0") -> int:
    body = source.split(f"def {kernel}(", 1)[1].split("@triton.jit", 1)[0].split("class ModelNew", 1)[0]
    return len(re.findall(r"for (r0|it) in (tl\.)?range\(", body))


@pytest.mark.parametrize("task, params", [
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "online": 0}),
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128}),
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 256, "welford": 0}),
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 256, "welford": 2}),
    ("var_cross_entropy", {"mode": "looped", "BLOCK_R": 128, "fold": 0}),
    ("var_cross_entropy", {"mode": "looped", "BLOCK_R": 128}),
    ("var_cross_entropy", {"mode": "one_pass"}),
])
def test_reads_per_row_are_the_passes_the_kernel_makes(task, params):
    a = analysis_of(task)
    p = {**BY_NAME["rowwise"].default(a), **params}
    assert row_reads(base.plan(a, p).main, p) == max(1, loops(BY_NAME["rowwise"].render(a, p)))


def test_a_two_pass_row_reduction_tries_the_one_pass_forms_first():
    a = analysis_of("var_softmax_rows")
    out = rowwise_moves(a, {"mode": "looped", "BLOCK_R": 128, "online": 0, "tail_first": 0}, measured(1.52))
    assert [m.reason for m in out[:4]] == [
        "memory-bound at 1.52x the floor, 3 reads per row: try the online softmax, its max and sum in one pass "
        "(online 0->1)",
        "memory-bound at 1.52x the floor, 3 reads per row: try the row held in registers, read once (one_pass)",
        "memory-bound at 1.52x the floor, 3 reads per row: try the earlier passes' loads kept in L2 (evict_last) "
        "and the last pass's let go first (evict 0->1)",
        "memory-bound at 1.52x the floor, 3 reads per row: try the last pass from the row's end, first re-reading "
        "what L2 still holds (tail_first 0->1)"]
    assert out[0].params["online"] == 1 and out[1].params["mode"] == "one_pass" and out[2].params["evict"] == 1
    assert out[3].params["tail_first"] == 1
    assert all(m.kernel is None and base.invalid(a, m.params) is None for m in out)


def test_rows_that_outgrow_l2_try_the_held_the_lagged_then_the_grouped_split():
    a = analysis_of("tpl_softmax_param", BIG_SOFTMAX)
    out = rowwise_moves(a, {}, measured(1.5))  # the default: looped, online softmax, then a pass writing the row
    assert out[0].params["COOP"] == 1 and out[0].params["SPLIT"] == 393216 // 8192 and out[0].params["BLOCK_R"] == 8192
    assert out[0].reason == ("memory-bound at 1.50x the floor, 2 reads per row: try a chunk a program, held in "
                             "registers while the row's statistics are combined, so the row is read once "
                             "(SPLIT 48, COOP 0->1)")
    assert out[1].params["LAG"] == 1 and out[1].params["SPLIT"] == 393216 // 16384 and not out[1].params["GROUP"]
    assert out[1].reason == ("memory-bound at 1.50x the floor, 2 reads per row: try the split in one launch, each "
                             "chunk's second read a row behind its first, from L2 (SPLIT 24, LAG 0->1)")
    assert base.invalid(a, out[0].params) is None and base.invalid(a, out[1].params) is None
    grouped = [m for m in out if m.params.get("GROUP")]
    assert grouped and grouped[0] is out[2] and not grouped[0].params["LAG"] and not grouped[0].params["COOP"]
    assert grouped[0].params["SPLIT"] > 1 and grouped[0].params["GROUP"] == 16
    assert grouped[0].reason.startswith("memory-bound at 1.50x the floor, 2 reads per row: try a split run 16 rows "
                                        "at a time, its second read from L2 (SPLIT ")
    four = rowwise_moves(a, {"online": 0}, measured(1.5))  # the max first: a split needs the online form too
    assert [m.params["online"] for m in four[:4]] == [1, 1, 1, 1] and four[1].params["COOP"] == 1
    assert four[2].params["LAG"] == 1 and four[3].params["GROUP"] == 16
    # held, the split reads each row once: the move is not offered again
    held = rowwise_moves(a, out[0].params, measured(1.5))
    assert not any(m.params.get("COOP") for m in held)


def test_a_held_split_held_back_by_its_registers_tries_a_cap():
    """A held split's programs keep their chunks through the row's combine, so the chunks an SM holds are its
    data in flight: where registers hold it to fewer programs than its shared memory allows, it tries the
    space's cap (level 1's 35 on an H200: 103 registers a thread, 4 programs of 4 warps an SM). A split that
    is not held, or a held one already capped, is not offered it."""
    a = analysis_of("tpl_softmax_param", BIG_SOFTMAX)
    held = rowwise_moves(a, {}, measured(1.5))[0].params
    assert held["COOP"] == 1 and held["num_warps"] == 4
    info = CompileInfo([KernelInfo("_row_kernel0", registers=103, spills=0, shared_bytes=1024, num_warps=4)],
                       "read")
    result = measured(1.3, compile=info, copy_share=1.0)
    out = [m for m in rowwise_moves(a, held, result) if "maxnreg" in m.reason]
    assert held["SPLIT"] == 48 and [m.params["maxnreg"] for m in out] == [96, 80]  # 5 programs an SM, then 6
    assert out[1].reason == ("memory-bound at 1.30x the floor, 103 registers a thread at 4 warps hold it to 4 "
                             "programs an SM: try at most 80 (16 rows at once; maxnreg)")
    assert all(base.invalid(a, m.params) is None for m in out)
    assert not any("maxnreg" in m.reason for m in rowwise_moves(a, out[0].params, result))
    # capped at 80 it spills (35 on an H200: 4 registers): the cap's price, not a reason for more warps
    capped = CompileInfo([KernelInfo("_row_kernel0", registers=80, spills=4, shared_bytes=1024, num_warps=4)],
                         "read")
    assert not any("spilled" in m.reason for m in rowwise_moves(a, out[1].params, measured(1.24, compile=capped)))
    assert any("spilled" in m.reason for m in rowwise_moves(a, held, measured(1.24, compile=capped)))
    lagged = rowwise_moves(a, {}, measured(1.5))[1].params
    assert lagged["LAG"] == 1 and not any("maxnreg" in m.reason for m in rowwise_moves(a, lagged, result))
    assert base.invalid(a, {**lagged, "maxnreg": 96}) == "maxnreg caps a held split's registers (COOP 1)"
    assert base.invalid(a, {**held, "welford": 2}) == ("COOP takes one chunk a program: welford 2's per-lane "
                                                       "updates have one step to take (welford 1)")


@pytest.mark.parametrize("batch, caps", [(896, [80]), (2, [])])
def test_a_held_split_tries_only_caps_that_hold_more_whole_rows(batch, caps):
    """A row's programs wait for each other, so what a held split runs at once is its whole rows: the programs
    left over poll for peers that have no room to start. Level 1's 35 on an H200 (256 chunks a row, 4 programs
    an SM at 103 registers: 2 rows) ran 4.83 ms, 5.23 at a cap of 96 (5 an SM, still 2 rows) and 4.38 at 80
    (6, 3 rows). A cap is not tried where every row already runs at once."""
    held = rowwise_moves(analysis_of("tpl_softmax_param", {"batch": 896, "dim": 256 * 8192}), {}, measured(1.5))
    held = held[0].params
    assert held["COOP"] == 1 and held["SPLIT"] == 256
    a = analysis_of("tpl_softmax_param", {"batch": batch, "dim": 256 * 8192})
    info = CompileInfo([KernelInfo("_row_kernel0", registers=103, spills=0, shared_bytes=1024, num_warps=4)],
                       "read")
    out = [m for m in rowwise_moves(a, held, measured(1.3, compile=info, copy_share=1.0)) if "maxnreg" in m.reason]
    assert [m.params["maxnreg"] for m in out] == caps


@pytest.mark.parametrize("warps, cap, chunk, fit", [(4, 80, 8192, None), (16, 80, 8192, 1), (32, 80, 8192, 0),
                                                    (32, 32, 8192, None), (32, None, 8192, None), (32, None, 4096, 2),
                                                    (16, None, 4096, None)])
def test_a_held_split_refuses_warps_and_caps_that_cannot_hold_a_row_at_once(warps, cap, chunk, fit):
    """A row's programs poll for each other, so warps or a register cap that leave an SM room for fewer of them
    than a row has run their polls out: level 1's 35 (256 chunks a row) at 32 warps under a cap of 80, one
    program an SM, ran past the 300 s limit on an H200 (session 53). Two programs of 32 warps fit an SM under a
    cap of 32 or none: 264 slots, enough for 256 chunks of 8192 but not for 512 of 4096."""
    a = analysis_of("tpl_softmax_param", {"batch": 896, "dim": 256 * 8192})
    held = rowwise_moves(a, {}, measured(1.5))[0].params
    assert held["COOP"] == 1 and held["SPLIT"] == 256
    split = 256 * 8192 // chunk
    reason = base.invalid(a, {**held, "num_warps": warps, "BLOCK_R": chunk, "SPLIT": split,
                              **({"maxnreg": cap} if cap else {})})
    capped = f" under a cap of {cap} registers" if cap else ""
    assert reason == (None if fit is None else f"COOP runs a row's {split} programs at once: {fit} of {warps} "
                                               f"warps{capped} fit an SM, {132 * fit} on 132 SMs")


def test_a_kernel_that_spills_tries_more_warps_then_a_smaller_tile():
    a = analysis_of("var_softmax_rows")
    spilling = CompileInfo([KernelInfo("_row_kernel0", registers=255, spills=96, num_warps=4)], "read")
    out = rowwise_moves(a, {"mode": "looped", "BLOCK_R": 2048, "BLOCK_O": 1, "num_warps": 4},
                        measured(1.3, compile=spilling))
    assert out[0].reason == ("memory-bound at 1.30x the floor, 96 registers spilled (255 a thread at 4 warps): "
                             "try num_warps 4->8")
    assert out[0].params["num_warps"] == 8
    assert out[1].params["BLOCK_R"] == 1024 and "try a smaller tile (BLOCK_R 2048->1024)" in out[1].reason
    no_spills = CompileInfo([KernelInfo("_row_kernel0", registers=128, spills=0, num_warps=4)], "read")
    assert not any("spilled" in m.reason for m in rowwise_moves(a, {"mode": "looped", "BLOCK_R": 2048},
                                                                measured(1.3, compile=no_spills)))


def test_a_spilling_convolution_narrows_its_k_tile_first(tmp_path):
    """A convolution's registers go to its gathered index tiles: a narrower K tile before more warps."""
    task = tmp_path / "conv.py"
    task.write_text((FIXTURES / "conv_kinds.py").read_text())
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    start = {**t.default(a), "impl": "triton", "BLOCK_K": 32, "num_warps": 4}
    spilling = CompileInfo([KernelInfo("_gemm_kernel0", registers=255, spills=700, num_warps=4)], "read")
    out = [m for m in moves(a, t, start, measured(1.8, compile=spilling), a.to_json()) if "spilled" in m.reason]
    assert [m.params["BLOCK_K"] for m in out] == [16, 32]
    assert out[0].reason.endswith("700 registers spilled (255 a thread at 4 warps): try a smaller tile "
                                  "(BLOCK_K 32->16)")
    assert out[1].params["num_warps"] == 8 and out[1].params["BLOCK_M"] == start["BLOCK_M"]


def test_a_plain_deep_convolution_spilling_at_k_steps_of_64_tries_more_warps_first():
    """K steps of 64 over a plain deep convolution (params.deep_steps) spill at 4 warps and still beat steps of
    32: more warps come before the narrower K tile; at K steps of 32 the narrower tile still comes first."""
    a = analysis_of("conv_deep_small")
    t = BY_NAME["gemm"]
    start = {**t.default(a), "impl": "triton"}
    assert (start["BLOCK_K"], start["num_warps"]) == (64, 4)  # deep steps
    spilling = CompileInfo([KernelInfo("_gemm_kernel0", registers=255, spills=560, num_warps=4)], "read")
    out = [m for m in moves(a, t, start, measured(1.8, compile=spilling), a.to_json()) if "spilled" in m.reason]
    assert out[0].params["num_warps"] == 8 and out[0].params["BLOCK_K"] == 64
    assert out[0].reason.endswith("560 registers spilled (255 a thread at 4 warps): try num_warps 4->8")
    assert out[1].params["BLOCK_K"] == 32
    shallow = [m for m in moves(a, t, {**start, "BLOCK_K": 32}, measured(1.8, compile=spilling), a.to_json())
               if "spilled" in m.reason]
    assert shallow[0].params["BLOCK_K"] == 16


@pytest.mark.parametrize("registers, shared, warps, copy_share, caps", [
    (182, 24_600, 4, 1.0, [(168, 3), (128, 4)]),  # level 1's 79: 2 programs an SM by their registers
    (176, 70_400, 4, 1.0, [(168, 3)]),   # a fourth would not fit the shared memory
    (154, 34_800, 4, 0.98, [(128, 4)]),  # 3 programs: 168 holds them to 3 still
    (166, 4_100, 2, 1.0, [(128, 8)]),    # 6 of 2 warps
    (176, 100_000, 4, 1.0, []),          # the shared memory holds it to 2 anyway
    (100, 16_000, 4, 1.0, []),           # 5: the space's caps fit no more
    (182, 24_600, 4, 0.5, []),           # its floor is its products: the cap slowed three such convolutions
    (182, 24_600, 4, None, []),          # no floor's bytes part recorded
])
def test_a_convolution_whose_floor_is_its_bytes_held_back_by_its_registers_tries_caps(
        registers, shared, warps, copy_share, caps, tmp_path):
    """Its intensity against fp32's FMA ridge may call it compute-bound (level 1's 79 and 59 are, at 1e12
    FLOPs a GB here): the move asks only that its floor be its bytes. Each cap that fits more programs an SM,
    by registers and shared memory, the least strict first: level 1's 79 ran no faster at 168, 1.13x at 128."""
    task = tmp_path / "conv.py"
    task.write_text((FIXTURES / "conv_kinds.py").read_text())
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    start = {**t.default(a), "impl": "triton", "num_warps": warps}
    info = CompileInfo([KernelInfo("_gemm_kernel0", registers=registers, spills=0, shared_bytes=shared,
                                   num_warps=warps)], "read")
    result = measured(3.0, compile=info, flops=1e12, nbytes=1e9, copy_share=copy_share)
    out = [m for m in moves(a, t, start, result, a.to_json()) if "maxnreg" in m.reason]
    assert [m.params["maxnreg"] for m in out] == [c for c, _ in caps]
    now = {182: 2, 176: 2, 154: 3, 166: 6}.get(registers)
    for m, (cap, n) in zip(out, caps):
        assert m.reason.endswith(f"{registers} registers a thread at {warps} warps hold it to {now} programs an SM: "
                                 f"try at most {cap} ({n}; maxnreg)")
    if out:
        capped = moves(a, t, out[0].params, result, a.to_json())
        assert not any("maxnreg" in m.reason for m in capped)  # once capped, not again


def test_a_streamed_convolution_held_back_by_its_registers_takes_more_programs_with_its_cap(tmp_path):
    """Streamed tiles launch per_sm programs an SM, so a cap that fits a third program takes per_sm 3 with it:
    level 2's 21 on an H200 (176 registers, 64 KB of shared memory, 2 an SM) ran 1.524 ms at a cap of 168
    alone and 1.442 with per_sm 3. A fourth would not fit the shared memory, so 128 is not tried."""
    task = tmp_path / "stream_norm.py"
    task.write_text((FIXTURES / "conv_norm_small.py").read_text().replace('kind = "transposed3d"',
                                                                           'kind = "stream_window"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    stream = t.variants(a)[1]
    assert stream["tiles"] == "stream" and stream["per_sm"] == 2
    info = CompileInfo([KernelInfo("_gemm_kernel0", registers=176, spills=0, shared_bytes=64_256, num_warps=4)],
                       "read")
    result = measured(3.0, compile=info, flops=1e12, nbytes=1e9, copy_share=1.0)
    out = [m for m in moves(a, t, stream, result, a.to_json()) if "maxnreg" in m.reason]
    assert [m.params for m in out] == [{**stream, "maxnreg": 168, "per_sm": 3}]
    assert out[0].reason.endswith("176 registers a thread at 4 warps hold it to 2 programs an SM: try at most 168 "
                                  "(3; maxnreg, per_sm)")
    assert base.invalid(a, out[0].params) is None


def test_few_rows_per_program_spread_over_more_programs():
    a = analysis_of("var_cross_entropy")  # 7 rows
    out = rowwise_moves(a, {"mode": "one_pass", "BLOCK_O": 4}, measured(1.4))
    assert [m.reason for m in out] == ["memory-bound at 1.40x the floor, 2 programs for 132 SMs: try one row per "
                                       "program (BLOCK_O 4->1)"]


def test_a_compute_bound_gemm_tries_the_vendor_gemm_then_other_tiles():
    a = analysis_of("tpl_gemm_epilogue", {"batch": 4096, "d_in": 4096, "d_out": 4096})
    t = BY_NAME["gemm"]
    assert t.default(a)["precision"] == "tf32x3"  # its operands split once (split_operands)
    start = {**t.default(a), "impl": "triton", "precision": "ieee", "persistent": 0}  # the FMA products
    out = moves(a, t, start, measured(1.8), a.to_json())
    assert out[0].params["impl"] == "torch"
    assert out[0].reason == ("compute-bound at 1.80x the floor, a Triton GEMM: try the vendor GEMM under the Triton "
                             "epilogue (impl triton->torch)")
    assert out[1].params["precision"] == "tf32x3" and out[1].reason.endswith(
        "an fp32 matrix product in FMA products: try its operands split once into TF32 parts, three tensor-core "
        "products a step (precision ieee->tf32x3)")
    assert out[1].params["persistent"] == 1  # 1024 tiles: persistent ones (gemm.persistent_pays)
    tiles = [m for m in out[2:] if m.params["impl"] == "triton"]
    assert tiles and all("1024 output tiles of 128x128 for 132 SMs: try " in m.reason for m in tiles)
    assert {(m.params["BLOCK_M"], m.params["BLOCK_N"]) for m in tiles} <= {(256, 128), (128, 256)}


@pytest.mark.parametrize("batch, moved", [(4096, True), (1024, False)])
def test_split_operands_try_persistent_tiles_where_they_fill_two_waves(batch, moved):
    """1024 tiles of 128 x 128 (4096 rows) try a program an SM walking them; 256 tiles, under two waves of 132
    SMs, do not."""
    a = analysis_of("tpl_gemm_epilogue", {"batch": batch, "d_in": 4096, "d_out": 4096})
    t = BY_NAME["gemm"]
    start = {**t.default(a), "BLOCK_M": 128, "persistent": 0}
    out = [m for m in moves(a, t, start, measured(1.8), a.to_json()) if m.params.get("persistent")]
    assert bool(out) == moved
    if moved:
        assert out[0].reason.endswith("try a program an SM walking them, its parts read by TMA (persistent 0->1)")


def test_a_triton_convolution_tries_its_tiles_walking_the_other_axis(tmp_path):
    """After the vendor convolution: positions where the rule chose channels (40 input channels), and back; a
    transposed convolution strided along its last dim tries interleaved tiles too, at their own sizes."""
    task = tmp_path / "conv.py"
    task.write_text((FIXTURES / "conv_kinds.py").read_text().replace('kind = "conv2d"', 'kind = "conv2d_grouped"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    out = moves(a, t, {**t.default(a), "impl": "triton"}, measured(1.8), a.to_json())
    flip = next(m for m in out if "tiles" in m.params)
    assert flip.params["tiles"] == "positions" and flip.reason.endswith(
        "a Triton convolution: try positions tiles (tiles channels->positions)")
    tiles = [m.params for m in out if "tiles" in m.params]  # not transposed: no interleave
    assert [p["tiles"] for p in tiles] == ["positions", "rows"]
    assert (tiles[1]["BLOCK_M"], tiles[1]["BLOCK_N"], tiles[1]["num_warps"]) == (64, 16, 1)  # at rows' own sizes
    back = moves(a, t, {**t.default(a), "impl": "triton", "tiles": "positions"}, measured(1.8), a.to_json())
    assert next(m for m in back if "tiles" in m.params).params["tiles"] == "channels"
    task.write_text((FIXTURES / "conv_kinds.py").read_text().replace('kind = "conv2d"', 'kind = "transposed2d_sparse"'))
    a = analyze(str(task), small=True)
    out = moves(a, t, {**t.default(a), "impl": "triton", "tiles": "channels", "BLOCK_N": 64}, measured(1.8),
                a.to_json())
    inter = next(m for m in out if m.params.get("tiles") == "interleaved")
    assert (inter.params["BLOCK_M"], inter.params["BLOCK_N"]) == (128, 16)  # eight slots (stride 5) a row


def test_a_few_channel_convolution_in_dot_steps_tries_outer_products(tmp_path):
    """A phased convolution over 3 input channels taken in 16-wide dot steps: outer-product steps next, at
    their own tile sizes; from outer products no such move, and none for a convolution that cannot take them."""
    task = tmp_path / "conv.py"
    task.write_text((FIXTURES / "conv_kinds.py").read_text().replace('kind = "conv2d"', 'kind = "transposed3d"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    dot = {**t.default(a), "impl": "triton", "tiles": "positions", "BLOCK_M": 512, "BLOCK_K": 16, "num_warps": 4}
    out = moves(a, t, dot, measured(1.8), a.to_json())
    outer = next(m for m in out if m.params.get("BLOCK_K") == 1)
    assert outer.reason.endswith("a phased convolution over few input channels: try outer-product K steps "
                                 "(BLOCK_K 16->1)")
    assert (outer.params["tiles"], outer.params["BLOCK_M"], outer.params["num_warps"]) == ("channels", 256, 2)
    assert not any("outer-product" in m.reason for m in moves(a, t, {**t.default(a), "impl": "triton"},
                                                              measured(1.8), a.to_json()))
    plain = analyze(str(FIXTURES / "conv_kinds.py"), small=True)
    assert not any("outer-product" in m.reason for m in moves(plain, t, {**t.default(plain), "impl": "triton"},
                                                              measured(1.8), plain.to_json()))


def test_a_triton_convolution_tries_its_weight_the_other_way(tmp_path):
    """A strided transposed convolution reads its weight packed by default, so the move is to read it as it is;
    an unstrided one the reverse; the vendor convolution has none."""
    task = tmp_path / "conv.py"
    t = BY_NAME["gemm"]
    for kind, now in (("transposed2d_grouped", 1), ("conv2d_grouped", 0)):
        task.write_text((FIXTURES / "conv_kinds.py").read_text().replace('kind = "conv2d"', f'kind = "{kind}"'))
        a = analyze(str(task), small=True)
        d = t.default(a, rows=False)
        assert d.get("packed", 0) == now
        flip = next(m for m in moves(a, t, {**d, "impl": "triton"}, measured(1.8), a.to_json())
                    if "(packed" in m.reason)
        assert flip.params["packed"] == 1 - now and flip.reason.endswith(f"(packed {now}->{1 - now})")
        assert not any("(packed" in m.reason for m in moves(a, t, {**d, "impl": "torch"}, measured(1.8),
                                                            a.to_json()))


def test_a_gemm_whose_tiles_do_not_fill_the_gpu_splits_k():
    a = analysis_of("tpl_matmul", {"batch": 64, "d_in": 8192, "d_out": 256})
    t = BY_NAME["gemm"]
    out = moves(a, t, t.default(a) | {"SPLIT_K": 1}, measured(1.78), a.to_json())
    split = next(m for m in out if m.params["SPLIT_K"] > 1)
    assert split is out[0] and split.reason == ("compute-bound at 1.78x the floor, 2 output tiles for 132 SMs: try "
                                                "SPLIT_K 1->16")


def test_the_kernel_with_the_device_time_is_the_one_moved():
    source = (FIXTURES / "var_gemm_rownorm.py").read_text()  # a Triton GEMM (kernel 0, the main one), a row norm
    a = analyze(source, small=True)
    t = BY_NAME["gemm"]
    start = {**t.default(a), "impl": "triton", "kernels": {"1": {"mode": "looped", "BLOCK_R": 128}}}
    result = measured(1.6, kernel_ms={"_row_kernel1": 0.8, "_gemm_kernel0": 0.2})
    out = moves(a, t, start, result, a.to_json())
    assert out and all(m.kernel == 1 for m in out)
    assert out[0].params["kernels"]["1"]["mode"] == "one_pass" and out[0].reason == (
        "memory-bound at 1.60x the floor, 2 reads per row: try the row held in registers, read once (one_pass)")
    assert {k: v for k, v in out[0].params.items() if k != "kernels"} == \
        {k: v for k, v in start.items() if k != "kernels"}
    op = ParamOperator(seed=0)
    best = Individual(4, "src", "param", None, {"template": "gemm", **start}, result=result)
    op.observe([best])
    first = op.propose(TaskContext("var_gemm_rownorm", source, a.to_json(), "cuda", "cpu"), [best], 1)[0]
    assert first.note.startswith("param search: roofline: memory-bound at 1.60x the floor, 2 reads per row: ")
    assert first.note.endswith("(from kernel 1, the most device time in candidate 4)")


def test_a_vendor_gemm_tries_the_triton_one_first():
    """The vendor GEMM's time is in no Triton kernel's profile, so the epilogue's row kernel reads as the hottest;
    the first move is still the whole plan's, to the Triton GEMM (level 2's 77 on an H200: its vendor default
    37.3 ms, its Triton form 21.9, never tried at budget 3)."""
    source = (FIXTURES / "var_gemm_rownorm.py").read_text()
    a = analyze(source, small=True)
    t = BY_NAME["gemm"]
    start = {**t.default(a), "impl": "torch"}
    out = moves(a, t, start, measured(1.6, kernel_ms={"_row_kernel1": 0.8}), a.to_json())
    assert out[0].params == {**start, "impl": "triton"} and out[0].kernel is None
    assert out[0].reason.endswith("try the Triton one at these tiles, the epilogue in it (impl torch->triton)")
    triton = moves(a, t, {**start, "impl": "triton"}, measured(1.6, kernel_ms={"_row_kernel1": 0.8}), a.to_json())
    assert not any("impl torch->triton" in m.reason for m in triton)


PHASED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(8, 6, 3, stride=STRIDE, padding=1)

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


def get_inputs():
    return [torch.randn(2, 8, 5, 6), torch.randn(2, 6, OUT)]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("stride, vendor", [(2, False), (1, True)])
def test_a_strided_transposed_convolution_in_fp32_does_not_try_the_vendor_one(stride, vendor):
    """From a Triton candidate under an epilogue, the vendor convolution is a move, but not for a strided
    (phased) transposed one in fp32: cuDNN's ran 5-8x slower there (roofline._gemm)."""
    out_size = "9, 11" if stride == 2 else "5, 6"
    a = analyze(PHASED.replace("STRIDE", str(stride)).replace("OUT", out_size), small=True)
    t = BY_NAME["gemm"]
    assert "torch" in t.space(a)["impl"]
    out = moves(a, t, {**t.default(a), "impl": "triton"}, measured(1.8), a.to_json())
    assert out and any(m.params.get("impl") == "torch" for m in out) == vendor  # other moves either way


POINTWISE = PHASED.replace("nn.ConvTranspose2d(8, 6, 3, stride=STRIDE, padding=1)", "nn.Conv2d(8, 6, 1)") \
    .replace("torch.randn(2, 8, 5, 6)", "torch.randn(2, 8, OUT)")


@pytest.mark.parametrize("size, vendor", [("16, 16", False), ("5, 6", True)])
def test_a_pointwise_convolution_that_streams_does_not_try_the_vendor_one(size, vendor):
    """Nor for a 1x1 convolution that streams its positions (implicit_gemm.streams: 256 of them an image here,
    30 there): cuDNN's fp32 one ran level 1's 87_conv_pointwise_2D 2.7x slower than the streamed form."""
    a = analyze(POINTWISE.replace("OUT", size), small=True)
    t = BY_NAME["gemm"]
    assert (t.default(a).get("tiles") == "stream") != vendor
    out = moves(a, t, {**t.default(a), "impl": "triton"}, measured(1.8), a.to_json())
    assert out and any(m.params.get("impl") == "torch" for m in out) == vendor


@pytest.mark.parametrize("result", [
    measured(None),  # no timing
    measured(1.52, interpreted=True),  # an interpreter time: no floor to compare with
    measured(1.05),  # at the floor (within the search's margin of it)
], ids=["no timing", "interpreted", "at the floor"])
def test_no_roofline_move_without_a_gpu_time_or_at_the_floor(result):
    a = analysis_of("var_softmax_rows")
    assert rowwise_moves(a, {"mode": "looped", "BLOCK_R": 128, "online": 0}, result) == []


def test_the_parameter_operator_proposes_the_moves_first_with_their_reasons():
    source = (FIXTURES / "var_softmax_rows.py").read_text()
    a = analyze(source, small=True)
    task = TaskContext("var_softmax_rows", source, a.to_json(), "cuda:NVIDIA H200 (sm_90)", "cpu")
    params = {"template": "rowwise", **BY_NAME["rowwise"].default(a), "mode": "looped", "BLOCK_R": 128, "online": 0}
    best = Individual(5, "src", "param", None, params, result=measured(1.52))
    op = ParamOperator(seed=0)
    op.observe([best])
    first = op.propose(task, [best], 2)
    assert len(first) == 2 and first[0].params["online"] == 1  # one of two: ROOFLINE's share
    assert first[0].note == ("param search: roofline: memory-bound at 1.52x the floor, 3 reads per row: try the "
                             "online softmax, its max and sum in one pass (online 0->1) (from candidate 5)")
    assert "roofline" not in first[1].note
    second = op.propose(task, [best], 2)
    assert second[0].params["mode"] == "one_pass" and "read once (one_pass)" in second[0].note
    slow = Individual(6, "src", "param", None, params, result=measured(1.52, interpreted=True))
    op = ParamOperator(seed=0)
    op.observe([slow])
    assert not any("roofline" in p.note for p in op.propose(task, [slow], 4))


def test_a_roofline_move_that_lost_is_not_made_again_from_the_next_fittest_candidate():
    """The online softmax ran at half its origin's speed; from the next fittest candidate (one warp count away)
    the proposer moves on to its other structural moves, where a fresh one would make that move first."""
    source = (FIXTURES / "var_softmax_rows.py").read_text()
    a = analyze(source, small=True)
    task = TaskContext("var_softmax_rows", source, a.to_json(), "cuda:NVIDIA H200 (sm_90)", "cpu")
    params = {"template": "rowwise", **BY_NAME["rowwise"].default(a), "mode": "looped", "BLOCK_R": 128, "online": 0}

    def at(i: int, p: dict, ms: float) -> Individual:
        timing = Timing(ms, 2.0, 1.5, 0.66, 2.0, 1.5, 0.66 / ms, 1.0, False, 0.0, 0.0)
        return Individual(i, "src", "param", None, p, result=EvalResult("correct", "ok", device="cuda",
                                                                       timing=timing))

    first = at(1, params, 1.0)
    op = ParamOperator(seed=0)
    op.observe([first])
    move = op.propose(task, [first], 1)[0]
    assert move.params["online"] == 1 and "roofline" in move.note
    later = at(3, {**params, "num_warps": params["num_warps"] * 2}, 0.9)
    fresh = ParamOperator(seed=0)
    fresh.observe([later])
    assert fresh.propose(task, [later], 1)[0].params["online"] == 1  # the move a new search makes first
    op.observe([at(2, move.params, 2.0), later])
    again = [p for _ in range(3) for p in op.propose(task, [later], 1) if "roofline" in p.note]
    assert again and all(p.params.get("online") == 0 and "(from candidate 3)" in p.note for p in again)



def test_a_move_that_lost_is_known_again_when_it_also_sets_back_what_its_origin_changed():
    """Level 1's 79 on an H200: channel tiles (a roofline move from interleaved ones) lost; the next fittest
    candidate was one GROUP_M away, and the same move from it set GROUP_M back to 8 as well. That is still the
    move that lost; positions tiles are not."""
    origin = {"tiles": "interleaved", "BLOCK_M": 128, "BLOCK_N": 32, "num_stages": 1, "GROUP_M": 8}
    channels = {"tiles": "channels", "BLOCK_M": 256, "BLOCK_N": 16, "num_stages": 3, "GROUP_M": 8}
    lost = {_changes(origin, channels)}
    later = {**origin, "GROUP_M": 16}
    assert _changes(later, channels) not in lost  # as the changes alone, a move not made before
    assert _repeats(channels, lost) and not _repeats({**channels, "tiles": "positions"}, lost)

# --- the floor stop: a one-way task's own floor is faster than copy bandwidth's --------------------------
def best_at(floor_fraction: float) -> State:
    return State(archive=[Individual(1, "src", "template", None, result=measured(1 / floor_fraction))])


def test_a_one_way_task_stops_only_past_the_copy_floor(tmp_path):
    """Reads alone, or writes alone, stream faster than a copy (an H200: 1.09x at 4 GB), so a task that mostly
    reads (a loss) or mostly writes (an upsampling: 16 times the bytes it reads) stops at its own floor; one that
    writes what it reads stops at the copy floor's."""
    loss = analysis_of("var_cross_entropy").to_json()  # reads the logits, writes one number
    softmax = analysis_of("var_softmax_rows").to_json()  # writes what it reads
    tensor = lambda *shape: {"shape": list(shape), "dtype": "torch.float32"}  # noqa: E731
    upsample = {"inputs": [tensor(2, 3, 4, 4)], "outputs": [tensor(2, 3, 16, 16)]}
    assert one_way(loss) and one_way(upsample) and not one_way(softmax) and not one_way({})
    assert not one_way({"inputs": [tensor(2, 3, 4, 4)], "outputs": [tensor(2, 3, 8, 8)]})  # 4 times: both ways
    margin = RunConfig().floor_margin
    assert floor_bar(softmax, margin) == pytest.approx(1 / 1.1) and floor_bar(loss, margin) > 0.99
    store = RunStore(tmp_path / "run.sqlite")
    cfg = RunConfig(floor_margin=margin)
    run = Run(config=cfg, run_id=store.create_run("t.py", cfg.to_json()), spec=TaskSpec("t.py"), executor=None,
              task=TaskContext("loss", "src", loss, "cuda", "sm_90"), policy=GreedyPolicy(), operators=[], store=store)
    check_limits(best_at(0.95), run)  # past the copy floor's bar, not its own floor's
    with pytest.raises(FloorReached, match="one-way"):
        check_limits(best_at(1.0), run)
    run.task = TaskContext("softmax", "src", softmax, "cuda", "sm_90")
    with pytest.raises(FloorReached):
        check_limits(best_at(0.95), run)
    a = analysis_of("var_cross_entropy")  # and the proposer still has moves for it where the stop waits
    assert rowwise_moves(a, {"mode": "one_pass", "BLOCK_O": 4}, measured(1 / 0.95))


def test_rows_read_once_far_from_the_floor_try_a_pipeline_fewer_instructions_then_longer_chunks():
    """Cross-entropy over 128k logits, its rows read once (the online log-sum-exp with the target folded in), at
    3.1x its floor: the chunk loop pipelined, the max once per chunk, then longer chunks and more warps (more
    bytes in flight); none of these for a row held in registers."""
    a = analysis_of("var_cross_entropy", {"rows": 2048, "vocab": 128256})
    start = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "online": 1, "fold": 1}
    out = rowwise_moves(a, start, measured(3.1))
    assert out[0].params["pipeline"] == 1 and out[0].params["num_stages"] == 3
    assert out[1].params["online"] == 2 and out[1].reason.endswith("(online 1->2), fewer instructions per element")
    assert [(m.params["BLOCK_R"], m.params["num_warps"]) for m in out[2:4]] == [(16384, 32), (8192, 16)]
    assert out[2].reason == ("memory-bound at 3.10x the floor, rows read once, 4096-wide chunks: try more bytes in "
                             "flight (BLOCK_R 4096->16384, num_warps 8->32)")
    assert rowwise_moves(a, {**start, "online": 2, "pipeline": 1}, measured(3.1))[0].params["BLOCK_R"] == 16384
    # in bf16 the max per group of a thread's 8 logits is the default, and the move from a max per chunk
    bf16 = analyze(str(FIXTURES / "var_cross_entropy.py"), False, shapes={"rows": 2048, "vocab": 128256},
                   dtype="bfloat16")
    assert BY_NAME["rowwise"].default(bf16)["online"] == 3 and BY_NAME["rowwise"].default(a)["online"] == 2
    move = rowwise_moves(bf16, {**start, "online": 2, "pipeline": 1}, measured(3.1))[0]
    assert move.params["online"] == 3 and "per group of a thread's 16 bytes (online 2->3)" in move.reason
    assert all(base.invalid(a, m.params) is None for m in out)
    assert not any("in flight" in m.reason for m in rowwise_moves(a, {**start, "mode": "one_pass"}, measured(3.1)))


def test_rows_read_twice_that_outgrow_l2_take_wide_chunks_then_persistent_programs():
    """L1 normalization over rows of 65535 (38_L1Norm_'s shape) on an H200: a program per row at 8 warps and
    4096-wide chunks took 1.87x its floor; 132 persistent programs at 32 warps and 16384-wide chunks 1.54x; a
    split grouped to fit L2 3.4x longer. Session 11 measured the same warps and chunks with a program per row
    at 5.39 ms against 6.26 persistent: the default, with the persistent form the third variant (after the
    default with eviction hints, at 16 warps: session 32, 4.54 ms with its whole chunks realigned)."""
    a = analysis_of("var_rows_many", {"rows": 32768, "dim": 65535})
    default, second, third = BY_NAME["rowwise"].variants(a)[:3]
    assert (default["PERSIST"], default["num_warps"], default["BLOCK_R"]) == (0, 32, 16384)
    assert second == {**default, "evict": 1, "num_warps": 16} and third == {**default, "PERSIST": 1}
    # rows half as long fit two a SM: 16 warps and 8192-wide chunks, where persistence helped (6.11 ms against
    # 6.46 for a program per row on 38's rows): the default stays persistent, and nothing repeats it
    half = BY_NAME["rowwise"].variants(analysis_of("var_rows_many", {"rows": 32768, "dim": 32768}))
    assert (half[0]["PERSIST"], half[0]["num_warps"], half[0]["BLOCK_R"]) == (2, 16, 8192)
    assert half[2] == {**half[0], "evict": 1}  # after the row held in registers
    assert not any(v.get("PERSIST") for v in half[3:] if v.get("mode") == "looped" and "SPLIT" not in v)
    start = {"mode": "looped", "BLOCK_O": 1, "BLOCK_R": 4096, "num_warps": 8, "tail_first": 1, "PERSIST": 0}
    out = rowwise_moves(a, start, measured(1.87))
    assert out[0].params["PERSIST"] == 1 and out[0].params["num_warps"] == 32 and out[0].params["BLOCK_R"] == 16384
    assert "132 persistent programs" in out[0].reason and base.invalid(a, out[0].params) is None
    assert not any("persistent" in m.reason for m in rowwise_moves(a, out[0].params, measured(1.5)))



def test_a_convolution_in_fma_products_tries_split_tf32_products():
    """A Triton convolution whose dot steps run in "ieee" (FMA) products tries tf32x3 at one stage; one in tf32x3
    does not, nor does a matrix product."""
    a = analyze(str(FIXTURES / "conv_kinds.py"), small=True)
    t = BY_NAME["gemm"]
    fma = {**t.default(a), "impl": "triton", "precision": "ieee", "num_stages": 3}
    split = next(m for m in moves(a, t, fma, measured(1.8), a.to_json()) if "tf32x3" in m.reason)
    assert (split.params["precision"], split.params["num_stages"]) == ("tf32x3", 1)
    assert split.reason.endswith("(precision ieee->tf32x3, one pipeline stage)")
    assert not any("tf32x3" in m.reason for m in moves(a, t, {**t.default(a), "impl": "triton"}, measured(1.8),
                                                       a.to_json()))
    mm = analysis_of("tpl_gemm_epilogue", {"batch": 4096, "d_in": 4096, "d_out": 4096})
    assert not any("tf32x3" in m.reason for m in moves(mm, t, {**t.default(mm), "impl": "triton"}, measured(1.8),
                                                       mm.to_json()))


def test_a_norm_after_a_rows_convolution_tries_its_statistics_in_the_epilogue_first(tmp_path):
    """Memory-bound, whichever kernel takes the time: the whole plan's move, the norm's statistics in the
    convolution's epilogue; not again once they are there (then the convolution computed twice), nor for a
    compute-bound candidate."""
    task = tmp_path / "conv_norm.py"
    task.write_text((FIXTURES / "conv_norm.py").read_text())  # a transposed convolution, a group norm
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    rows = {**t.default(a), "impl": "triton"}
    assert rows["tiles"] == "rows" and "stats" not in rows
    for hot in ({"_row_kernel1": 0.8, "_gemm_kernel0": 0.5}, {"_gemm_kernel0": 0.9, "_row_kernel1": 0.3}):
        first = moves(a, t, rows, measured(3.0, kernel_ms=hot, flops=1.0, nbytes=1e9), a.to_json())[0]
        assert first.params == {**rows, "stats": 1} and first.kernel is None
        assert first.reason == ("memory-bound at 3.00x the floor, kernel 1 reads the convolution's output for its "
                                "statistics: try them in the convolution's epilogue (stats)")
    again = moves(a, t, {**rows, "stats": 1}, measured(3.0, flops=1.0, nbytes=1e9), a.to_json())
    assert not any(m.reason.endswith("(stats)") for m in again)
    # then, its products (3 input channels) costing less than its output's bytes, that output never written
    assert again[0].params == {**rows, "stats": 1, "recompute": 1} and again[0].reason.endswith(
        "reads back the convolution's output, whose products cost less than its bytes: compute them again "
        "instead (recompute)")
    twice = moves(a, t, {**rows, "stats": 1, "recompute": 1}, measured(3.0, flops=1.0, nbytes=1e9), a.to_json())
    assert not any("recompute" in m.reason for m in twice)
    compute = moves(a, t, rows, measured(3.0, flops=1e12, nbytes=1.0), a.to_json())
    assert not any(m.reason.endswith("(stats)") for m in compute)


def test_a_norm_after_a_streamed_convolution_tries_its_statistics_at_its_tiles_but_not_twice(tmp_path):
    """Streamed tiles take the statistics too: from a memory-bound streamed candidate (level 2's 21 won so at
    128 positions a tile, 1.82 -> 1.46 ms on an H200) the move keeps its tiles; a second launch (recompute) is
    not proposed after it, since streamed tiles have none."""
    task = tmp_path / "stream_norm.py"
    task.write_text((FIXTURES / "conv_norm_small.py").read_text().replace('kind = "transposed3d"',
                                                                           'kind = "stream_window"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    stream = {**t.variants(a)[1], "BLOCK_M": 128}
    assert stream["tiles"] == "stream" and "stats" not in stream
    first = moves(a, t, stream, measured(3.0, kernel_ms={"_row_kernel1": 0.8}, flops=1.0, nbytes=1e9),
                  a.to_json())[0]
    assert first.params == {**stream, "stats": 1} and first.reason.endswith("(stats)")
    again = moves(a, t, {**stream, "stats": 1}, measured(3.0, flops=1.0, nbytes=1e9), a.to_json())
    assert not any("stats" in m.reason or "recompute" in m.reason for m in again)


def test_a_split_norm_tries_its_output_pass_as_a_flat_kernel():
    """A split whose output pass loops over its chunks tries that pass as a flat kernel; one that has it does not."""
    a = analysis_of("var_layer_norm")
    split = {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 3, "welford": 1, "tail_first": 1}
    flat = [m for m in rowwise_moves(a, split, measured(1.8)) if m.reason.endswith("(FLAT 0->1)")]
    assert len(flat) == 1 and flat[0].params["FLAT"] == 1
    assert flat[0].reason == ("memory-bound at 1.80x the floor, 2 reads per row: try the output pass as a flat kernel "
                              "over the rows' statistics, a block a program (FLAT 0->1)")
    assert not [m for m in rowwise_moves(a, {**split, "FLAT": 1}, measured(1.8)) if "FLAT" in m.reason]


def test_windows_that_step_one_element_try_lanes_of_vector_loads():
    """A memory-bound window kernel over 16-byte aligned rows tries VEC outputs a lane; one over rows that are
    not (pool_max_nd's are 45, 10 and 13 wide), or already in lanes, does not."""
    t = BY_NAME["pooling"]
    a = analysis_of("window_rows")
    out = moves(a, t, t.default(a), measured(1.6), a.to_json())
    lanes = [m for m in out if "VEC" in m.params]
    assert [m.reason for m in lanes] == ["memory-bound at 1.60x the floor, its windows load a tap at a time: try 4 "
                                         "outputs a lane from vector loads (VEC)"]
    assert lanes[0].params["unaligned"] == 0 and base.invalid(a, lanes[0].params) is None
    assert not any("VEC" in m.params for m in moves(a, t, lanes[0].params, measured(1.6), a.to_json()))
    odd = analysis_of("pool_max_nd")
    assert not any("VEC" in m.params for m in moves(odd, t, t.default(odd), measured(1.6), odd.to_json()))


def test_a_rows_tile_tries_two_batch_elements_a_program(tmp_path):
    """Rows tiles load each weight for their own outputs alone: the roofline offers the same row of two batch
    elements a program (SAMPLES 2), once; not where the batch is odd."""
    task = tmp_path / "conv_norm.py"
    task.write_text((FIXTURES / "conv_norm.py").read_text())  # batch 2
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    rows = {**t.default(a), "impl": "triton"}
    found = [m for m in moves(a, t, rows, measured(3.0, flops=1.0, nbytes=1e9), a.to_json())
             if m.reason.endswith("(SAMPLES 1->2)")]
    assert len(found) == 1 and found[0].params == {**rows, "SAMPLES": 2}
    assert not [m for m in moves(a, t, {**rows, "SAMPLES": 2}, measured(3.0, flops=1.0, nbytes=1e9), a.to_json())
                if "SAMPLES" in m.reason]
    odd = tmp_path / "conv_norm_odd.py"
    odd.write_text(task.read_text().replace("(2, 3, 3, 4, 5)", "(3, 3, 3, 4, 5)"))
    b = analyze(str(odd), small=True)
    assert not [m for m in moves(b, t, {**t.default(b), "impl": "triton"}, measured(3.0, flops=1.0, nbytes=1e9),
                                 b.to_json()) if "SAMPLES" in m.reason]


def test_a_convolution_in_channel_tiles_is_not_moved_to_tap_steps(tmp_path):
    """Tap steps (params.tap_steps) ran 1.2-1.6x slower than the same channel tiles on an H200 (session 69, four
    KernelBench convolutions): no move proposes them, from channel tiles, positions tiles or a vendor convolution."""
    task = tmp_path / "conv32.py"
    task.write_text((FIXTURES / "conv_kinds_small.py").read_text().replace('kind = "conv2d"', 'kind = "conv1d"')
                    .replace("nn.Conv1d(5, 7, 3, stride=2, padding=1, dilation=2), (n, 5, 19)",
                             "nn.Conv1d(32, 8, 3, padding=1), (n, 32, 19)"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    channels = {**t.default(a), "impl": "triton", "tiles": "channels", "BLOCK_K": 16}
    conv = next(k for k in base.plan(a).kernels if k.kind == "gemm").nodes[0]
    assert tap_steps(conv, channels)  # it could take them
    for other in (channels, {**channels, "tiles": "positions"}, {**channels, "impl": "torch"}):
        assert not [m for m in moves(a, t, other, measured(2.5, flops=1e12), a.to_json()) if "taps" in m.reason]


def test_a_row_held_in_registers_tries_it_in_chunks():
    """PolyNorm over 16384x8192 bf16, its row held in registers at 16 warps, at 1.11x its floor: 4096-wide chunks
    at 16 warps, then 2048-wide at 8, the first pass's loads kept in L2 for the second (evict), which ran 8-17%
    faster (H100, H200) where the search's budget of 4 had gone to one-pass forms; nothing for a row of 4096,
    already one chunk, nor for a row already in chunks."""
    a = analysis_of("var_poly_norm", {"tokens": 16384, "hidden": 8192})
    default = BY_NAME["rowwise"].default(a)
    assert default["mode"] == "one_pass" and default["num_warps"] == 16
    out = rowwise_moves(a, {}, measured(1.11))
    held = [m for m in out if "held in registers at" in m.reason]
    assert [(m.params["mode"], m.params["BLOCK_R"], m.params["num_warps"], m.params["evict"]) for m in held] == \
        [("looped", 4096, 16, 1), ("looped", 2048, 8, 1)]
    assert held[0].reason == ("memory-bound at 1.11x the floor, a row of 8192 held in registers at 16 warps: try it "
                              "in 4096-wide chunks (mode one_pass->looped, BLOCK_R 8192->4096, evict 0->1)")
    assert all(base.invalid(a, m.params) is None for m in held)
    assert not any("held in registers at" in m.reason for m in rowwise_moves(a, held[0].params, measured(1.11)))
    narrow = analysis_of("var_poly_norm", {"tokens": 16384, "hidden": 4096})
    assert not any("held in registers at" in m.reason for m in rowwise_moves(narrow, {}, measured(1.3)))
