"""A norm's statistics in its convolution's epilogue (agent/templates/stats_epilogue.py), in the interpreter:
each rows or streamed tile stores a Welford state of every row it meets (a group norm's, an instance norm's, a
batch norm's), the norm runs only its combining kernel (after a merging one where a row has many partials), and
the output matches the reference wherever the rows fall on the tiles."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base, implicit_gemm, kernels
from agent.templates.implicit_gemm import stacks

FIXTURES = Path(__file__).parent / "fixtures"
T = BY_NAME["gemm"]


def task_of(kind: str, folder: Path) -> Path:
    path = folder / f"conv_norm_{kind}.py"
    path.write_text((FIXTURES / "conv_norm_small.py").read_text().replace('kind = "transposed3d"', f'kind = "{kind}"'))
    return path


# kind: (partials a row at the variant's tiles, whether the last channel tile is guarded, partials at 8 a tile)
CASES = {"transposed3d": (9, False, 18),  # output 3 x 3 x 9: 9 rows of positions, one 16-wide tile or two 8-wide
         "conv2d": (2, False, 4),  # output 2 x 9, 4 channels a row: 2 tiles of 4 rows each, or 2 x 2 8-wide
         "conv2d_wide_rows": (4, False, 8),  # 32 channels a row: two 16-channel blocks of each of 2 rows
         "conv2d_ragged": (2, True, 2),  # 8 channels a row, 24 channels: the second tile's second row is none
         "transposed2d_ragged": (3, True, 6),  # the same, two slots: output 3 x 9, one tile a row or two
         "conv2d_bn": (4, True, 8),  # a row a channel over 2 batch elements x 2 rows x 1 or 2 tiles; 24 channels
         "conv2d_in": (2, True, 4),  # an instance norm: a row a channel of one batch element, 2 rows x 1 or 2 tiles
         "transposed3d_bn": (18, False, 36)}  # 2 x 9 rows of positions


@pytest.mark.parametrize("kind", CASES)
def test_the_norm_reads_its_convolution_once_and_matches(kind, runner, tmp_path):
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    assert "stats" not in rows  # not offered: rows this short are read again from L2 (the next test)
    stats = {**rows, "stats": 1}
    parts, guard, narrow_parts = CASES[kind]
    for params, count in ((stats, parts), ({**stats, "BLOCK_M": 8}, narrow_parts)):
        source = T.render(a, params)
        assert re.search(r"_row_kernel1_final\[\(\d+, \d+\)\]", source) and "_row_kernel1[" not in source
        assert re.search(rf"_row_kernel1_part0 = torch.empty\(\(\d+, {count}\)", source)
        assert ("st_g < 3" in source or "mask=st_g < 24" in source) == guard
        runner.run_ok(task, source)


# kind: (the norm's rows, partials a row: its channels in each of an image's streamed tiles; a batch norm's, the
# batch's tiles)
STREAMED = {"stream_window": (6, 24),  # 16 output rows walked 22 wide (352): 6 tiles of 64, 4 channels a row
            "stream_pointwise": (12, 20),  # 320 positions (5 tiles); 6 rows of 4 in a 32-channel tile
            "stream_instance": (32, 5),  # 16 rows walked 18 wide (padded): 5 tiles; a row a channel and image
            "stream_bn": (12, 12),  # a row a channel, over both images' 6 tiles; 12 of the tile's 16 channels
            "stream_thirds": (8, 18)}  # 3 channels a row, 4 rows in 12 of the tile's 16 channels


def streamed_loop(source: str) -> str:
    """The streamed kernel's loop over a run's tiles in one image: from its header to the first line after it."""
    body = source.split("for t in tl.range(tl.maximum(t_lo, ")[1].split("\n")
    return "\n".join(line for line in body[1:] if line.startswith(" " * 12))


@pytest.mark.parametrize("kind", STREAMED)
def test_streamed_tiles_take_the_statistics_too(kind, runner, tmp_path):
    """Streamed tiles (BLOCK_M positions of one image, every channel) store a Welford state of each channel, one
    a tile here (a program a tile at these sizes), as a partial of its row: group norms of 4 and 3 channels a
    row whose rows leave the tile's last channels empty, an instance norm (traced as a batch norm of every
    image's channels) after a padded window, a batch norm's rows across the batch. The norm runs only its
    combining kernel, and the output matches the reference."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    first = T.variants(a)[0]
    assert first["tiles"] == "stream" and first["stats"] == 1  # first, even where rows this short fit L2
    source = T.render(a, first)
    rows, parts = STREAMED[kind]
    assert re.search(rf"_row_kernel1_part0 = torch.empty\(\({rows}, {parts}\)", source)
    assert "_row_kernel1[" not in source
    loop = streamed_loop(source)
    assert "st_s += st_d" in loop and "tl.sum(st_s" not in loop and "tl.reduce" not in loop  # reduced after it
    runner.run_ok(task, source)


# kind: partials a row with 3 programs, each a run of 4 tiles (of 12, or of the 1x1 convolution's 10; 3 runs meet
# an image at most, the second ending the first image and starting the second): 3 slots a row's channel, a
# batch norm's 3 an image
RUNS = {"stream_window": 12, "stream_bn": 6, "stream_pointwise": 12}


@pytest.mark.parametrize("kind", RUNS)
def test_runs_of_tiles_across_images_take_the_statistics(kind, runner, tmp_path, monkeypatch):
    """With fewer programs than tiles, each walks a run of consecutive tiles and stores a partial for each image
    its run meets; the run that ends an image stores empty partials in the slots no run fills. A group norm, a
    batch norm, and a 1x1 convolution's tiles (5 an image, so the runs of 4 fall across images unevenly)."""
    monkeypatch.setattr(implicit_gemm, "SMS", 3)
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    params = {**T.variants(a)[0], "stats": 1, "per_sm": 1}
    source = T.render(a, params)
    assert re.search(rf"_row_kernel1_part0 = torch.empty\(\(\d+, {RUNS[kind]}\)", source)
    assert "t_lo = tl.program_id(0) * 4" in source and "_gemm_kernel0[(3,)]" in source
    runner.run_ok(task, source)


def pool_task(kind: str, folder: Path) -> Path:
    path = folder / f"conv_pool_{kind}.py"
    path.write_text((FIXTURES / "conv_pool_small.py").read_text().replace('kind = "window"', f'kind = "{kind}"'))
    return path


@pytest.mark.parametrize("kind", ["window", "pointwise", "bias", "sum3d"])
def test_a_pool_after_a_streamed_convolution_sums_in_its_epilogue_and_never_writes_it(kind, runner, tmp_path):
    """A row kernel that only sums the convolution's output over its positions (a global average pool, with a
    bias after it, or a sum over a 3-D output) takes per-channel partial sums from each run of streamed tiles
    instead: offered first, the convolution stores nothing else, its output is never allocated, and the result
    matches the reference."""
    task = pool_task(kind, tmp_path)
    a = analyze(str(task), small=True)
    first, plain = T.variants(a)[:2]
    assert first == {**plain, "stats": 1} and first["tiles"] == "stream"
    source = T.render(a, first)
    conv = source.split("def _gemm_kernel0(")[1].split("@triton.jit")[0]
    assert conv.count("tl.store(") == 1 and "st_s += tl.where(mask, " in conv and ".store([" not in conv
    written = next(b for b in base.plan(a, plain).kernels[0].stores.values())
    assert f"{written} = torch.empty" not in source and "_row_kernel1_sums = torch.empty" in source
    assert written in T.render(a, plain)
    runner.run_ok(task, source)


def test_a_pool_over_runs_of_tiles_across_images_matches(runner, tmp_path, monkeypatch):
    """Three programs over 12 tiles: runs of 4, the second ending the first image and starting the second, the
    partial sums in 3 slots a channel, those no run fills stored empty by the run that ends the image."""
    monkeypatch.setattr(implicit_gemm, "SMS", 3)
    task = pool_task("window", tmp_path)
    a = analyze(str(task), small=True)
    source = T.render(a, {**T.variants(a)[0], "per_sm": 1})
    assert "_row_kernel1_sums = torch.empty((2, 12, 1, 3)" in source and "_gemm_kernel0[(3,)]" in source
    runner.run_ok(task, source)


def test_a_mean_that_reads_the_output_again_is_not_taken_as_a_pool(tmp_path):
    """Subtracting the mean reads every output again: the convolution must write them, and no statistics are
    offered (its row kernel is no Welford pair either)."""
    a = analyze(str(pool_task("centered", tmp_path)), small=True)
    assert T.variants(a)[0]["tiles"] == "stream" and "stats" not in T.variants(a)[0]
    assert base.invalid(a, {**T.variants(a)[0], "stats": 1}).startswith("stats: ")

def test_streamed_tiles_refuse_a_second_launch(tmp_path):
    """The convolution's second launch (recompute) is built for rows tiles alone: streamed ones say so."""
    a = analyze(str(task_of("stream_window", tmp_path)), small=True)
    assert base.invalid(a, {**T.variants(a)[0], "stats": 1, "recompute": 1}) == \
        "recompute: the convolution's second launch is built for rows tiles"


@pytest.mark.parametrize("kind", CASES)
def test_rows_tiles_in_dot_steps_take_the_statistics_too(kind, runner, tmp_path):
    """The same tiles with tl.dot K steps (implicit_gemm.rows_k): the accumulator keeps its [channels, outputs]
    shape, so the epilogue's Welford states and the norm's combining kernel match the reference as well."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    source = T.render(a, {**rows, "stats": 1, "BLOCK_K": 16, "num_warps": 4})
    conv = next(k for k in base.plan(a).kernels if k.kind == "gemm").nodes[0]
    assert re.search(r"tl\.dot\(wvh?, %sh?," % ("xs" if stacks(conv) else "xv0"), source)
    assert "_row_kernel1[" not in source
    runner.run_ok(task, source)


@pytest.mark.parametrize("kind", ["transposed3d_bn", "transposed2d_ragged"])
def test_dot_step_rows_tiles_of_two_batch_elements_take_the_statistics_too(kind, runner, tmp_path):
    """The same dot steps over a row of both batch elements (SAMPLES 2, params.rows_samples: level 2's 15 ships
    this form), each element's partials stored apart, match the reference: a batch norm, and a group norm whose
    last channel tile runs past its last row."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    source = T.render(a, {**rows, "stats": 1, "BLOCK_K": 16, "num_warps": 4, "SAMPLES": 2})
    assert "q0 = q0 * 2" in source and "mask_s = mask & (smp == 1)" in source and "tl.dot(" in source
    runner.run_ok(task, source)


def test_a_batch_norms_many_partials_are_merged_first(runner, tmp_path, monkeypatch):
    """More partials a row than a combining program merges at once (kernels.MERGE_PARTS, 4096; 16 here, so that
    a small shape has more): a merging kernel takes them 16 at a time, the last chunk part-full (18 partials a
    channel: chunks of 16 and 2)."""
    monkeypatch.setattr(kernels, "MERGE_PARTS", 16)
    task = task_of("transposed3d_bn", tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    source = T.render(a, {**rows, "stats": 1})
    assert "_row_kernel1_merge[(16, 2)]" in source and "_row_kernel1_merged0 = torch.empty((16, 2)" in source
    runner.run_ok(task, source)


def test_it_comes_first_where_a_row_an_sm_outgrows_l2(tmp_path):
    """In rows tiles, offered just before them where the norm would read its rows twice from HBM (level 2's 60:
    a row of 492,156 elements), and before that with the convolution computed twice (recompute: 3 input
    channels); level 2's 85, rows of 63,504, reads its second pass from L2 and is offered neither there. Streamed
    tiles, which sum their runs of tiles with no reduction a tile, take them first wherever they can."""
    kb = Path(__file__).resolve().parents[3] / "shared" / "kernelbench" / "level2"
    if not kb.is_dir():
        pytest.skip(f"KernelBench's tasks are not at {kb}")
    for name, offered in (("60_ConvTranspose3d_Swish_GroupNorm_HardSwish", True),
                          ("85_Conv2d_GroupNorm_Scale_MaxPool_Clamp", False)):
        variants = T.variants(analyze(str(kb / f"{name}.py"), small=False))
        firsts = [i for i, v in enumerate(variants) if v.get("tiles") == "rows" and v["impl"] == "triton"]
        assert bool(variants[firsts[0]].get("stats")) == offered, name
        assert bool(variants[firsts[0]].get("recompute")) == offered, name
        if offered:
            assert variants[firsts[0]] == {**variants[firsts[1]], "recompute": 1}
            assert variants[firsts[1]] == {**variants[firsts[2]], "stats": 1}
    # streamed tiles take them first, at the form's own tiles, whatever the rows' size (level 2's 21, rows of
    # 258,064, and 85); and last at 128 positions a tile where the sums of 32 channels fit registers (21), not
    # of 64 (85)
    for name, wide in (("21_Conv2d_Add_Scale_Sigmoid_GroupNorm", True),
                       ("85_Conv2d_GroupNorm_Scale_MaxPool_Clamp", False)):
        variants = T.variants(analyze(str(kb / f"{name}.py"), small=False))
        assert variants[1]["tiles"] == "stream" and variants[1]["BLOCK_M"] == 64 and "stats" not in variants[1]
        assert variants[0] == {**variants[1], "stats": 1}
        assert (variants[-1] == {**variants[1], "stats": 1, "BLOCK_M": 128}) == wide


def test_where_the_rows_do_not_fall_on_the_tiles_it_says_why(tmp_path):
    task = task_of("conv2d", tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    assert base.invalid(a, {**rows, "stats": 1, "BLOCK_N": 32}) is None  # 4 channels a row divide 32 too
    dot_tiles = {**T.default(a, rows=False), "stats": 1}
    why = "stats: statistics in the epilogue need a convolution in rows or streamed tiles, of one group"
    assert base.invalid(a, dot_tiles) == why
    with pytest.raises(ValueError, match="statistics in the epilogue need a convolution in rows or streamed"):
        T.render(a, dot_tiles)


def recompute_source(kind: str, folder: Path, **more) -> tuple[Path, str]:
    task = task_of(kind, folder)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    params = {**rows, "stats": 1, "recompute": 1, **more}
    assert base.invalid(a, params) is None
    return task, T.render(a, params)


@pytest.mark.parametrize("kind", CASES)
def test_recompute_runs_the_convolution_twice_and_never_writes_its_output(kind, runner, tmp_path):
    """recompute: the first launch stores only the partials, the combining kernel the row statistics, and a
    second launch of the convolution writes the norm's output from them; no buffer holds the convolution's
    output, and the result matches the reference at every kind of row."""
    task, source = recompute_source(kind, tmp_path)
    launches = re.findall(r"^        (_\w+)\[", source, re.M)
    assert launches == ["_gemm_kernel0", "_row_kernel1_final", "_gemm_kernel0_again"], launches
    buffer = re.search(r"_gemm_kernel0\[.*?\]\((.*?)\)", source).group(1)
    assert not re.search(r"\bbuf_v\d+\b", buffer)  # the first launch is given no output buffer
    assert len(re.findall(r"^        packed_\w+ = ", source, re.M)) <= 1  # a packed weight is made once
    runner.run_ok(task, source)


def test_recompute_reads_the_first_launchs_copy_of_the_input(runner, tmp_path):
    """With xlast (the input copied with its channels innermost) the second launch reads the copy the first
    one's kernel made: one copy and one buffer for it. A batch norm after a convolution over 16 channels, rows
    tiles in dot steps."""
    task = task_of("conv2d_bn", tmp_path)
    task.write_text(task.read_text().replace("nn.Conv2d(8, 24, 3)", "nn.Conv2d(16, 24, 3)").replace(
        "(2, 8, 4, 11)", "(2, 16, 4, 11)"))
    a = analyze(str(task), small=True)
    params = {**T.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_K": 16, "num_warps": 4,
              "xlast": 1, "stats": 1, "recompute": 1}
    source = T.render(a, params)
    launches = re.findall(r"^        (_\w+)\[", source, re.M)
    assert launches == ["_gemm_kernel0_last", "_gemm_kernel0", "_row_kernel1_final", "_gemm_kernel0_again"], launches
    assert len(re.findall(r"^        last_x = ", source, re.M)) == 1
    assert "_again_last" not in source  # the second launch's own copy kernel, never launched, is left out
    assert re.search(r"_gemm_kernel0_again\[.*\]\(last_x, ", source)
    runner.run_ok(task, source)


@pytest.mark.parametrize("kind", ["transposed2d_ragged", "conv2d_bn"])
def test_recompute_at_narrow_tiles_and_over_two_batch_elements(kind, runner, tmp_path):
    """The same at 8-wide tiles, and with a tile's row taken in both batch elements (SAMPLES 2: the partials
    stored a batch element at a time), with and without the second launch: a group norm whose last channel
    tile runs past its last row, and a batch norm."""
    for more in ({"BLOCK_M": 8}, {"SAMPLES": 2}, {"SAMPLES": 2, "recompute": 0}):
        task, source = recompute_source(kind, tmp_path, **more)
        assert ("_gemm_kernel0_again[" in source) == bool(more.get("recompute", 1))
        runner.run_ok(task, source)


def test_recompute_needs_the_statistics_in_the_epilogue(tmp_path):
    task = task_of("conv2d", tmp_path)
    a = analyze(str(task), small=True)
    rows = next(v for v in T.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    assert base.invalid(a, {**rows, "recompute": 1}) == \
        "recompute: the convolution runs twice only with its statistics in its epilogue (stats)"
