"""Convolutions as implicit GEMMs in the interpreter: every kind (1-, 2-, 3-D; grouped, strided, padded,
dilated; transposed with output padding) at small irregular shapes matches the reference, a convolution of a
computed value runs under a fused epilogue, and the declared cuDNN variant passes the real evaluator."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base, matching
from agent.templates.implicit_gemm import phase_ks, rows_fit, rows_smem, stacks
from agent.templates.params import SMEM_BYTES, deep_steps, phased_pair, tap_steps, transposed_positions

FIXTURES = Path(__file__).parent / "fixtures"

KINDS = ["conv1d", "conv2d", "conv2d_grouped", "conv3d", "pointwise", "transposed1d", "transposed2d",
         "transposed2d_grouped", "transposed3d", "transposed2d_sparse", "transposed3d_mixed"]


def task_of(kind: str, folder: Path) -> Path:
    """conv_kinds_small.py with `kind` set in its source (a candidate embeds the task's source as it is)."""
    path = folder / f"conv_{kind}.py"
    path.write_text((FIXTURES / "conv_kinds_small.py").read_text().replace('kind = "conv2d"', f'kind = "{kind}"'))
    return path


@pytest.mark.parametrize("kind", KINDS)
def test_every_convolution_kind_is_an_implicit_gemm(kind, runner, tmp_path):
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    assert [t.NAME for t in matching(a)] == ["gemm"]
    t = BY_NAME["gemm"]
    assert t.space(a)["impl"] == ["triton"]  # a bare convolution (with its bias) must be Triton to count
    first = t.default(a, rows=False)  # the tiles rows tiles replace where they are the default
    forms = [{**first, "tiles": tiles, **({"BLOCK_M": 64} if tiles == "interleaved" else {})}  # a slot's registers
             for tiles in t.space(a)["tiles"]]
    forms.append({**first, "tiles": "rows", "BLOCK_M": 8})  # rows of several tiles, each a few of every slot
    # each distinct candidate once: where rows tiles come first, the second variant is the first channel tiles
    for source in dict.fromkeys(t.render(a, params) for params in t.variants(a)[:2] + forms):
        assert "KERNELWRIGHT_TORCH_OPS" not in source and "torch.convolution(" not in source
        runner.run_ok(task, source)


@pytest.mark.parametrize("kind", ["conv1d", "conv2d_grouped", "transposed2d_grouped", "transposed3d_mixed"])
def test_packed_weights_in_every_tile_form(kind, runner, tmp_path):
    """With `packed` the forward copies the weight with its window outermost and its output channels innermost,
    and every tile form (dot steps over channels, positions or interleaved slots; rows tiles of outer products)
    reads that copy: grouped, strided, dilated and transposed convolutions still match the reference, and each
    kernel's weight columns are one element apart."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first = t.default(a, rows=False)
    forms = [{**first, "tiles": tiles, **({"BLOCK_M": 64} if tiles == "interleaved" else {})}
             for tiles in t.space(a)["tiles"]] + [{**first, "tiles": "rows", "BLOCK_M": 8}]
    transposed = kind.startswith("transposed")
    for params in forms:
        source = t.render(a, {**params, "packed": 1})
        copy = re.search(r"packed_self_conv_weight = w_conv_weight\.as_strided\(.*\)\.permute(\(.*?\))"
                         r"\.contiguous\(\)", source)
        assert copy and copy.group(1).endswith("0, 1)" if transposed else "1, 0)")
        assert re.search(r"w_col = p\d \+ 0 \+ .*rn1(\[:, None\])?\)? \* 1$", source, re.M)
        runner.run_ok(task, source)


def test_odd_tiles_and_a_k_loop_of_several_steps(runner, tmp_path):
    task = task_of("conv3d", tmp_path)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    source = t.render(a, {**t.default(a), "BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 2})
    assert "for k0 in range(0, 54, BLOCK_K)" in source  # K = 3 input channels x 18 taps
    runner.run_ok(task, source)


def test_a_strided_transposed_convolution_reads_only_its_phases_taps(runner, tmp_path):
    """Stride 5, dilation 2, a 3-wide window: each output takes at most one tap per dim, and 16 of the 25
    phases none (their outputs are the bias alone)."""
    task = task_of("transposed2d_sparse", tmp_path)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    source = t.render(a, {**t.default(a, rows=False), "BLOCK_M": 16, "BLOCK_K": 16})
    assert "ktaps = 3 * n0 * n1" in source and "for k0 in range(0, ktaps, BLOCK_K)" in source
    assert "[(50, 1)]" in source  # an 8 x 28 output: 2 x 2 x 6 rows a phase, 16 a program (2), 25 phases each
    runner.run_ok(task, source)


def test_a_transposed_convolution_strided_along_its_last_dim_stores_its_rows_whole(runner, tmp_path):
    """Interleaved tiles by default: a program takes every phase of the last dim (stride 5: eight slots, two of
    them no tap reaches and three past the stride), so its output rows are stored whole; split-fp32 products
    take 32 channels by 64 rows, rows tiles in dot steps next (then reading the input channels innermost),
    Triton's own split, the FMA form at its own 16 by 128, then the channel tiles they replace; K steps of 32
    where every phase reads 32 K, one step a phase.
    Other convolutions cannot take them. (A batch of 3: at an even one, rows tiles of two batch elements come
    first, params.rows_samples.)"""
    task = tmp_path / "conv_sparse_wide.py"  # 12 input channels: more than the positions rule takes
    task.write_text(task_of("transposed2d_sparse", tmp_path).read_text().replace(
        "nn.ConvTranspose2d(3, 5,", "nn.ConvTranspose2d(12, 5,").replace("(n, 3, 2, 6)", "(n, 12, 2, 6)").replace(
        "n = 2\n", "n = 3\n"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, rows, rows_last, triton_split, second, third = t.variants(a)[:6]
    assert rows_last == {**rows, "xlast": 1}  # the input read channels innermost (implicit_gemm.channels_last)
    assert triton_split == {**first, "parts": "registers"}  # Triton's own tf32x3 split (implicit_gemm.hand_split)
    assert (first["tiles"], first["BLOCK_M"], first["BLOCK_N"], first["precision"]) == ("interleaved", 64, 32, "tf32x3")
    assert (rows["tiles"], rows["BLOCK_K"], rows["precision"]) == ("rows", 32, "tf32x3")  # params.rows_form
    assert (second["tiles"], second["precision"], third["tiles"]) == ("interleaved", "ieee", "channels")
    assert (second["BLOCK_M"], second["BLOCK_N"], second["num_stages"]) == (128, 16, 3)  # FMA products' own tiles
    source = t.render(a, first)
    assert "acc = tl.reshape(j2_0, (BLOCK_M, BLOCK_N, 8))" in source
    assert "rw = (q2 * 5)[:, None, None] + slot" in source
    assert source.count("for k0 in range(0, ktaps, BLOCK_K):") == 3  # slots 1, 3 and 4: a tap each
    runner.run_ok(task, t.render(a, {**first, "BLOCK_M": 16}))
    # 32 channels at one tap a phase: every phase's K one 32-wide step (12 channels: 16-wide steps)
    assert first["BLOCK_K"] == 16 and phase_ks(base.plan(a).main.nodes[0]) == {12}
    task.write_text(task.read_text().replace("ConvTranspose2d(12, 5,", "ConvTranspose2d(32, 5,").replace(
        "(n, 12, 2, 6)", "(n, 32, 2, 6)"))
    a = analyze(str(task), small=True)
    first = t.variants(a)[0]
    assert phase_ks(base.plan(a).main.nodes[0]) == {32} and (first["tiles"], first["BLOCK_K"]) == ("interleaved", 32)
    source = t.render(a, {**first, "BLOCK_M": 16})
    assert source.count("for k0 in range(0, ktaps, BLOCK_K):") == 3
    runner.run_ok(task, source)
    plain = task_of("conv2d", tmp_path)
    a = analyze(str(plain), small=True)
    assert "interleaved" not in t.space(a)["tiles"] and "tiles" not in t.default(a)
    with pytest.raises(ValueError, match="interleaved tiles need a transposed convolution whose last dim is strided"):
        t.render(a, {**t.default(a), "tiles": "interleaved"})


def test_a_convolution_of_a_computed_value_under_an_epilogue(runner):
    task = FIXTURES / "conv_epilogue.py"
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    assert t.space(a)["impl"] == ["triton", "torch"]
    for params in ({}, {"impl": "torch"}):
        source = t.render(a, {**t.default(a), **params})
        if params:
            assert "KERNELWRIGHT_TORCH_OPS = ['aten.convolution']" in source and "torch.convolution(" in source
            out = re.search(r"(\w+) = torch\.convolution\(", source).group(1)
            assert f"{out} = torch.empty(" not in source  # the vendor op returns its own output
        runner.run_ok(task, source)


RESIDUAL = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1)

    def forward(self, x, r):
        return torch.relu(self.conv(x) + r)


def get_inputs():
    return [torch.randn(2, 4, 5, 6), torch.randn(2, 6, 9, 11)]


def get_init_inputs():
    return []
'''


def test_a_phased_convolution_of_one_k_step_walks_output_positions(runner, tmp_path):
    """Four input channels, a phase's taps: one K step. Its input tile, a residual read in its epilogue and its
    output are loaded or stored with the output positions as the last axis (Triton walks that axis where it
    cannot prove either contiguous); one over 40 input channels keeps [M, K] tiles."""
    task = tmp_path / "conv_residual.py"
    task.write_text(RESIDUAL)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    dot = {**t.default(a, rows=False), "impl": "triton", "tiles": "positions", "BLOCK_M": 512, "BLOCK_K": 16}
    assert dot in t.variants(a)  # the default is outer products (the next test)
    source = t.render(a, dot)
    assert "ta = tl.trans(tl.load(x_row[None, :] + ci[:, None] * " in source
    assert re.search(r"= tl\.trans\(tl\.load\(tl\.trans\(p\d \+ ", source)  # the residual
    assert re.search(r"tl\.store\(tl\.trans\(p\d \+ \w+\), tl\.trans\(", source)
    runner.run_ok(task, source)
    wide = tmp_path / "conv_residual_wide.py"
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace("(2, 4, 5, 6)",
                                                                                            "(2, 40, 5, 6)"))
    a = analyze(str(wide), small=True)
    first = t.default(a, rows=False)  # the interleaved tiles (its default: rows of two samples, rows_samples)
    source = t.render(a, {**first, "impl": "triton"})
    assert "ta = tl.load(x_row[:, None] + " in source and "tl.trans(" not in source
    runner.run_ok(wide, source)
    assert t.space(a)["tiles"] == ["channels", "positions", "interleaved", "rows"]  # the search may choose any
    source = t.render(a, {**first, "impl": "triton", "tiles": "positions"})
    assert "ta = tl.trans(tl.load(x_row[None, :] + ci[:, None] * " in source
    runner.run_ok(wide, source)
    with pytest.raises(ValueError, match="tiles must be channels, positions, interleaved, rows or stream"):
        t.render(a, {**t.default(a), "impl": "triton", "tiles": "diagonal"})
    with pytest.raises(ValueError, match=r"rows tiles in outer-product steps \(BLOCK_K 1\) are for at most 8 input"):
        t.render(a, {**t.default(a), "impl": "triton", "tiles": "rows", "BLOCK_K": 1})


def test_rows_tiles_of_two_batch_elements(runner, tmp_path):
    """SAMPLES 2: a rows tile takes the same row of two batch elements, each loaded weight serving both, in
    outer-product steps (where a group has at most 8 input channels) and in dot steps: 1-, 2- and 3-D, grouped
    and transposed convolutions match the reference. A batch the samples do not divide, or tiles other than
    rows, are refused."""
    t = BY_NAME["gemm"]
    for kind in ("conv1d", "conv2d_grouped", "conv3d", "transposed2d", "transposed3d_mixed"):
        task = task_of(kind, tmp_path)
        a = analyze(str(task), small=True)
        dot = {**t.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_K": 16, "num_warps": 4}
        forms = [{**dot, "SAMPLES": 2}] + [{**t.default(a), "tiles": "rows", "BLOCK_K": 1, "BLOCK_M": 8,
                                            "num_warps": 1, "SAMPLES": 2}] * rows_fit(a_conv(a))
        for params in forms:
            source = t.render(a, params)
            assert "smp = pj // " in source and "q0 = q0 * 2" in source
            runner.run_ok(task, source)
    why = "SAMPLES takes a row of 4 batch elements a program: rows tiles, a batch it divides"
    assert base.invalid(a, {**dot, "SAMPLES": 4}) == why
    assert base.invalid(a, {**dot, "tiles": "channels", "SAMPLES": 2}) == why.replace("4", "2")


def test_a_register_cap_goes_on_the_convolutions_launch_in_every_tile_form(runner, tmp_path):
    """maxnreg (roofline's registers move) caps the convolution kernel's registers at its launch in every tile
    form (channels, positions, interleaved, rows, streamed) and on no other kernel's, and the candidate still
    matches the reference."""
    t = BY_NAME["gemm"]
    (tmp_path / "windowed.py").write_text(WINDOWED)
    seen = set()
    for task in (task_of("conv2d", tmp_path), task_of("transposed2d", tmp_path), tmp_path / "windowed.py"):
        a = analyze(str(task), small=True)
        first = {**t.default(a, rows=False), "impl": "triton"}
        for tiles in t.space(a)["tiles"]:
            params = {**first, "tiles": tiles, **({"BLOCK_M": 64} if tiles == "interleaved" else {})}
            source = t.render(a, {**params, "maxnreg": 128})
            launches = re.findall(r"^\s*(\w+)\[.*num_stages=\d+(, maxnreg=128)?\)$", source, re.M)
            assert sorted(launches) == sorted([("_gemm_kernel0", ", maxnreg=128")] +
                                              [(k, "") for k, _ in launches if k != "_gemm_kernel0"]), launches
            runner.run_ok(task, source)
            seen.add(tiles)
    assert seen == {"channels", "positions", "interleaved", "rows", "stream"}


def a_conv(a):
    return next(k for k in base.plan(a).kernels if k.kind == "gemm").nodes[0]


def test_rows_tiles_in_dot_steps(runner, tmp_path):
    """Rows tiles whose K steps are tl.dot products over the input channels (params.rows_form: a strided
    transposed convolution over more than 8 channels a group takes them second): [channels, channels in] weights
    by [channels in, outputs] input rows a tap, an input row loaded once for every slot that reads it. In every
    kind of convolution, and over 40 channels in steps of 32 (a loop, its last step ragged) or 16, they match
    the reference."""
    for kind in KINDS:
        task = task_of(kind, tmp_path)
        a = analyze(str(task), small=True)
        t = BY_NAME["gemm"]
        params = {**t.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_K": 16, "num_warps": 4}
        source = t.render(a, params)
        stacked = stacks(a_conv(a))  # fewer channels than a step, several columns: one stacked load a step
        assert re.search(r"tl\.dot\(wvh?, %sh?," % ("xs" if stacked else "xv0"), source) and "for ci in" not in source
        runner.run_ok(task, source)
    wide = tmp_path / "conv_residual_wide.py"
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace("(2, 4, 5, 6)",
                                                                                            "(2, 40, 5, 6)"))
    a = analyze(str(wide), small=True)
    rows = t.variants(a)[1]
    assert (rows["tiles"], rows["BLOCK_K"], rows["BLOCK_M"]) == ("rows", 32, 256)
    for bk in (32, 16):
        source = t.render(a, {**rows, "BLOCK_K": bk})
        assert "for c0 in range(0, 40, %d):" % bk in source
        assert "(rc[:, None] < 40)" in source  # 40 a multiple of neither: the last step masked
        assert source.count("= tl.load(x_tap + rc[:, None]") == 2  # two input columns feed the two slots' taps
        runner.run_ok(wide, source)
    # a row of 11 outputs takes 32 a tile (16 a slot), whatever BLOCK_M says: its registers are those of 32 x 16
    source = t.render(a, {**rows, "BLOCK_M": 256, "BLOCK_N": 64, "num_warps": 1, "SAMPLES": 1})
    assert "acc = tl.reshape(j2_0, (BLOCK_N, BLOCK_M))" in source and "BLOCK_M=32, BLOCK_N=16" in source
    wide.write_text(wide.read_text().replace("torch.randn(2, 6, 9, 11)", "torch.randn(2, 6, 9, 1001)").replace(
        "(2, 40, 5, 6)", "(2, 40, 5, 501)"))  # a row of 1001: 512 a tile
    a = analyze(str(wide), small=True)
    with pytest.raises(ValueError, match="the accumulator needs more than 128 registers per thread"):
        t.render(a, {**rows, "BLOCK_M": 512, "BLOCK_N": 64, "num_warps": 1})


def test_rows_tiles_read_a_copy_of_the_input_with_its_channels_innermost(runner, sm90, tmp_path):
    """xlast (implicit_gemm.channels_last): a kernel launched first copies the input with its channels innermost
    (40 into a tile of 64, 30 positions into 128) and the rows tiles' dot steps load each position's channels
    one element apart, in a 2-D transposed convolution over 40 channels (a K loop, its last step ragged) and a
    3-D one over 16, matching the reference; the variant comes right after the rows tiles it copies. Stacked
    steps, outer products, other tiles and an input read transposed refuse it; a slice of the input is copied
    from where it starts. Compiled for sm_90 (32 channels into 64, as level 2's 26), the input tiles go into
    shared memory without one scalar store, where the input's own layout takes 16 a thread (each warp's 4-way
    bank-conflicted on an H200)."""
    t = BY_NAME["gemm"]
    wide = tmp_path / "conv_residual_wide.py"
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace("(2, 4, 5, 6)",
                                                                                            "(2, 40, 5, 6)"))
    a = analyze(str(wide), small=True)
    out = t.variants(a)
    rows = out.index(next(p for p in out if p.get("tiles") == "rows"))
    assert out[rows + 1] == {**out[rows], "xlast": 1}
    source = t.render(a, out[rows + 1])
    assert "last_x = torch.empty((2, 5, 6, 40), device=x.device, dtype=torch.float32)" in source
    assert source.index("_gemm_kernel0_last[(1, 2)](x, last_x, BLOCK_S=128") < source.index("_gemm_kernel0[(")
    assert source.count("= tl.load(x_tap + rc[:, None] * 1 + (q") == 2 and "(last_x, " in source
    runner.run_ok(wide, source)
    task = task_of("transposed3d", tmp_path)
    task.write_text(task.read_text().replace("ConvTranspose3d(3, 4", "ConvTranspose3d(16, 4")
                    .replace("(n, 3, 2, 2, 5)", "(n, 16, 2, 2, 5)"))
    a = analyze(str(task), small=True)
    params = {**t.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_K": 16, "num_warps": 4}
    runner.run_ok(task, t.render(a, {**params, "xlast": 1}))
    for kind in ("transposed2d", "conv2d"):  # 3 channels: stacked steps, outer products, channel tiles
        a = analyze(str(task_of(kind, tmp_path)), small=True)
        for params in ({"tiles": "rows", "BLOCK_K": 16}, {"tiles": "rows", "BLOCK_K": 1}, {"tiles": "channels"}):
            with pytest.raises(ValueError, match="xlast .* is for rows tiles in unstacked dot steps"):
                t.render(a, {**t.default(a, rows=False), **params, "xlast": 1})
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace(
        "self.conv(x)", "self.conv(x.transpose(2, 3))").replace("(2, 4, 5, 6)", "(2, 40, 6, 5)"))
    a = analyze(str(wide), small=True)  # its columns a row apart: the copy reads positions contiguous
    assert not any(p.get("xlast") for p in t.variants(a))
    with pytest.raises(ValueError, match="xlast .* its spatial dims contiguous"):
        t.render(a, {**next(p for p in t.variants(a) if p.get("tiles") == "rows"), "xlast": 1})
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace(
        "self.conv(x)", "self.conv(x[1:, 2:])").replace("(2, 4, 5, 6)", "(3, 42, 5, 6)"))
    a = analyze(str(wide), small=True)  # a view of the input from its element 1320: the copy starts there
    source = t.render(a, next(p for p in t.variants(a) if p.get("xlast")))
    assert "tl.load(x + 1320 + q * 1260 + c[:, None] * 30 + s[None, :]" in source
    runner.run_ok(wide, source)
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(32, 64,").replace(
        "(2, 4, 5, 6)", "(2, 32, 16, 16)").replace("(2, 6, 9, 11)", "(2, 64, 31, 31)"))
    a = analyze(str(wide), small=True)
    rows = {**t.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_K": 32, "SAMPLES": 1}
    scalar = []
    for xlast in (0, 1):
        (tmp_path / "cand.py").write_text(t.render(a, {**rows, "xlast": xlast}))
        ptx = sm90(tmp_path / "cand.py", "_gemm_kernel0", {"BLOCK_M": 32, "BLOCK_N": 64}).asm["ptx"]
        scalar.append(len(re.findall(r"st\.shared\.b32", ptx)))
    assert scalar[0] >= 16 and scalar[1] == 0, scalar


def test_a_row_of_two_batch_elements_at_two_stages_follows_the_channels_last_copy(runner, tmp_path):
    """params.rows_paired: right after the rows tiles reading the channels-last copy comes the same with a row of
    two batch elements a program and two stages, in a 3-D transposed convolution over 16 channels into 64 whose
    tile (64 outputs by 64 channels) takes one batch element by default; it matches the reference. Not at an odd
    batch, nor in tiles of 128 outputs by 64 channels (both batch elements' sums past 64 registers a thread)."""
    t = BY_NAME["gemm"]
    task = task_of("transposed3d", tmp_path)
    text = task.read_text().replace("ConvTranspose3d(3, 4", "ConvTranspose3d(16, 64")
    task.write_text(text.replace("(n, 3, 2, 2, 5)", "(n, 16, 2, 2, 31)"))
    a = analyze(str(task), small=True)
    out = t.variants(a)
    xlast = out.index(next(p for p in out if p.get("xlast")))
    assert "SAMPLES" not in out[xlast] and out[xlast + 1] == {**out[xlast], "SAMPLES": 2, "num_stages": 2}
    source = t.render(a, out[xlast + 1])
    assert "q0 = q0 * 2" in source and "num_stages=2)" in source and "(last_x, " in source
    runner.run_ok(task, source)
    paired = task.read_text()
    for old, new in (("n = 2\n", "n = 3\n"), ("(n, 16, 2, 2, 31)", "(n, 16, 2, 2, 63)")):
        task.write_text(paired.replace(old, new))
        out = t.variants(analyze(str(task), small=True))
        assert any(p.get("xlast") for p in out) and not any(p.get("xlast") and p.get("SAMPLES") for p in out)


def test_rows_tiles_refuse_stages_whose_tiles_overflow_shared_memory(sm90, tmp_path):
    """kernel_invalid bounds the shared memory of a rows tile's dot steps (implicit_gemm.rows_smem): each
    stage's input and weight tiles and one weight tile more. Compiled for sm_90, a 2-D transposed convolution
    over 32 -> 64 channels takes no more than the bound at 1, 2 and 4 stages, and more than half of it from 2
    on; the stages past the block's shared memory are refused before anything compiles, as level 2's 78 at 5
    stages and two batch elements a tile was not (it failed on an H200 asking for 311,296 bytes)."""
    t = BY_NAME["gemm"]
    wide = tmp_path / "conv_residual_wide.py"
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(32, 64,").replace(
        "(2, 4, 5, 6)", "(2, 32, 16, 16)").replace("(2, 6, 9, 11)", "(2, 64, 31, 31)"))
    a = analyze(str(wide), small=True)
    rows = {**t.default(a, rows=False), "impl": "triton", "tiles": "rows", "BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32,
            "SAMPLES": 2}
    node = base.plan(a, rows).kernels[0].nodes[0]
    for stages in (1, 2, 4):
        p = {**rows, "num_stages": stages}
        bound = rows_smem(node, p)
        (tmp_path / "cand.py").write_text(t.render(a, p))
        shared = sm90(tmp_path / "cand.py", "_gemm_kernel0", {"BLOCK_M": 32, "BLOCK_N": 64},
                      num_stages=stages).metadata.shared
        assert shared <= bound and (stages == 1 or shared > bound / 2), (stages, shared, bound)
    most = max(n for n in range(1, 64) if rows_smem(node, {**rows, "num_stages": n}) <= SMEM_BYTES)
    t.render(a, {**rows, "num_stages": most})
    with pytest.raises(ValueError, match="rows tile's dot steps need more shared memory than a block has"):
        t.render(a, {**rows, "num_stages": most + 1})


def test_small_rows_tiles_in_dot_steps_take_two_batch_elements(runner, tmp_path):
    """params.rows_samples: rows tiles in dot steps take the same row of two batch elements where a tile holds
    at most 2048 outputs and the batch is even (the candidate matches the reference); not at an odd batch, nor
    where a row of 1001 outputs takes 512 a tile."""
    t = BY_NAME["gemm"]
    task = tmp_path / "conv_residual_wide.py"
    source = RESIDUAL.replace("ConvTranspose2d(4, 6,", "ConvTranspose2d(40, 6,").replace("(2, 4, 5, 6)",
                                                                                       "(2, 40, 5, 6)")
    task.write_text(source)
    a = analyze(str(task), small=True)
    rows = t.variants(a)[1]
    assert (rows["tiles"], rows["BLOCK_K"], rows["SAMPLES"]) == ("rows", 32, 2)  # 32 outputs by 16 channels
    runner.run_ok(task, t.render(a, rows))
    odd = source.replace("torch.randn(2,", "torch.randn(3,")
    wide = source.replace("torch.randn(2, 6, 9, 11)", "torch.randn(2, 6, 9, 1001)").replace("(2, 40, 5, 6)",
                                                                                           "(2, 40, 5, 501)")
    for other in (odd, wide):
        task.write_text(other)
        rows = t.variants(analyze(str(task), small=True))[1]
        assert rows["tiles"] == "rows" and "SAMPLES" not in rows


def test_rows_tiles_stack_a_rows_column_offsets_into_one_dot_step(runner, tmp_path):
    """8 input channels a group whose taps read two input columns a row (KernelBench's 75 in small, a row of 61
    outputs in two tiles): the second variant takes rows tiles whose dot steps stack both columns' channels into
    one 16-wide K (implicit_gemm.stacks): one input load a step for all three slots, each slot's weights zero
    at the column it does not read, every tile split into TF32 parts once by the kernel's own lines (parts
    "hand"), the outer-product rows tiles next. That form, Triton's own tf32x3 and FMA products over the same
    K, and the interleaved default with parts "hand", match the reference. 48 channels a group do not stack: a step of one column's channels
    is full."""
    task = tmp_path / "conv_stacked.py"
    task.write_text(task_of("transposed2d", tmp_path).read_text().replace(
        "nn.ConvTranspose2d(5, 3, (3, 4), stride=(2, 3), padding=(1, 2), bias=False), (n, 5, 2, 5)",
        "nn.ConvTranspose2d(16, 6, (3, 5), stride=(2, 3), padding=(1, 2), dilation=(2, 1), groups=2), (n, 16, 3, 21)"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, second, third = t.variants(a)[:3]
    assert first["tiles"] == "interleaved" and stacks(a_conv(a))
    assert (second["tiles"], second["BLOCK_K"], second["BLOCK_N"], second["parts"]) == ("rows", 16, 16, "hand")
    assert (third["tiles"], third["BLOCK_K"]) == ("rows", 1)  # outer products next: level 1's 72 won in those
    source = t.render(a, second)
    assert source.count("xs = tl.load(x_tap + ci[:, None] * ") == 1 and "off = tl.where(oi == 0, 0, 1)" in source
    assert source.count('pr = tl.dot(wvh, xsh, pr, input_precision="tf32")') == 3  # a product a slot
    assert "tp0 = tl.where(oi == 0, 2, -1)" in source  # the first slot reads one column: zeros at the other
    hand = t.render(a, {**first, "parts": "hand"})
    assert 'pr = tl.dot(tal, tbh, input_precision="tf32")' in hand and 'input_precision="tf32x3"' not in hand
    for params in (second, {**second, "parts": "registers"}, {**second, "precision": "ieee"}, {**first, "parts": "hand"}):
        runner.run_ok(task, t.render(a, params))
    task.write_text(task.read_text().replace("ConvTranspose2d(16, 6,", "ConvTranspose2d(48, 6,").replace(
        "(n, 16, 3, 21)", "(n, 48, 3, 21)"))
    a = analyze(str(task), small=True)
    rows = t.variants(a)[1]  # params.rows_form's dot steps: 32 channels a step
    assert not stacks(a_conv(a)) and (rows["tiles"], rows["BLOCK_K"], rows["BLOCK_M"]) == ("rows", 32, 256)
    assert "xs = tl.load" not in t.render(a, {**second, "BLOCK_K": 16})
    mm = analyze(str(FIXTURES / "tpl_matmul.py"), small=True)
    with pytest.raises(ValueError, match=r"parts hand \(tiles split by the kernel's own lines\) is for convolutions"):
        t.render(mm, {**t.default(mm), "parts": "hand"})


def test_a_phased_convolution_over_few_input_channels_takes_outer_product_steps(runner, tmp_path):
    """Four input channels, a phase's taps: K steps of one tap each, its offsets and bound checks once, then per
    input channel (unrolled) a rank-1 update of the accumulator with no tl.dot, in every tile form; the dot
    steps are a variant. Unphased convolutions take them in rows tiles alone, matrix products not at all."""
    task = tmp_path / "conv_residual.py"
    task.write_text(RESIDUAL)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a, rows=False)  # rows tiles come first (the next test)
    assert (d["tiles"], d["BLOCK_M"], d["BLOCK_N"], d["BLOCK_K"], d["num_warps"]) == ("channels", 256, 16, 1, 2)
    assert t.space(a)["BLOCK_K"][0] == 1
    for tiles in [x for x in t.space(a)["tiles"] if x != "rows"]:
        source = t.render(a, {**d, "impl": "triton", "tiles": tiles, "BLOCK_M": 16})
        assert "acc += ta * tb" in source or "acc0 += ta * tb" in source
        assert "for k0 in range(0, ktaps, 4):" in source and "for ci in tl.static_range(4):" in source
        assert "tl.dot(" not in source
        runner.run_ok(task, source)
    for other in (task_of("conv2d", tmp_path), FIXTURES / "tpl_matmul.py"):
        a = analyze(str(other), small=True)
        # an unphased convolution over few channels offers outer products for its rows tiles alone
        assert t.default(a)["BLOCK_K"] > 1 and (1 in t.space(a)["BLOCK_K"]) == (other != FIXTURES / "tpl_matmul.py")
        with pytest.raises(ValueError, match=r"outer-product K steps \(BLOCK_K 1\) are for convolutions"):
            t.render(a, {**t.default(a), "BLOCK_K": 1})


def test_a_strided_transposed_convolution_over_few_channels_takes_rows_tiles(runner, tmp_path):
    """Rows tiles by default: 16 channels by up to 64 outputs of one output row a program, at one warp, the
    row's other coordinates scalars; the last dim's phases (stride 2) two accumulators stacked into whole rows;
    per-channel values (the bias) loaded once a channel. The tiles they replace follow cuDNN's. At 8 a row
    (several tiles a row, the residual read in the epilogue) and in every kind of convolution (the first test)
    they match the reference. One over 8 channels and 25 taps takes them second, in stacked dot steps and then
    in outer products (then Triton's own tf32x3 split, then cuDNN's), as an unstrided 2-D one takes them
    second; a convolution strided along its last dim last, one over 40 channels in dot steps (a test above)."""
    task = tmp_path / "conv_residual.py"
    task.write_text(RESIDUAL)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, second, third = t.variants(a)[:3]
    assert (first["tiles"], first["BLOCK_M"], first["BLOCK_N"], first["num_warps"]) == ("rows", 64, 16, 1)
    assert (first["impl"], second["impl"], third["tiles"]) == ("triton", "torch", "channels")  # cuDNN's: tiles none
    source = t.render(a, first)
    assert "acc = tl.reshape(j2_0, (BLOCK_N, BLOCK_M))" in source and "tl.dot(" not in source
    assert "rw = wt * 16 + tl.arange(0, BLOCK_M)[None, :]" in source  # 11 outputs a row: 16 a tile
    assert re.search(r"= tl\.load\(p\d \+ rn, mask=rn1\[:, None\] < 6, other=0\)", source)  # the bias
    runner.run_ok(task, source)
    narrow = t.render(a, {**first, "BLOCK_M": 8})
    assert re.search(r"_gemm_kernel0\[\(\d+, 1\)\]", narrow) and "wt = pid % 2" in narrow  # two tiles a row
    runner.run_ok(task, narrow)
    wide = tmp_path / "conv_residual_wide.py"  # 8 input channels, 5x5 taps: 72 a phase, too many for outer products
    wide.write_text(RESIDUAL.replace("ConvTranspose2d(4, 6, 3,", "ConvTranspose2d(8, 6, 5,").replace(
        "(2, 4, 5, 6), torch.randn(2, 6, 9, 11)", "(2, 8, 5, 6), torch.randn(2, 6, 11, 13)"))
    a = analyze(str(wide), small=True)
    assert [(v["tiles"], v["impl"], v["parts"], v["BLOCK_K"]) for v in t.variants(a)[:5]] == [
        ("interleaved", "triton", "hand", 16), ("rows", "triton", "hand", 16), ("rows", "triton", "hand", 1),
        ("interleaved", "triton", "registers", 16), ("interleaved", "torch", "hand", 16)]  # stacked, outer products
    grouped = task_of("conv2d_grouped", tmp_path)  # unstrided, 2-D: second, 128 a row
    a = analyze(str(grouped), small=True)
    assert "tiles" not in t.default(a) and (t.variants(a)[1]["tiles"], t.variants(a)[1]["BLOCK_M"]) == ("rows", 128)
    plain = task_of("conv2d", tmp_path)  # strided along its last dim: last
    a = analyze(str(plain), small=True)
    assert "tiles" not in t.default(a) and [v.get("tiles") for v in t.variants(a)].index("rows") > 1
    assert t.variants(a)[-1]["tiles"] == "rows"
    runner.run_ok(plain, t.render(a, t.variants(a)[-1]))


@pytest.mark.slow
def test_the_declared_cudnn_variant_passes_the_evaluator(warm_executor):
    from tools.results import EvalJob, TaskSpec
    task = FIXTURES / "conv_epilogue.py"
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    source = t.render(a, {**t.default(a), "impl": "torch"})
    job = EvalJob(TaskSpec(path=str(task), small=True), source, trials=2, profile=False, timeout_s=120)
    result = warm_executor.submit(job).result()
    assert result.verdict == "correct", result.reason
    assert result.torch_ops == ["aten.convolution"]


NETWORK = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """Three 3x3 convolutions with ReLUs: each under 1 GFLOP, together 1.4."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(64, 64, 3, padding=1) for _ in range(3))

    def forward(self, x):
        for conv in self.convs:
            x = torch.relu(conv(x))
        return x


def get_inputs():
    return [torch.randn(2, 64, 56, 56)]


def get_init_inputs():
    return []
'''


def test_a_network_of_small_convolutions_keeps_cudnn_first(tmp_path):
    """fp32 without TF32: the vendor convolutions under Triton epilogues by default once the whole program's
    GEMM work reaches 1 GFLOP, however small each convolution; the Triton ones are the second variant, in
    tiles of all 64 channels (params.wide_tiles), and the third in the 16-channel tiles those replace."""
    task = tmp_path / "network.py"
    task.write_text(NETWORK)
    a = analyze(str(task), small=False)
    t = BY_NAME["gemm"]
    assert [(p["impl"], p["BLOCK_N"]) for p in t.variants(a)[:3]] == [("torch", 64), ("triton", 64), ("triton", 16)]


def test_a_strided_transposed_convolution_stays_triton_first(tmp_path):
    """The same GEMM work in a stride-2 transposed convolution under an epilogue: its phased Triton form, the
    weight packed, first (cuDNN's ran 3-5x slower on KernelBench's); stride 1 keeps cuDNN's first, its Triton form
    next in positions tiles (params.transposed_positions)."""
    task = tmp_path / "up.py"
    up = NETWORK.replace("nn.Conv2d(64, 64, 3, padding=1)", "nn.ConvTranspose2d(64, 64, 4, stride=2, padding=1)", 1)
    task.write_text(up)
    t = BY_NAME["gemm"]
    first = t.variants(analyze(str(task), small=False))[0]
    assert (first["impl"], first["packed"]) == ("triton", 1)
    task.write_text(NETWORK.replace("nn.Conv2d(64, 64, 3, padding=1)", "nn.ConvTranspose2d(64, 64, 3, padding=1)", 1))
    first, second = t.variants(analyze(str(task), small=False))[:2]
    assert first["impl"] == "torch" and second == {**first, "impl": "triton"} and second["tiles"] == "positions"


UNSTRIDED = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.up = nn.ConvTranspose2d(5, 6, (3, 2), padding=(1, 0))

    def forward(self, x):
        return self.up(x)


def get_inputs():
    return [torch.randn(2, 5, 3, 7)]


def get_init_inputs():
    return []
'''


def conv_task(path: Path, conv: str, shape: str) -> Path:
    """UNSTRIDED at `path` with its convolution and input shape replaced."""
    path.write_text(UNSTRIDED.replace("nn.ConvTranspose2d(5, 6, (3, 2), padding=(1, 0))", conv)
                    .replace("(2, 5, 3, 7)", shape))
    return path


@pytest.mark.parametrize("conv, shape, moved", [
    ("nn.ConvTranspose2d(5, 6, (3, 2), padding=(1, 0))", "(2, 5, 3, 7)", True),
    ("nn.ConvTranspose3d(5, 40, (2, 3, 2), padding=(0, 1, 1), dilation=(1, 1, 2))", "(2, 5, 2, 3, 5)", True),
    ("nn.ConvTranspose2d(6, 4, 3, padding=1, groups=2, bias=False)", "(2, 6, 3, 7)", True),
    ("nn.ConvTranspose1d(5, 6, 3)", "(2, 5, 7)", False),  # 1-D: 1.4x slower so
    ("nn.ConvTranspose2d(5, 128, 3)", "(2, 5, 3, 7)", False),  # over 64 channels
    ("nn.ConvTranspose2d(5, 6, 3, stride=2)", "(2, 5, 3, 7)", False),  # strided: phases of its own
])
def test_an_unstrided_transposed_convolution_takes_positions_tiles_over_its_packed_weight(
        conv, shape, moved, runner, tmp_path):
    """A stride-1 transposed 2-D or 3-D convolution over at most 64 output channels takes positions tiles over its
    weight packed first (params.transposed_positions), and the channel tiles over the weight as it is second; at
    odd shapes (a dilated 3-D one, 40 channels in a 64-wide tile; a grouped one) both match the reference. 1-D,
    strided and 128-channel ones keep their defaults."""
    task = conv_task(tmp_path / "unstrided.py", conv, shape)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, second = t.variants(a)[:2]
    assert bool(transposed_positions(a_conv(a))) == moved
    if not moved:
        assert not (first.get("tiles") == "positions" and first.get("packed"))
        return
    assert (first["tiles"], first["packed"], first["precision"]) == ("positions", 1, "tf32x3")
    assert second == {key: v for key, v in first.items() if key not in ("tiles", "packed")}
    for params in (first, second):
        source = t.render(a, params)
        assert ("packed_self_up_weight" in source) == (params is first)
        runner.run_ok(task, source)


@pytest.mark.parametrize("conv, shape, tile", [
    ("nn.ConvTranspose2d(16, 64, 4, stride=2, padding=1)", "(2, 16, 2, 20)", (64, 64)),
    ("nn.ConvTranspose2d(16, 80, 3, stride=2, padding=1, output_padding=1)", "(2, 16, 2, 20)", (32, 128)),
    ("nn.ConvTranspose2d(16, 64, 4, stride=2, dilation=2)", "(2, 16, 2, 20)", None),
    ("nn.ConvTranspose2d(16, 64, 4, stride=2)", "(3, 16, 2, 20)", None),  # an odd batch
    ("nn.ConvTranspose2d(16, 256, 4, stride=2)", "(2, 16, 2, 20)", None),
    ("nn.ConvTranspose3d(16, 64, 2, stride=2)", "(2, 16, 2, 2, 20)", None),
    ("nn.ConvTranspose2d(16, 64, (3, 2), stride=2)", "(2, 16, 2, 20)", None),  # one tap a phase along a row
])
def test_a_strided_transposed_2d_convolution_takes_paired_rows_tiles_over_the_channels_last_copy(
        conv, shape, tile, runner, tmp_path):
    """params.phased_pair: a stride-2 transposed 2-D convolution into 64 to 128 channels, ungrouped and
    undilated, whose rows are too wide for rows_samples' small tiles, first takes rows tiles of 4096 outputs
    holding every channel (80 in a 128-wide tile), over the channels-last copy, two batch elements a program at two
    stages; next the same in 256 x 64 tiles at K steps of 16, one element a program; then the interleaved tiles
    these replace. Both match the reference. Dilated, odd-batch, 256-channel and 3-D ones keep interleaved tiles, as
    does one whose window along a row is no wider than its stride (a tap a phase: unmeasured)."""
    task = conv_task(tmp_path / "phased.py", conv, shape)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    out = t.variants(a)
    if tile is None:
        assert out[0]["tiles"] == "interleaved" and not phased_pair(a_conv(a))
        return
    first, second = out[:2]
    assert (first["tiles"], first["xlast"], first["SAMPLES"], first["num_stages"], first["BLOCK_K"]) == \
        ("rows", 1, 2, 2, 32) and (first["BLOCK_M"], first["BLOCK_N"]) == tile
    assert second == {**{key: v for key, v in first.items() if key != "SAMPLES"}, "BLOCK_M": 256, "BLOCK_N": 64,
                      "BLOCK_K": 16}
    interleaved = {**t.default(a, rows=False), "impl": "triton"}
    assert interleaved["tiles"] == "interleaved" and interleaved in out[2:]
    for params in (first, second):
        source = t.render(a, params)
        assert "num_stages=2)" in source and ("q0 = q0 * 2" in source) == (params is first)
        runner.run_ok(task, source)


UPSAMPLE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """A 5x5 convolution, then a 2x upsampling by a stride-2 transposed convolution."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 32, 5, padding=2)
        self.up = nn.ConvTranspose2d(32, 4, 2, stride=2)

    def forward(self, x):
        return self.up(torch.relu(self.conv(x)))


def get_inputs():
    return [torch.randn(2, 6, 9, 7)]


def get_init_inputs():
    return []
'''


def test_a_strided_transposed_convolution_that_is_not_the_main_kernel_reads_its_weight_packed(runner, tmp_path):
    """Packed weights are a convolution kernel's own default: the upsampling convolution after the main one (the
    plan's primary kernel, the most work) reads a packed copy, the main (unstrided) one its weight as it is, and
    both match the reference."""
    task = tmp_path / "upsample.py"
    task.write_text(UPSAMPLE)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    assert "packed" not in t.default(a)
    source = t.render(a, t.default(a))
    assert "packed_self_up_weight = w_up_weight" in source and "packed_self_conv_weight" not in source
    runner.run_ok(task, source)


def test_a_convolution_of_narrow_output_tiles_takes_a_narrow_k_tile(tmp_path):
    """At most 64 output channels a tile: K tiles of 16 (the gathered index tiles spilled at 32); 128-channel
    tiles keep 32, as a matrix product does."""
    t = BY_NAME["gemm"]
    narrow = analyze(str(FIXTURES / "conv_kinds_small.py"), small=True)
    assert (t.default(narrow)["BLOCK_N"], t.default(narrow)["BLOCK_K"]) == (16, 16)
    wide = tmp_path / "conv_wide.py"
    source = (FIXTURES / "conv_kinds_small.py").read_text()
    wide.write_text(source.replace("nn.Conv2d(3, 9, (3, 2)", "nn.Conv2d(3, 200, (3, 2)"))
    d = t.default(analyze(str(wide), small=True))
    assert (d["BLOCK_N"], d["BLOCK_K"]) == (128, 32)
    mm = analyze(str(FIXTURES / "tpl_matmul.py"), small=True)
    assert t.default(mm)["BLOCK_K"] == 32


def test_a_pointwise_convolution_takes_pipelined_tiles_of_a_matrix_product(runner, tmp_path):
    """A 1x1 convolution (stride 1, unpadded) in tf32x3 dot steps loads its input tile plainly, so it takes 64
    rows by up to 128 channels, K steps of up to 64, at 4 warps and 3 stages (params.pointwise_tiles); its
    candidate, a K loop of one step, matches the reference, and so does a grouped one's. A strided 1x1 one
    gathers, and keeps one stage."""
    t = BY_NAME["gemm"]
    task = task_of("pointwise", tmp_path)
    a = analyze(str(task), small=True)
    first = t.default(a)
    assert {key: first[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages", "parts")} == \
        {"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 16, "num_warps": 4, "num_stages": 3, "parts": "hand"}
    source = t.render(a, first)
    assert "for k0 in range(0, 7, BLOCK_K)" in source and "num_stages=3" in source
    runner.run_ok(task, source)
    grouped = tmp_path / "conv_pointwise_grouped.py"  # two groups of 7 -> 20 channels: a 32-wide tile each
    grouped.write_text(task.read_text().replace("nn.Conv2d(7, 13, 1)", "nn.Conv2d(14, 40, 1, groups=2)")
                       .replace("(n, 7, 5, 9)", "(n, 14, 5, 9)"))
    g = analyze(str(grouped), small=True)
    assert (t.default(g)["BLOCK_N"], t.default(g)["num_stages"]) == (32, 3)
    runner.run_ok(grouped, t.render(g, t.default(g)))
    strided = tmp_path / "conv_pointwise_strided.py"
    strided.write_text(task.read_text().replace("nn.Conv2d(7, 13, 1)", "nn.Conv2d(7, 13, 1, stride=2)"))
    assert t.default(analyze(str(strided), small=True))["num_stages"] == 1


STREAMED = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(12, 24, 1)

    def forward(self, x):
        return torch.relu(self.conv(x)) * 0.5


def get_inputs():
    return [torch.randn(2, 12, 20, 20)]


def get_init_inputs():
    return []
"""


def test_a_pointwise_convolution_over_many_positions_streams_them_through_tma(runner, tmp_path):
    """A 1x1 convolution over 12 -> 24 channels and 400 positions an image takes streamed tiles by default: a
    program per SM holds the weight, split once, and walks tiles of 64 positions read by a TMA descriptor over
    [batch, channels, positions] (16 channels a tile: the 4 past 12 read as zeros) in a pipelined loop, its
    epilogue's output stored by a descriptor too (the last tile of an image, 16 positions, clipped). It matches
    the reference; the channel tiles it replaced come next."""
    task = tmp_path / "streamed.py"
    task.write_text(STREAMED)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, second = t.variants(a)[:2]
    assert {key: first[key] for key in ("tiles", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_warps", "num_stages")} == \
        {"tiles": "stream", "BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 16, "num_warps": 4, "num_stages": 4}
    assert "tiles" not in second and second["num_stages"] == 3  # params.pointwise_tiles
    source = t.render(a, first)
    assert "x_desc = TensorDescriptor(x if x.storage_offset() % 4 == 0 else x.clone(), [2, 12, 400]" in source
    assert "for t in tl.range(tl.program_id(0), 14, PROGRAMS, num_stages=4):" in source
    assert re.search(r"p\d\.store\(\[b, 0, hw0\], tl\.reshape\(tl\.trans\(tl\.broadcast_to\(v\d", source)
    runner.run_ok(task, source)


@pytest.mark.parametrize("changes, why", [
    ([("nn.Conv2d(12, 24, 1)", "nn.Conv2d(65, 24, 1)"), ("12, 20, 20)", "65, 20, 20)")], "65 input channels"),
    ([("nn.Conv2d(12, 24, 1)", "nn.Conv2d(12, 129, 1)")], "129 output channels"),
    ([("nn.Conv2d(12, 24, 1)", "nn.Conv2d(12, 24, 1, groups=2)")], "two groups"),
    ([("nn.Conv2d(12, 24, 1)", "nn.Conv2d(12, 24, 1, stride=2)")], "a strided one gathers"),
    ([("20, 20)", "15, 17)")], "255 positions an image"),
    ([("20, 20)", "17, 19)")], "323 positions: a TMA descriptor's rows need 16-byte strides, a multiple of 4"),
], ids=["cin", "cout", "groups", "stride", "few", "ragged"])
def test_what_does_not_stream(changes, why, tmp_path):
    source = STREAMED
    for old, new in changes:
        source = source.replace(old, new)
    task = tmp_path / "not_streamed.py"
    task.write_text(source)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    assert t.default(a).get("tiles") != "stream", why
    assert "stream" not in t.space(a)["tiles"]
    with pytest.raises(ValueError, match="stream tiles are for a convolution of one group"):
        t.render(a, {**t.default(a), "tiles": "stream"})


def test_streamed_tiles_refuse_what_cannot_fit_and_compile_to_tma_copies_for_sm_90(tmp_path):
    """Streamed tiles hold every output channel and fit shared memory (implicit_gemm.stream_smem), or the
    template refuses them; the default compiles for sm_90 (the launch recorder's signature, as the evaluator
    builds it) to bulk tensor copies in both directions feeding TF32 wgmma, its shared memory within the
    bound stream_smem counts."""
    import importlib.util

    import torch
    from triton.tools.tensor_descriptor import TensorDescriptor

    from agent.templates.implicit_gemm import stream_smem
    from tools.compile_info import _signature, compiled
    from tools.guard import Launch, _light

    task = tmp_path / "streamed.py"
    task.write_text(STREAMED.replace("nn.Conv2d(12, 24, 1)", "nn.Conv2d(64, 128, 1)").replace("12, 20", "64, 20"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a)
    with pytest.raises(ValueError, match="BLOCK_N at least the channels"):
        t.render(a, {**d, "BLOCK_N": 64})
    with pytest.raises(ValueError, match="more shared memory than a block has"):
        t.render(a, {**d, "BLOCK_M": 128})  # 4 stages of 128 positions by 64 channels, a 128 x 128 output tile
    (tmp_path / "cand.py").write_text(t.render(a, d))
    spec = importlib.util.spec_from_file_location("streamed_cand", tmp_path / "cand.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = TensorDescriptor(torch.zeros(2, 64, 400), [2, 64, 400], [25600, 400, 1], [1, 64, 64])
    out = TensorDescriptor(torch.zeros(2, 128, 400), [2, 128, 400], [51200, 400, 1], [1, 128, 64])
    args = _light((x, torch.zeros(128, 64, 1, 1), torch.zeros(128), out))
    launch = Launch("_gemm_kernel0", module._gemm_kernel0, args, {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64,
                    "PROGRAMS": 14, "num_warps": 4, "num_stages": 4}, None)
    kernel = compiled(_signature("_gemm_kernel0", launch), module._gemm_kernel0)
    ptx = kernel.asm["ptx"]
    assert "cp.async.bulk.tensor.3d.shared::cta.global" in ptx  # loads
    assert "cp.async.bulk.tensor.3d.global.shared::cta" in ptx  # stores
    assert re.search(r"wgmma\.mma_async\S*\.tf32", ptx)
    pl = base.plan(a, d)
    bound = stream_smem(d, pl.kernels[pl.primary].nodes[0])
    assert bound == 163840 and 0.8 * bound < kernel.metadata.shared <= bound


WINDOWED = STREAMED.replace("nn.Conv2d(12, 24, 1)", "nn.Conv2d(3, 12, 3)").replace("(2, 12, 20, 20)",
                                                                                       "(2, 3, 20, 24)")


def test_a_convolution_with_a_window_streams_its_input_rows(runner, tmp_path):
    """A 3x3 convolution over 3 -> 12 channels (18 x 22 outputs an image) takes streamed tiles by default: 2
    programs an SM walk 64 positions a tile over each image's 18 input rows (432 positions, the last tile
    clipped), 27 (tap, channel) columns in 2 dot steps of 16 (the 5 past 27 masked), read by pointers at one
    offset a column from each position; the 2 positions past each row's 22 outputs go unstored. It matches the
    reference, and the rows tiles it replaced come next."""
    task = tmp_path / "windowed.py"
    task.write_text(WINDOWED)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    first, second = t.variants(a)[:2]
    assert {key: first[key] for key in ("tiles", "BLOCK_M", "BLOCK_N", "BLOCK_K", "num_stages", "per_sm")} == \
        {"tiles": "stream", "BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 16, "num_stages": 3, "per_sm": 2}
    assert second["tiles"] == "rows"
    source = t.render(a, first)
    assert "TensorDescriptor" not in source and "koff1 = tl.where(kk1 < 27," in source
    assert "for t in tl.range(tl.program_id(0), 14, PROGRAMS, num_stages=3):" in source  # 2 x ceil(432 / 64)
    assert "mask = ((q < 432) & (v1 < 22))[:, None]" in source
    runner.run_ok(task, source)


@pytest.mark.parametrize("conv, shape", [
    ("nn.Conv1d(5, 12, 4)", "(2, 5, 300)"),  # 297 outputs, no row to waste
    ("nn.Conv3d(2, 12, 2, dilation=(1, 2, 1))", "(2, 2, 3, 24, 24)"),  # 2 x 22 x 23 outputs, taps 2 rows apart
    ("nn.Conv2d(3, 12, 3, bias=False)", "(3, 3, 19, 21)"),  # no bias, an odd batch of odd rows
], ids=["1d", "3d_dilated", "2d_no_bias"])
def test_streamed_windows_in_one_to_three_dims(conv, shape, runner, tmp_path):
    task = tmp_path / "windowed_nd.py"
    task.write_text(WINDOWED.replace("nn.Conv2d(3, 12, 3)", conv).replace("(2, 3, 20, 24)", shape))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a)
    assert d["tiles"] == "stream"
    runner.run_ok(task, t.render(a, d))


@pytest.mark.parametrize("conv, shape", [
    ("nn.Conv2d(3, 12, 3, padding=1)", "(2, 3, 20, 24)"),  # padded by 1 each side: 22 x 26 walked
    ("nn.Conv2d(3, 12, (3, 5), padding=(2, 1), dilation=(2, 1))", "(2, 3, 17, 21)"),  # pads 2 and 1, no right pad
    ("nn.ConvTranspose2d(3, 12, 3, padding=1)", "(2, 3, 20, 24)"),  # taps read backwards, padded by 1
    ("nn.ConvTranspose1d(5, 12, 4, dilation=2)", "(2, 5, 300)"),  # 306 outputs: 6 zeros each side
], ids=["padded", "padded_uneven", "transposed", "transposed_1d"])
def test_padded_and_transposed_windows_stream_over_a_padded_copy(conv, shape, runner, tmp_path):
    """A padded or transposed stride-1 convolution with a window streams over a copy of its input padded with
    zeros (implicit_gemm.window_taps), made by a kernel of its own before the convolution's; it matches the
    reference."""
    task = tmp_path / "windowed_padded.py"
    task.write_text(WINDOWED.replace("nn.Conv2d(3, 12, 3)", conv).replace("(2, 3, 20, 24)", shape))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a)
    assert d["tiles"] == "stream"
    source = t.render(a, d)
    assert "def _gemm_kernel0_pad(p0, p1, BLOCK: tl.constexpr):" in source
    runner.run_ok(task, source)


@pytest.mark.parametrize("conv, shape, forward, stages", [
    ("nn.Conv2d(3, 12, 3)", "(2, 3, 20, 24)", "", 3),  # 27 columns: two programs fit an SM at 3 stages
    # 144 columns into 64 channels, 157 KB a program at 3 stages: at 2, 111 KB of tiles where the epilogue
    # reduces over the channels, and its output tile's scratch on top where it stores one
    ("nn.Conv2d(16, 64, 3)", "(2, 16, 20, 24)", "torch.amin(self.conv(x), dim=1, keepdim=True)", 2),
    ("nn.Conv2d(16, 64, 3)", "(2, 16, 20, 24)", "", 3),
    ("nn.Conv1d(32, 64, 5)", "(2, 32, 300)", "", 3),  # 160 columns: 123 KB of tiles at 2, one an SM either way
], ids=["small", "reduced", "stored", "one_an_sm"])
def test_streamed_tiles_take_two_stages_where_two_programs_then_fit_an_sm(conv, shape, forward, stages, tmp_path):
    task = tmp_path / "windowed_stages.py"
    source = WINDOWED.replace("nn.Conv2d(3, 12, 3)", conv).replace("(2, 3, 20, 24)", shape)
    task.write_text(source.replace("torch.relu(self.conv(x)) * 0.5", forward) if forward else source)
    d = BY_NAME["gemm"].default(analyze(str(task), small=True))
    assert (d["tiles"], d["per_sm"], d["num_stages"]) == ("stream", 2, stages)


@pytest.mark.parametrize("forward, kernels", [
    ("torch.tanh(torch.min(self.conv(x), dim=1, keepdim=True)[0])", 1),  # a min and a tanh per position
    ("torch.logsumexp(self.conv(x), dim=1, keepdim=True) * 0.5", 1),  # max, exp of the difference, sum, log
    ("torch.softmax(self.conv(x), dim=1) + 1.0", 1),  # the reductions broadcast back over the channels
    ("torch.amax(self.conv(x), dim=(2, 3))", 2),  # over positions: a kernel of its own
], ids=["min", "logsumexp", "softmax", "positions"])
def test_a_streamed_convolution_reduces_over_its_channels_in_its_epilogue(forward, kernels, runner, tmp_path):
    """Streamed tiles hold every output channel, so a reduction over the channels (and what follows it, per
    position or broadcast back) joins the convolution's kernel (schedule.channel_reduction): its output is never
    written. A reduction over positions does not, nor one after channel tiles. Each matches the reference."""
    task = tmp_path / "windowed_reduced.py"
    task.write_text(WINDOWED.replace("return torch.relu(self.conv(x)) * 0.5", f"return {forward}"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a)
    assert d["tiles"] == "stream"
    assert len(base.plan(a, d).kernels) == kernels
    runner.run_ok(task, t.render(a, d))
    channel_tiles = {key: value for key, value in d.items() if key not in ("tiles", "per_sm")}
    assert len(base.plan(a, {**channel_tiles, "tiles": "channels"}).kernels) == 2


@pytest.mark.parametrize("conv, forward, shape, samples", [
    ("nn.ConvTranspose3d(3, 16, 3, stride=2, padding=1)", "torch.logsumexp(self.conv(x), dim=1, keepdim=True)",
     "(2, 3, 3, 5, 6)", 1),  # phased rows: the last dim's two phases as slots of one tile
    ("nn.ConvTranspose3d(3, 16, 3, stride=2, padding=1)", "torch.amax(self.conv(x), dim=1, keepdim=True)",
     "(4, 3, 3, 5, 6)", 2),  # two batch elements a tile
    ("nn.Conv2d(3, 12, 3)", "torch.softmax(self.conv(x), dim=1) * 2.0", "(2, 3, 20, 24)", 1),  # broadcast back
], ids=["logsumexp", "max_samples", "softmax"])
def test_rows_tiles_reduce_over_their_channels_in_their_epilogue(conv, forward, shape, samples, runner, tmp_path):
    """Rows tiles hold BLOCK_N channels by a row's outputs; where BLOCK_N holds every channel, a reduction over
    them joins the convolution's kernel too, along the tile's first axis. Each matches the reference."""
    task = tmp_path / "rows_reduced.py"
    task.write_text(WINDOWED.replace("nn.Conv2d(3, 12, 3)", conv).replace("(2, 3, 20, 24)", shape).replace(
        "return torch.relu(self.conv(x)) * 0.5", f"return {forward}"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    rows = next(v for v in t.variants(a) if v.get("tiles") == "rows" and v["impl"] == "triton")
    rows = {**rows, "BLOCK_N": 16, "SAMPLES": samples}
    assert len(base.plan(a, rows).kernels) == 1
    runner.run_ok(task, t.render(a, rows))


@pytest.mark.parametrize("conv, shape, why", [
    ("nn.Conv2d(3, 12, 3, stride=2)", "(2, 3, 40, 48)", "a stride"),
    ("nn.ConvTranspose2d(3, 12, 3, stride=2)", "(2, 3, 20, 24)", "a transposed one's stride: its phases are "
     "kernels apart, their outputs interleaved (1.4-2.7x slower on an H200, session 46)"),
    ("nn.Conv2d(20, 12, 3)", "(2, 20, 20, 24)", "180 (channel, tap) columns, past WINDOW_K"),
    ("nn.Conv2d(17, 128, 3)", "(2, 17, 20, 24)", "153 columns into 128 channels: 255 KB at 3 stages"),
    ("nn.Conv2d(3, 12, (1, 9))", "(2, 3, 20, 24)", "walks 480 positions for 320 outputs, past WINDOW_SPREAD"),
], ids=["stride", "transposed_stride", "columns", "smem", "spread"])
def test_what_windows_do_not_stream(conv, shape, why, tmp_path):
    task = tmp_path / "windowed_not.py"
    task.write_text(WINDOWED.replace("nn.Conv2d(3, 12, 3)", conv).replace("(2, 3, 20, 24)", shape))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    assert t.default(a).get("tiles") != "stream", why
    with pytest.raises(ValueError, match="stream tiles are for a convolution of one group"):
        t.render(a, {**t.default(a), **{"tiles": "stream", "BLOCK_K": 16, "per_sm": 2}})


def test_a_streamed_window_compiles_for_sm_90_within_its_shared_memory_bound(sm90, tmp_path):
    """Level 2's 57_Conv2d_ReLU_HardSwish's own convolution (8 -> 64 channels in 3x3 windows), at a small
    batch: its default compiles for sm_90 to TF32 wgmma fed by asynchronous copies, its shared memory within
    the bound stream_smem counts (90,624 of 91,136 bytes with Triton 3.9)."""
    from agent.templates.implicit_gemm import stream_smem

    task = tmp_path / "windowed57.py"
    task.write_text(WINDOWED.replace("nn.Conv2d(3, 12, 3)", "nn.Conv2d(8, 64, 3)").replace("(2, 3, 20, 24)",
                                                                                         "(2, 8, 128, 128)"))
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    d = t.default(a)
    (tmp_path / "cand.py").write_text(t.render(a, d))
    kernel = sm90(tmp_path / "cand.py", "_gemm_kernel0", {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16,
                                                          "PROGRAMS": 264})
    ptx = kernel.asm["ptx"]
    assert re.search(r"wgmma\.mma_async\S*\.tf32", ptx) and "cp.async" in ptx
    bound = stream_smem(d, base.plan(a, d).kernels[0].nodes[0])
    assert 0.7 * bound < kernel.metadata.shared <= bound, (kernel.metadata.shared, bound)


def test_a_convolution_over_17_to_64_output_channels_takes_them_in_one_tile(runner, tmp_path):
    """tf32x3 dot steps over 17-64 output channels take them all in one channel tile, 128 rows by the next power
    of two, K steps of 32 at 4 warps (params.wide_tiles), the 256 x 16 x 16 tiles next and the FMA variant at
    its own K steps of 16; the wide candidate, 40 channels in a 64-wide tile with 3 K steps (54 = 3 x 18),
    matches the reference. 16 channels keep the narrow tiles."""
    t = BY_NAME["gemm"]
    wide = tmp_path / "conv_wide3d.py"
    wide.write_text(task_of("conv3d", tmp_path).read_text().replace("nn.Conv3d(3, 5,", "nn.Conv3d(3, 40,"))
    a = analyze(str(wide), small=True)
    variants = t.variants(a)
    tiles = [(p["BLOCK_M"], p["BLOCK_N"], p["BLOCK_K"], p["num_warps"], p["precision"]) for p in variants]
    assert tiles[0] == (128, 64, 32, 4, "tf32x3") and tiles[1][1:] == (16, 16, 4, "tf32x3")  # rows: 64 here
    assert (tiles[1][0], 16, 16, 4, "ieee") in tiles
    source = t.render(a, variants[0])
    assert "for k0 in range(0, 54, BLOCK_K)" in source and "BLOCK_N=64, BLOCK_K=32" in source
    runner.run_ok(wide, source)
    narrow = tmp_path / "conv_narrow3d.py"
    narrow.write_text(wide.read_text().replace("nn.Conv3d(3, 40,", "nn.Conv3d(3, 16,"))
    assert t.default(analyze(str(narrow), small=True))["BLOCK_N"] == 16
    odd = tmp_path / "conv_odd3d.py"
    odd.write_text(wide.read_text().replace("nn.Conv3d(3, 40,", "nn.Conv3d(3, 17,"))
    assert t.default(analyze(str(odd), small=True))["BLOCK_N"] == 32


def test_fp32_dot_steps_of_a_convolution_split_each_operand_into_two_tf32_parts(runner, tmp_path):
    """A convolution's fp32 dot steps default to precision "tf32x3" at one pipeline stage, each gathered tile
    split into its TF32 parts once by the kernel's own lines (parts "hand"; Triton's own split, parts
    "registers", in the space), with the FMA ("ieee") form next; outer-product steps, a matrix product and a
    task that allows TF32 keep theirs."""
    t = BY_NAME["gemm"]
    task = task_of("conv3d", tmp_path)
    a = analyze(str(task), small=True)
    first, triton_split, second = t.variants(a)[:3]
    assert (first["precision"], first["num_stages"], first["parts"]) == ("tf32x3", 1, "hand")
    assert triton_split == {**first, "parts": "registers"}
    assert (second["precision"], second["num_stages"]) == ("ieee", 3)
    assert {**first, "precision": "ieee", "num_stages": 3} == second
    assert t.space(a)["precision"] == ["ieee", "tf32x3"] and t.space(a)["parts"] == ["registers", "hand"]
    source = t.render(a, first)
    assert source.count("tah = ((ta.to(tl.uint32, bitcast=True) + 0x1000) & 0xFFFFE000)") == 1
    assert 'pr = tl.dot(tah, tbh, pr, input_precision="tf32")' in source and 'input_precision="tf32x3"' not in source
    runner.run_ok(task, source)
    source = t.render(a, {**first, "parts": "registers"})
    assert 'tl.dot(ta, tb, input_precision="tf32x3")' in source and 'input_precision="ieee"' not in source
    runner.run_ok(task, source)
    outer = tmp_path / "conv_residual.py"
    outer.write_text(RESIDUAL)
    for other in (outer, FIXTURES / "tpl_matmul.py"):
        assert t.default(analyze(str(other), small=True))["precision"] == "ieee"
    assert t.default(analyze(str(task), small=True, tf32=True))["precision"] == "tf32"


@pytest.mark.parametrize("conv, shape, deep", [
    ("nn.Conv3d(16, 24, 3, padding=1)", "(2, 16, 3, 4, 6)", True),  # K 432, padded
    ("nn.Conv2d(32, 40, 3)", "(2, 32, 5, 9)", True),  # K 288
    ("nn.Conv2d(32, 40, 3, dilation=2)", "(2, 32, 6, 9)", False),
    ("nn.Conv2d(32, 40, 3, stride=2)", "(2, 32, 6, 9)", False),
    ("nn.Conv2d(32, 40, 3, groups=2)", "(2, 32, 5, 9)", False),
    ("nn.Conv2d(16, 40, 3, bias=False)", "(2, 16, 5, 9)", False),  # K 144
    ("nn.Conv1d(32, 40, 9)", "(2, 32, 20)", False),
])
def test_a_plain_deep_convolution_takes_k_steps_of_64(conv, shape, deep, runner, tmp_path):
    """params.deep_steps: the tf32x3 channel tiles of a 2-D or 3-D convolution at stride 1, undilated and
    ungrouped, over K of at least 256 take K steps of 64 (the narrow 16 x 16 tiles still next). Its dot steps read
    the input at a position's offset plus a column's (implicit_gemm._split_taps), a padded dim bounded by one
    unsigned comparison, an unpadded one by none; at odd shapes (a 24-channel padded 3-D one over 7 steps, the last
    ragged) it matches the reference. Dilated, strided, grouped, shallower and 1-D ones do not take them."""
    task = conv_task(tmp_path / "deep.py", conv, shape)
    a = analyze(str(task), small=True)
    assert bool(deep_steps(a_conv(a), {"BLOCK_K": 32})) == deep
    if not deep:
        return
    t = BY_NAME["gemm"]
    first, second = t.variants(a)[:2]
    assert (first["BLOCK_M"], first["BLOCK_K"], first["precision"]) == (128, 64, "tf32x3") and "tiles" not in first
    assert (second["BLOCK_N"], second["BLOCK_K"]) == (16, 16)  # the narrow tiles, as before
    source = t.render(a, first)
    assert "ta = tl.load(x_pos[:, None] + xc[None, :], mask=" in source
    assert (".to(tl.uint32) <" in source) == ("padding" in conv)  # the padded 3-D one's three dims
    assert "padding" not in conv or "((a0[:, None] + b0[None, :]).to(tl.uint32) < 3)" in source
    runner.run_ok(task, source)


@pytest.mark.parametrize("conv, shape, positions", [
    ("nn.Conv2d(32, 24, 3, padding=1)", "(2, 32, 5, 9)", False),  # K 288: deep steps, tap steps at 32
    ("nn.Conv3d(16, 8, 3, padding=(1, 0, 1), dilation=(1, 2, 1))", "(2, 16, 3, 6, 5)", False),
    ("nn.Conv1d(16, 8, 5, stride=2, padding=2)", "(2, 16, 13)", False),
    ("nn.Conv2d(32, 24, 3, groups=2, bias=False)", "(2, 32, 5, 7)", False),  # 16 channels a group
    ("nn.ConvTranspose2d(16, 24, (3, 2), padding=(1, 0))", "(2, 16, 3, 7)", True),  # first in positions tiles
])
def test_a_tap_step_takes_block_k_channels_of_one_tap(conv, shape, positions, runner, tmp_path):
    """params.tap_steps: a convolution's first Triton candidate in channel tiles with each K step BLOCK_K input
    channels of one tap: the tap t, its offsets and its input bounds (ok, a vector over the positions) are the
    step's, its channels ci the only column vector, and no mask runs along K. Padded, dilated, strided, grouped
    and transposed ones match the reference, at one K step a tap and at two (BLOCK_K 16 over 32 channels), and so
    does an unstrided transposed one's first candidate, in positions tiles over its packed weight, with tap steps.
    No variant offers them (slower on an H200), but the search's moves may take them."""
    task = conv_task(tmp_path / "taps.py", conv, shape)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    vs = t.variants(a)
    first = next(p for p in vs if p["impl"] == "triton" and p.get("tiles", "channels") == "channels")
    taps = {**first, **tap_steps(a_conv(a), first)}
    assert taps["taps"] == 1 and not any(p.get("taps") for p in vs)
    assert (vs[0].get("tiles") == "positions") == positions
    cin_g = int(conv.split("(")[1].split(",")[0]) // (2 if "groups=2" in conv else 1)
    forms = [taps, {**taps, "BLOCK_K": 16}] + [{**vs[0], "taps": 1, "BLOCK_K": 16}] * positions
    for params in forms:
        source = t.render(a, params)
        loop = source[source.index("for k0 in range("):source.index("rm = ")]
        assert f"t = k0 // {cin_g}\n" in loop and "kk" not in loop
        assert ("ci = rk" if params["BLOCK_K"] == cin_g else f"ci = k0 % {cin_g} + rk") in loop
        load = "tl.load(x_pos[:, None] + xc[None, :], mask=ok[:, None], other=0.0)"
        if params.get("tiles") == "positions":  # [K, positions], transposed for the product
            load = "tl.trans(tl.load(x_pos[None, :] + xc[:, None], mask=ok[None, :], other=0.0))"
        assert f"ta = {load}\n" in loop
        runner.run_ok(task, source)


@pytest.mark.parametrize("conv, shape, params, others", [
    ("nn.ConvTranspose2d(16, 8, 3, stride=2)", "(2, 16, 3, 7)", {"tiles": "channels", "BLOCK_K": 16}, False),
    ("nn.Conv2d(24, 8, 3)", "(2, 24, 5, 7)", {"BLOCK_K": 16}, False),  # no K step of 16 or 32 fits 24 channels
    ("nn.Conv2d(32, 8, 3)", "(2, 32, 5, 7)", {"tiles": "rows", "BLOCK_K": 16}, True),  # its channel tiles can
])
def test_what_does_not_take_tap_steps(conv, shape, params, others, tmp_path):
    """Tap steps need an unphased convolution's channels or positions tiles in dot steps whose BLOCK_K divides a
    group's input channels: a strided transposed one, 24 channels in steps of 16 and rows tiles are refused, and
    none of the first two's Triton variants could take them."""
    task = conv_task(tmp_path / "no_taps.py", conv, shape)
    a = analyze(str(task), small=True)
    t = BY_NAME["gemm"]
    k = next(k for k in base.plan(a).kernels if k.kind == "gemm")
    assert any(tap_steps(k.nodes[0], p) for p in t.variants(a) if p["impl"] == "triton") == others
    with pytest.raises(ValueError, match=r"taps \(a K step of one tap's input channels\) is for the dot steps"):
        t.render(a, {**t.default(a), "impl": "triton", **params, "taps": 1})
    assert tap_steps(k.nodes[0], {**t.default(a), **params}) == {}
