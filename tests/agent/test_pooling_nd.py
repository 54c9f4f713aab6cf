"""Pooling of any rank and of computed values, run in the Triton interpreter against the reference: max and
average pooling in 1-D, 2-D and 3-D (padding, stride, dilation, ceil_mode, count_include_pad, divisor
override, unbatched inputs), adaptive pooling (uneven windows, evenly dividing sizes, one output per plane),
and pools of pointwise chains (recomputed at every tap), of stored values and of a Linear's output."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base, matching
from agent.templates.ir import lower
from agent.templates.codegen import lane_window
from agent.templates.params import kernel_default, lane_width
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]


def render(task: str, template: str, params: dict | None = None) -> str:
    a = analyze(str(FIXTURES / f"{task}.py"), small=True)
    assert template in [t.NAME for t in matching(a)]
    t = BY_NAME[template]
    return t.render(a, {**t.default(a), **(params or {})})


def check(task: str, source: str, runner) -> None:
    assert check_source(source, (FIXTURES / f"{task}.py").read_text()) is None
    out = runner.run(FIXTURES / f"{task}.py", source)
    assert out["error"] is None, out["error"]
    assert out["rel_errors"] and all(e <= 1e-5 for e in out["rel_errors"]), out


def kernels(source: str, layout: str) -> list[str]:
    """The bodies of the generated kernels of one layout."""
    return re.findall(rf"def _{layout}_kernel\d+\(.*?(?=\n\n|\Z)", source, re.S)


@pytest.mark.parametrize("task", ["pool_max_nd_small", "pool_avg_nd_small"])
@pytest.mark.parametrize("layout", ["plane", "flat"])
def test_pooling_of_any_rank_matches_the_reference(task, layout, runner):
    source = render(task, "pooling", {"layout": layout})
    assert len(kernels(source, "plane")) >= 3  # one window kernel per pool, whatever its rank
    flat = re.search(r"_plane_kernel\d+\[[^]]*\]\([^)]*BLOCK=", source) is not None
    assert flat == (layout == "flat")  # the tuned (largest) window kernel may run flat
    check(task, source, runner)


def test_adaptive_pooling_matches_the_reference(runner):
    a = analyze(str(FIXTURES / "pool_adaptive.py"), small=True)
    windows = [n for n in lower(a).nodes if n.op == "window"]
    # (13, 10) -> (5, 3) and (7, 13, 10) -> (3, 4, 5): uneven windows but along 10 -> 5; 45 -> 7 and 45 -> 9
    # (even), (13, 10) -> (6, 4) uneven; the two pools to one output per plane are reductions
    assert [n.attrs["adaptive"] for n in windows] == [(True, True), (True, True, False), (False, True),
                                                      (True, True), (False, False)]
    assert windows[1].attrs["kernel"] == (3, 4, 2) and windows[4].attrs["kernel"] == (1, 5)
    assert sum(1 for n in lower(a).nodes if n.op == "reduce") == 2
    check("pool_adaptive", render("pool_adaptive", "pooling"), runner)


def test_pools_of_computed_values(runner):
    """An LP pool and a max pool of a per-channel affine sigmoid recompute their chains at every tap (no
    buffer for them), the sum over each pooled plane runs in the pooling kernel, a softmax is stored first."""
    a = analyze(str(FIXTURES / "pool_of_pointwise.py"), small=True)
    pl = base.plan(a)
    stored = {n.fn if n.op != "window" else "window" for n in pl.buffers}
    assert stored == {"window", "pow", "sum", "div"}, stored  # the outputs (an LP pool ends in a pow), the softmax
    source = render("pool_of_pointwise", "pooling")
    assert any("_sigmoid(SFU, " in k and "tl.maximum(acc" in k and "tl.sum(" in k for k in kernels(source, "row"))
    check("pool_of_pointwise", source, runner)


def test_one_dimensional_pools_after_a_linear(runner):
    """MaxPool1d/AvgPool1d of an unsqueezed GEMM output read the GEMM's buffer; windows that tile the row
    exactly need no bounds checks."""
    source = render("pool_after_linear", "gemm")
    planes = kernels(source, "plane")
    assert len(planes) == 2 and not any(">= 0" in k or "< 45)" in k for k in planes)
    check("pool_after_linear", source, runner)


def test_pooling_corner_cases(runner):
    """Padding around a dim of size 1 (the load skips that dim, a select keeps the padding out), windows past
    a 3-D input's depth over planes of one output (per-program checks, stores still tiles), and a pool of a
    broadcast value."""
    source = render("pool_edges", "pooling")
    assert "tl.where((st" in source or "mask=(st" in source  # a depth check of one scalar per program
    check("pool_edges", source, runner)


def _layouts(sm90, path: Path, name: str, aligned: bool, consts: dict | None = None) -> set[str]:
    """The per-thread sizes of the layouts of plane kernel `name` of the candidate at `path`, compiled for sm_90
    on the CPU with its pointers 16-byte aligned (as Triton's launcher specializes them) or not, over an 8x64
    tile (4 elements a lane at 4 warps) unless `consts` gives the meta-parameters."""
    kernel = sm90(path, name, consts or {"BLOCK_H": 8, "BLOCK_W": 64}, aligned)
    return set(re.findall(r"sizePerThread = \[([\d, ]+)\]", kernel.asm["ttgir"]))


def test_windows_with_unaligned_row_taps_load_one_element_per_lane(runner, sm90, tmp_path):
    """A window stepping one element along its rows reads taps off 16-byte boundaries. Triton would give all
    its loads the 4-wide layout of its aligned tap and load the others an element at a time, 512 bytes a warp
    (L1-bound on an H200: 1.095 ms against 0.444 for KernelBench's 3x7 depthwise convolution). Such kernels
    leave their pointers unspecialized on alignment, so every load takes one element per lane; a stride-2
    window keeps Triton's choice."""
    a = analyze(str(FIXTURES / "window_rows.py"), small=True)
    assert BY_NAME["pooling"].default(a)["unaligned"] == 1
    assert "unaligned" not in BY_NAME["pooling"].default(analyze(str(FIXTURES / "tpl_depthwise.py"), small=True))
    source = render("window_rows", "pooling")
    pointers = re.findall(r"@triton.jit\(do_not_specialize_on_alignment=\[(.*?)\]\)\ndef _plane_kernel0\((.*?)\)",
                          source)
    assert pointers and pointers[0][0].replace("'", "") == ", ".join(
        p for p in pointers[0][1].split(", ") if ":" not in p)
    check("window_rows", source, runner)

    (tmp_path / "window_rows_candidate.py").write_text(source)
    assert _layouts(sm90, tmp_path / "window_rows_candidate.py", "_plane_kernel0", aligned=False) == {"1, 1"}
    assert "1, 4" in _layouts(sm90, tmp_path / "window_rows_candidate.py", "_plane_kernel0", aligned=True)


def test_windows_strided_along_rows_take_one_row_of_lanes(runner):
    """A window at stride 2 along its rows loads no dim contiguously, and Triton 3.6 (the H200's) then gives a
    2-D tile's lanes to its first dim, a different row for each lane: KernelBench's 3-D max pool ran 3.542 ms
    at 8x128 tiles and 1.357 at one 64-wide row. Plane kernels of such windows take one output row a tile, and
    a column reduction over them (a logsumexp over channels of a max pool) two reduced rows."""
    a = analyze(str(FIXTURES / "pool_max_nd_small.py"), small=True)
    tiles = [kernel_default(k) for k in base.plan(a).kernels if k.layout == "plane"]
    # a row a tile, or a warp's lanes over rows narrower than a warp; more rows a program in a loop (ROWS)
    assert tiles and all(t["BLOCK_H"] * t["BLOCK_W"] <= max(32, t["BLOCK_W"]) for t in tiles), tiles
    assert all(t["num_warps"] * 32 <= max(32, t["BLOCK_H"] * t["BLOCK_W"]) for t in tiles), tiles
    assert any(t["ROWS"] > 1 for t in tiles), tiles
    stride_one = analyze(str(FIXTURES / "window_rows.py"), small=True)
    assert BY_NAME["pooling"].default(stride_one)["BLOCK_H"] > 1
    check("pool_max_nd_small", render("pool_max_nd_small", "pooling"), runner)

    a = analyze(str(FIXTURES / "pool_then_logsumexp.py"), small=True)
    cols = [k for k in base.plan(a).kernels if k.layout == "col"]
    assert len(cols) == 1 and kernel_default(cols[0])["BLOCK_R"] == 2
    check("pool_then_logsumexp", render("pool_then_logsumexp", matching(a)[0].NAME), runner)


def test_windows_of_lanes_match_the_reference(runner, sm90, tmp_path):
    """Windows stepping one element along their rows, a lane taking VEC outputs (VEC): each chunk of the row
    its outputs' windows span is one aligned vector load, its elements split out in registers and shared by
    the taps. Outputs of the last lane group masked, a chunk past the row's end, padding
    past the window's reach, a channel multiplier, an average not counting its padding and a max of a
    recomputed sigmoid, at tiles of one and several rows, 2 and 4 outputs a lane."""
    a = analyze(str(FIXTURES / "window_lanes.py"), small=True)
    planes = [i for i, k in enumerate(base.plan(a).kernels) if k.layout == "plane"]
    assert [lane_width(base.plan(a).kernels[i]) for i in planes] == [4, 4, 4]
    first = BY_NAME["pooling"].variants(a)[0]
    assert first["VEC"] == 4 and not first["unaligned"] and base.invalid(a, first) is None
    for bh, bw, vec, rows in [(1, 32, 4, 1), (2, 8, 4, 2), (4, 16, 2, 1)]:  # rows: tiles a program, in turn
        lanes = {"VEC": vec, "BLOCK_H": bh, "BLOCK_W": bw, "ROWS": rows, "unaligned": 0, "num_warps": 1}
        others = {str(i): lanes for i in planes if i != base.plan(a).primary}
        source = render("window_lanes", "pooling", {**lanes, "kernels": others})
        bodies = kernels(source, "plane")
        assert len(bodies) == 3 and all("tl.split(" in k and "mask=hmask" in k for k in bodies)
        if rows > 1:  # the filter's weights load once, before the loop over row tiles; each row's loads in it
            looped = [k.split("for hh in range(") for k in bodies if "for hh in range(" in k]
            head, loop = next(k for k in looped if "tl.load(" in k[0])
            assert len(re.findall(r"\btl\.load\(", head)) == 16  # a 3x5 filter's taps and the bias
            assert all("mask=hmask" in line for line in loop.splitlines() if "tl.load(" in line)
        check("window_lanes", source, runner)

    # the kernel loads 16 bytes a lane where the rows are aligned (window_rows: 16 wide)
    rows = analyze(str(FIXTURES / "window_rows.py"), small=True)
    source = render("window_rows", "pooling", BY_NAME["pooling"].variants(rows)[0])
    (tmp_path / "window_rows_lanes.py").write_text(source)
    consts = {"BLOCK_H": 1, "BLOCK_W": 16, "VEC": 4}
    assert "1, 1, 4" in _layouts(sm90, tmp_path / "window_rows_lanes.py", "_plane_kernel0", True, consts)
    check("window_rows", source, runner)


DEPTHWISE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, {window}, groups=2, bias=False)

    def forward(self, x):
        return self.conv(x)

def get_inputs():
    return [torch.randn(1, 2, 8, {width})]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("window, width, tile, warps", [((3, 7), 260, 256, 1), ((1, 8), 260, 256, 1),
                                                        ((3, 3), 256, 256, 2), ((3, 3), 260, 512, 4)])
def test_a_window_wide_along_the_row_puts_its_lanes_in_one_warp(tmp_path, window, width, tile, warps):
    """Lanes over aligned rows of 256 or 512 outputs a tile: one vector a lane (2 or 4 warps a program) where a
    window spans fewer than 7 taps along the row, one warp a program, several vectors a lane, where it spans 7
    or more."""
    task = tmp_path / "depthwise.py"
    task.write_text(DEPTHWISE.format(window=window, width=width))
    first = BY_NAME["pooling"].variants(analyze(str(task), small=False))[0]
    assert (first["VEC"], first["BLOCK_W"], first["num_warps"]) == (4, tile, warps)


def test_windows_strided_along_rows_in_lanes_match_the_reference(runner):
    """A lane's VEC outputs of a window at stride s read s * VEC elements along the row and more: at strides 2
    and 3, with padding, dilation, ceil_mode and an average not counting its padding, in 2-D and 3-D."""
    a = analyze(str(FIXTURES / "window_lanes_strided.py"), small=True)
    plan = base.plan(a)
    planes = [i for i, k in enumerate(plan.kernels) if k.layout == "plane"]
    assert [lane_width(plan.kernels[i]) for i in planes] == [4, 4, 4]
    first = BY_NAME["pooling"].variants(a)[0]
    assert first["VEC"] == 4 and first["ROWS"] == 1 < BY_NAME["pooling"].default(a)["ROWS"]
    for bh, bw, vec in [(1, 32, 4), (4, 16, 2)]:
        lanes = {"VEC": vec, "BLOCK_H": bh, "BLOCK_W": bw, "ROWS": 2, "num_warps": 1}
        source = render("window_lanes_strided", "pooling",
                        {**lanes, "kernels": {str(i): lanes for i in planes if i != plan.primary}})
        assert all("rg * 2 + lane" in k or "rg * 3 + lane" in k for k in kernels(source, "plane"))
        check("window_lanes_strided", source, runner)


def test_lanes_are_for_windows_at_fixed_offsets_over_aligned_rows():
    """Rows that do not start on 16-byte boundaries make no vector loads, and an adaptive window's taps move
    from output to output: no VEC variant for either, and VEC is refused."""
    windows = [n for n in lower(analyze(str(FIXTURES / "pool_adaptive.py"), small=True)).nodes if n.op == "window"]
    assert not any(lane_window(n) for n in windows if n.attrs["adaptive"][-1])
    assert any(lane_window(n) for n in windows if not n.attrs["adaptive"][-1])
    odd = analyze(str(ROOT / "tasks" / "36_depthwise_conv2d.py"), small=True)  # rows of 13
    assert lane_width(base.plan(odd).main) == 0 and "VEC" not in BY_NAME["pooling"].variants(odd)[0]
    assert "16-byte aligned rows" in base.invalid(odd, {**BY_NAME["pooling"].default(odd), "VEC": 4})
    rows = analyze(str(FIXTURES / "window_rows.py"), small=True)
    assert "no unaligned" in base.invalid(rows, {**BY_NAME["pooling"].default(rows), "VEC": 4, "unaligned": 1})


def test_a_rows_loop_keeps_in_it_what_changes_from_row_to_row():
    """kernels._loop_invariant: a weight's load and what it reads run before the loop; the row's own values,
    an accumulator started in the loop (assigned twice), what those reach (an inner loop's index too), and lines
    in a block stay, in order."""
    from agent.templates.kernels import _loop_invariant

    body = ["rh = base + hh", "acc = tl.full([4], 0.0, tl.float32)", "wb = p1 + ro * 9",
            "w = tl.load(wb + 2)", "x = tl.load(p0 + rh)", "acc += x * w", "y = acc + w",
            "if ok:", "    z = tl.load(p2)", "u = z * 2.0", "for t in range(3):", "    u += t", "v = t + 1",
            "tl.store(p3 + rh, y + u + v)"]
    before, loop = _loop_invariant(body, {"hh"})
    assert before == ["wb = p1 + ro * 9", "w = tl.load(wb + 2)"]
    assert loop == [line for line in body if line not in before]


@pytest.mark.parametrize("kind,vec", [("avg", 1), ("avg_uncounted", 1), ("max_ceil", 1), ("max_unbatched", 1),
                                      ("max_dilated", 1), ("avg_unpadded", 1), ("avg_rows", 2),
                                      ("max_dilated_rows", 4)])
def test_a_walk_down_the_planes_carries_the_shared_planes(kind, vec, runner, tmp_path):
    """walk (codegen.walks): a program takes a tile of every output plane in turn (of every third, dilated by 3),
    and each output's window reduces only the planes it does not share with the last output's, taking the rest
    from that one's carry. Where the first output's shared planes are the input's, not padding (the dilated max,
    the unpadded average), the walk starts one output early, its output not stored. Over aligned rows a lane may
    take VEC outputs, each carrying its own (Gen.window_lanes)."""
    task = tmp_path / f"pool_walk_{kind}.py"
    task.write_text((FIXTURES / "pool_walk.py").read_text().replace('kind = "avg"', f'kind = "{kind}"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["pooling"]
    assert t.variants(a)[0]["walk"] == 1  # the first variant where a window can walk
    params = {**t.default(a), "layout": "plane", "walk": 1, "ROWS": 1, "VEC": vec}
    assert base.invalid(a, params) is None
    source = t.render(a, params)
    body = kernels(source, "plane")[0]
    loop = {"max_dilated": r"for wi in range\(-1, \(9 \+ 2 - rd\) // 3\):\s+od = rd \+ wi \* 3",
            "avg_unpadded": r"for od in range\(-1, 4\):"}.get(kind, r"for (od|wi) in range\(")
    assert re.search(loop, body) and len(re.findall(r"carry\d+ = nxt\d+", body)) == vec
    assert ("tl.split" in body) == (vec > 1)
    assert check_source(source, task.read_text()) is None
    out = runner.run(task, source)
    assert out["error"] is None and out["rel_errors"] and all(e <= 1e-5 for e in out["rel_errors"]), out


@pytest.mark.parametrize("kind,param,says", [
    ("avg_apart", "walk", "walk takes a plane kernel"),  # no overlap down the planes
    ("max_dilated", "pairs", "pairs takes a window's taps"),  # taps 3 apart along the row
])
def test_a_walk_and_pairs_are_refused_where_the_window_has_neither(kind, param, says, tmp_path):
    task = tmp_path / f"pool_walk_{kind}.py"
    task.write_text((FIXTURES / "pool_walk.py").read_text().replace('kind = "avg"', f'kind = "{kind}"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["pooling"]
    assert param not in base.space(a) and not any(v.get(param) for v in t.variants(a))
    assert says in base.invalid(a, {**t.default(a), param: 1, "ROWS": 1, "VEC": 1})


@pytest.mark.parametrize("kind,walk", [("avg", 1), ("avg_uncounted", 1), ("max_ceil", 1), ("max_unbatched", 1),
                                       ("avg_unpadded", 1), ("avg", 0), ("avg_apart", 0)])
def test_pairs_take_a_stride_2_rows_taps_two_at_a_time(kind, walk, runner, tmp_path):
    """pairs (Gen.pair_tap): the taps along a row at stride 2 come from loads of two elements at 2 * output + 2c,
    split in registers, each load once for the taps in it: two a row for a 3-tap window, padded (the first pair
    starts before the row) or unpadded (the second pair after the window's start), one for a 2-tap one; a last
    window past the input (ceil_mode) masks the pair's element beyond the row. Walking or not."""
    task = tmp_path / f"pool_walk_{kind}.py"
    task.write_text((FIXTURES / "pool_walk.py").read_text().replace('kind = "avg"', f'kind = "{kind}"'))
    a = analyze(str(task), small=True)
    t = BY_NAME["pooling"]
    params = {**t.default(a), "layout": "plane", "walk": walk, "ROWS": 1, "VEC": 1, "pairs": 1}
    assert base.invalid(a, params) is None
    source = t.render(a, params)
    body = kernels(source, "plane")[0]
    planes = (1 if kind == "max_unbatched" else 2) if walk else (2 if kind == "avg_apart" else 3)  # read an output
    rows, pairs_a_row = (2, 1) if kind == "avg_apart" else (3, 2)  # a plane's rows in a window, pairs a row
    assert body.count("tl.split(") == planes * rows * pairs_a_row and "tl.arange(0, 2)[None, None, :]" in body
    assert ("< 10)" in body) == (kind == "max_ceil")  # only the window past the input checks the row's end
    assert check_source(source, task.read_text()) is None
    out = runner.run(task, source)
    assert out["error"] is None and out["rel_errors"] and all(e <= 1e-5 for e in out["rel_errors"]), out
    if walk:
        assert t.variants(a)[1] == {**t.variants(a)[0], "pairs": 1, "num_warps": 4}
