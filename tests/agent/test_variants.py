"""The reduction variants of issue 19 in the Triton interpreter, at small irregular shapes: rows split over
several programs with a remainder (the last split shorter than the others, the last group of rows shorter
than GROUP), a combine across programs (online softmax, Welford and plain partials), cross-entropy's target
folded into its single read, and a row-reduction epilogue over a declared vendor GEMM. Then per-kernel
parameters (params["kernels"]): a network's kernels other than the template's main one take their own, and the
parameter operator retunes the kernel a profile (EvalResult.kernel_ms) shows taking the most device time."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.interfaces import Individual, TaskContext
from agent.operators.param import ParamOperator
from agent.templates import BY_NAME, base
from agent.templates.fold import foldable
from agent.templates.kernels import looped_passes
from agent.templates.params import L2_BYTES, l2_groups
from tools.results import EvalResult, Timing
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


def check(task: str, template: str, params: dict, runner) -> str:
    """The candidate for these parameters (over the template's defaults), run against the task."""
    a = analyze(str(FIXTURES / f"{task}.py"), small=True)
    t = BY_NAME[template]
    p = {**t.default(a), **params}
    assert base.invalid(a, p) is None, base.invalid(a, p)
    source = t.render(a, p)
    assert check_source(source, (FIXTURES / f"{task}.py").read_text()) is None
    out = runner.run(FIXTURES / f"{task}.py", source)
    assert out["error"] is None, out["error"]
    assert all(e <= 1e-4 for e in out["rel_errors"]) and all(out["exact"]), out
    return source


def _row_loops(source: str, kernel: str) -> int:
    """How many chunk loops the @triton.jit function `kernel` runs over its row."""
    body = source.split(f"def {kernel}(", 1)[1].split("@triton.jit", 1)[0].split("class ModelNew", 1)[0]
    return len(re.findall(r"for (r0|it) in (tl\.)?range\(", body))


@pytest.mark.parametrize("params, loops", [
    ({"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "fold": 1}, 1),  # max, sum of exp and the target: one read
    ({"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "fold": 0}, 1),  # unfolded, the pick follows the pass
    ({"mode": "looped", "BLOCK_R": 128, "online": 0, "fold": 1}, 2),  # the max first, then the rest
    ({"mode": "looped", "BLOCK_R": 128, "online": 2, "pipeline": 1, "num_stages": 3}, 1),  # tl.range loops
    ({"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 3}, 1),  # a max per group of 8 logits
    # a row in one block: the target's logit loaded for itself, not taken from the row's values (was 4e3 off)
    ({"mode": "one_pass", "fold": 0}, 0),
    ({"mode": "looped", "BLOCK_R": 1024, "fold": 0}, 0),
])
def test_cross_entropy_reads_its_logits_once(params, loops, runner):
    """Rows of 1000 in chunks of 128: 7 whole chunks unmasked, then the remainder. The target's logit is one
    masked load per row (rr_t), never a compare with the target per element."""
    source = check("var_cross_entropy", "rowwise", params, runner)
    assert _row_loops(source, "_row_kernel0") == loops
    assert ("tl.range(0, 896, BLOCK_R, num_stages=3)" in source) == bool(params.get("pipeline"))
    assert "+ rr_t, mask=mask_t" in source and "(rr) ==" not in source


@pytest.mark.parametrize("task, params", [
    ("var_cross_entropy", {"mode": "one_pass", "BLOCK_O": 2}),  # 7 rows of 1000: a partial block of rows
    ("var_softmax_masked", {"mode": "one_pass", "BLOCK_O": 1}),
    ("var_softmax_masked", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 3}),  # groups of 8
    ("var_softmax_masked", {"mode": "one_pass", "BLOCK_O": 2, "pairs": 1}),  # 350 pairs a row of 700, -inf
    ("var_layer_norm", {"mode": "one_pass", "BLOCK_O": 1, "pairs": 1}),  # two reductions, then the store
    ("var_layer_norm", {"mode": "one_pass", "BLOCK_O": 2, "pairs": 1, "evict": 1}),  # 9 rows: 4 blocks and 1
    ("tpl_group_norm", {"mode": "one_pass", "BLOCK_O": 8, "pairs": 1}),  # even rows of a tensor whose W is 3
])
def test_bf16_rows_through_the_evaluator(task, params, warm_executor):
    """In bf16 (the evaluator's cast, judged against fp32 math): cross-entropy's one-pass row is held as loaded,
    its max taken at that width and its other uses widened by bits (_widen), its target one load per row; a
    softmax's (its exps live until its store) is widened at its load, or held as 32-bit pairs (pairs), loaded
    once and widened anew by each reduction stage and the store; the online softmax's running max is per group
    of a thread's 8 elements."""
    from tools.results import EvalJob, TaskSpec
    a = analyze(str(FIXTURES / f"{task}.py"), small=True, dtype="bfloat16")
    t = BY_NAME["rowwise"]
    source = t.render(a, {**t.default(a), **params})
    if params.get("pairs"):
        # three stages each: the max, the sum and the store; the mean, the variance and the store
        assert [source.count(f"_pairs(u1, 16 + {k} * tl.program_id(1))") for k in range(3)] == [1, 1, 1]
        rows_once = source.count("tl.load(p0 + ro * ") == source.count("\ndef _row_kernel")  # a load a kernel
        assert rows_once and "(x.view(-1).view(torch.int32), " in source
    elif params["mode"] == "one_pass":
        narrow = re.search(r"r\d+ = tl.max\(tl.where\(mask, x1, -float\(\"inf\"\)\), axis=1, keep_dims=True\)"
                           r"\.to\(tl.float32\)", source) and "_widen(x1)" in source
        assert bool(narrow) == (task == "var_cross_entropy")
        assert ("+ rr_t, mask=mask_t" in source and "(rr) ==" not in source) == (task == "var_cross_entropy")
    else:
        assert "BLOCK_R // 8, 8], can_reorder=False)" in source
    result = warm_executor.submit(EvalJob(TaskSpec(path=str(FIXTURES / f"{task}.py"), small=True, dtype="bfloat16"),
                                          source, trials=2, profile=False, timeout_s=300)).result()
    assert result.verdict == "correct", result.reason


def test_a_bf16_one_pass_softmax_row_is_held_as_pairs_a_program_a_row():
    """A bf16 softmax over rows of 32768 (looped by default, persistent where rows are many): its one-pass
    variant holds each row as 32-bit pairs over 16 warps, a program a row; in fp32 it holds fp32."""
    for dtype, pairs in (("bfloat16", 1), (None, None)):
        a = analyze(str(FIXTURES / "var_softmax_rows.py"), False, shapes={"rows": 2048, "dim": 32768}, dtype=dtype)
        second = BY_NAME["rowwise"].variants(a)[1]
        assert (second["mode"], second["num_warps"], second.get("pairs")) == ("one_pass", 16, pairs)
        persist = BY_NAME["rowwise"].default(a).get("PERSIST")
        assert persist and second.get("PERSIST") == (0 if pairs else persist)


def test_a_bf16_one_pass_row_held_as_loaded_takes_8_warps():
    """32000 logits a row: looped first, then the row in registers, over 8 warps where it is held at bf16 (128
    values a thread, two a register) and over 16 in fp32."""
    shapes = {"rows": 64, "vocab": 32000}
    for dtype, warps in (("bfloat16", 8), (None, 16)):
        a = analyze(str(FIXTURES / "var_cross_entropy.py"), False, shapes=shapes, dtype=dtype)
        second = BY_NAME["rowwise"].variants(a)[1]
        assert (second["mode"], second["num_warps"]) == ("one_pass", warps)


@pytest.mark.parametrize("params", [
    {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "online": 1},  # 5 whole chunks, then a remainder of 60
    {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 1, "tail_first": 1},  # a partial block of rows
    {"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 1, "SPLIT": 3, "online": 1},
    {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 2},  # a max per row and chunk
    {"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 2, "SPLIT": 3, "online": 2, "pipeline": 1, "num_stages": 2},
    {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 3, "tail_first": 1},  # a max per group of 8
    {"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 1, "SPLIT": 3, "online": 3},
])
def test_the_online_softmax_takes_rising_falling_masked_and_offset_rows(params, runner):
    """The online step across chunks: per lane one exp per element (exp(-|x - m|), the other factor being 1),
    one max per chunk, or one per group of 8 adjacent elements (the remainder's last groups wholly masked); the
    division by the row's sum a product with its reciprocal."""
    source = check("var_softmax_masked", "rowwise", params, runner)
    per_chunk = re.search(r"mn\d+ = tl.maximum\(om\d+, tl.max\(vv\d+, axis=1", source)
    per_group = re.search(r"mn\d+ = tl.maximum\(om\d+, tl.max\(og\d+, axis=2\)\)", source)
    assert bool(per_chunk) == (params["online"] == 2) and ("_exp(SFU, -tl.abs(" in source) == (params["online"] == 1)
    assert bool(per_group) == (params["online"] == 3)
    assert re.search(r"inv\d+ = 1\.0 / r\d+", source)


@pytest.mark.parametrize("group", [1, 0])
def test_a_rows_float_sums_in_one_pass_are_one_tuple_reduction(group, runner):
    """Rows of 1003 (37 rows, two a block: a partial block) with two sums in one stage, |x| and x^2: one
    tl.reduce of the pair (_sum2) by default, two tl.sum under group=0; the same values either way."""
    source = check("var_rows_odd", "rowwise", {"mode": "one_pass", "BLOCK_O": 2, "group": group}, runner)
    kernel = source.split("def _row_kernel0(", 1)[1].split("class ModelNew", 1)[0]
    grouped = re.search(r"r\d+, r\d+ = tl.reduce\(\(tl.where\(mask, .+\), tl.where\(mask, .+\)\), 1, _sum2, "
                        r"keep_dims=True\)", kernel)
    assert bool(grouped) == bool(group) and kernel.count("tl.sum(") == (0 if group else 2)


def test_a_candidate_for_the_interpreter_keeps_its_sums_apart():
    """The interpreter folds a tl.reduce of a tuple element by element: a sum of 4093 values near 30 was 1e-6 off
    where tl.sum's was 2e-8, and a normalization after it failed the evaluator's shifted trial on a CPU. A
    candidate made for a CPU (arch "cpu") sums with tl.sum; one for a GPU groups them."""
    sources = {}
    for arch in ("cpu", "sm_90"):
        a = analyze(str(FIXTURES / "var_rows_odd.py"), small=True, arch=arch)
        t = BY_NAME["rowwise"]
        sources[arch] = t.render(a, {**t.default(a), "mode": "one_pass", "BLOCK_O": 2})
    assert "_sum2" not in sources["cpu"] and "_sum2" in sources["sm_90"]


@pytest.mark.parametrize("params, programs", [
    ({"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "PERSIST": 1}, 132),  # 300 rows: 36 programs take 3
    ({"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 2, "PERSIST": 2, "online": 2}, 150),  # one block each
])
def test_persistent_programs_take_blocks_of_rows_in_turn(params, programs, runner):
    source = check("var_rows_many", "rowwise", params, runner)
    assert f"for ob in range(tl.program_id(0), {300 // params['BLOCK_O']}, {programs}):" in source
    assert f"_row_kernel0[({programs},)]" in source


def test_the_fold_is_offered_where_a_selected_sum_follows_the_row_statistics():
    ce = analyze(str(FIXTURES / "var_cross_entropy.py"), small=True)
    assert BY_NAME["rowwise"].space(ce)["fold"] == [1, 0] and BY_NAME["rowwise"].default(ce)["fold"] == 1
    assert len(foldable(base.plan(ce).main)) == 1
    softmax = analyze(str(FIXTURES / "var_softmax_rows.py"), small=True)
    assert "fold" not in BY_NAME["rowwise"].space(softmax) and not foldable(base.plan(softmax).main)


@pytest.mark.parametrize("task, params", [
    # 1000 logits in 8 splits of 128 (the last one 104), a combine of online-softmax states and folded sums
    ("var_cross_entropy", {"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 1, "SPLIT": 8}),
    # the same in groups of 4 rows: 7 rows launch as 4 and 3
    ("var_cross_entropy", {"mode": "looped", "BLOCK_R": 64, "BLOCK_O": 2, "SPLIT": 8, "GROUP": 4}),
    # 1500 elements in 4 splits of 384 (the last 348), 11 rows in groups of 4, 4 and 3
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 4}),
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "SPLIT": 4, "GROUP": 4}),
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 4, "GROUP": 8, "online": 1,
                          "tail_first": 1}),
    # layer norm, rows of mean 30: pivoted sums and per-lane Welford states merged across programs
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 3, "welford": 1}),
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "SPLIT": 5, "GROUP": 2, "welford": 2}),
    # the split's default form (params.split_rows): both passes' chunk loops software-pipelined, or the first
    # pipelined and the output a flat kernel over the rows' statistics (FLAT)
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 3, "welford": 1, "pipeline": 1,
                        "num_stages": 4}),
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 3, "welford": 1, "pipeline": 1,
                        "num_stages": 4, "FLAT": 1}),
    # a softmax's output a flat kernel too: its rows' max and the reciprocal of their sum stored a row each
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "SPLIT": 4, "FLAT": 1}),
])
def test_split_rows_with_a_remainder_combine_across_programs(task, params, runner):
    source = check(task, "rowwise", params, runner)
    assert "pid_s = tl.program_id(1)" in source and "_row_kernel0_final[(" in source
    flat = bool(params.get("FLAT"))
    assert source.count("num_stages=4):") == (2 - flat if params.get("pipeline") else 0)
    assert ("_row_kernel0_out[(" in source) == flat and ("_row_kernel0_stat0 = torch.empty((" in source) == flat
    if flat and task == "var_softmax_rows":
        assert re.search(r"tl\.store\(p\d \+ ro, 1\.0 / ", source) and " / " not in source.split("_row_kernel0_out(")[1]
    rows = {"var_cross_entropy": 7, "var_softmax_rows": 11, "var_layer_norm": 9}[task]
    if params.get("GROUP"):  # one host loop launching both kernels per group of rows
        assert f"for row0 in range(0, {rows}, {params['GROUP']}):" in source
        assert re.search(r"_row_kernel0\[\(\d+, \d+\)\]\(.*row0, BLOCK_O=", source)
    else:
        assert "row0" not in source


def test_split_rows_pipeline_their_chunks_where_the_rows_are_written_back():
    """Too few rows to fill the GPU: each split over programs. A norm, whose rows are written back after their
    statistics, takes 1024-wide chunks pipelined over 4 stages and its output as a flat kernel; a loss (a sum
    alone) keeps 4096-wide chunks."""
    norm = analyze(str(FIXTURES / "var_layer_norm.py"), small=False, shapes={"rows": 64, "dim": 1 << 20})
    d = BY_NAME["rowwise"].default(norm)
    assert (d["SPLIT"], d["BLOCK_R"], d["num_warps"], d["pipeline"], d["num_stages"], d["FLAT"]) == \
        (32, 1024, 4, 1, 4, 1)
    loss = analyze(str(FIXTURES / "tpl_mse.py"), small=False, shapes={"rows": 64, "cols": 1 << 16})
    d = BY_NAME["rowwise"].default(loss)
    assert (d["SPLIT"], d["BLOCK_R"], d["num_warps"], d.get("pipeline", 0), d.get("FLAT", 0)) == (512, 4096, 8, 0, 0)


@pytest.mark.parametrize("task, params", [
    # 1500 elements in 4 splits of 384 (the last 348), 11 rows, one launch: online-softmax states combined
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 4, "LAG": 1}),
    # rows of mean 30 in 3 splits, two rows a ticket (9 rows: the last block half empty), Welford states
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "SPLIT": 3, "welford": 1, "LAG": 1}),
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 5, "welford": 2, "LAG": 1}),
])
def test_a_lagged_split_runs_both_passes_in_one_launch(task, params, runner):
    """LAG: one persistent launch takes tickets; a ticket's partials, the row's last chunk combining them, and
    the output of the chunk a row block behind, once its statistics are in."""
    source = check(task, "rowwise", params, runner)
    assert "_row_kernel0_final" not in source and "_row_kernel0[(264,)](" not in source
    assert re.search(r"_row_kernel0\[\((\d+),\)\]\(", source)
    assert "while t < TICKETS + LAG:" in source and "volatile=True" in source
    assert re.search(r"_row_kernel0_sync = torch\.zeros\(\(\d+,\), device=", source)


@pytest.mark.parametrize("task, params", [
    # 1300 elements in 11 chunks of 128 (the last 20), 9 rows: Welford states around each chunk's own mean
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 11, "welford": 1, "COOP": 1}),
    # 6 chunks of 256 (the last 20): its partials masked to 6 of 8 (per-lane Welford is refused a held split)
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 256, "BLOCK_O": 1, "SPLIT": 6, "welford": 1, "COOP": 1}),
    # 1500 elements in 6 chunks of 256 (the last 220): online-softmax states
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 256, "BLOCK_O": 1, "SPLIT": 6, "COOP": 1}),
])
def test_a_held_split_reads_its_input_once(task, params, runner):
    """COOP: a chunk a program, held in registers until its row's statistics are in. The interpreter runs the
    programs one at a time, so every chunk but each row's last is left to that last program, which re-reads
    and writes them; the last chunk itself is written from the values held."""
    source = check(task, "rowwise", params, runner)
    kernel = source.split("def _row_kernel0(", 1)[1].split("class ModelNew", 1)[0]
    assert "_row_kernel0_final" not in source and "for r0 in" not in kernel
    assert "tl.atomic_or(" in kernel and "while (seen" in kernel
    # the first pass loads the input once; the re-read is inside the sweep of chunks counted in before READY
    first_part = kernel.split("tl.debug_barrier()", 1)[0]
    assert len(re.findall(r"tl\.load\(p0 \+", first_part)) == 1
    assert re.search(r"_row_kernel0_claim = torch\.zeros\(\(\d+,\), device=", source)
    # a waiting program polls the row's count of partials (not its READY state) and, once all are in, merges
    # them itself: the last program's loads of the partials appear again in the waiting branch
    count = re.search(r"arrived\d+ = tl\.atomic_add\((p\d+ \+ t // \d+), 1", kernel).group(1)
    assert re.search(rf"seen\d+ = tl\.atomic_add\({re.escape(count)}, 0", kernel)
    last, waiting = kernel.split("tl.atomic_or(", 1)[0], kernel.split("tl.atomic_or(", 1)[1]
    merge = [line.strip() for line in last.splitlines() if re.match(r"\s+(pt\d+|ws\d+) = tl\.load\(", line)]
    assert merge and all(line in waiting for line in merge)


def test_a_held_splits_register_cap_goes_on_its_launch(runner):
    """maxnreg (roofline's registers move) caps the held split's kernel at its launch, and the candidate still
    matches the reference."""
    params = {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 11, "welford": 1, "COOP": 1, "maxnreg": 96}
    source = check("var_layer_norm", "rowwise", params, runner)
    launches = re.findall(r"^\s*(_row_kernel\w*)\[.*num_stages=\d+(, maxnreg=96)?\)$", source, re.M)
    assert launches == [("_row_kernel0", ", maxnreg=96")], launches


@pytest.mark.gpu
@pytest.mark.parametrize("task, params", [
    ("var_layer_norm", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "SPLIT": 11, "welford": 1, "COOP": 1}),
    ("var_softmax_rows", {"mode": "looped", "BLOCK_R": 256, "BLOCK_O": 1, "SPLIT": 6, "COOP": 1}),
])
def test_a_held_split_matches_on_a_gpu_where_its_programs_run_together(task, params, tmp_path, on_gpu):
    """On a GPU a row's programs run at once, so those that find every partial in merge them themselves (the
    path the interpreter never takes); the output still matches the reference, call after call."""
    import torch
    a = analyze(str(FIXTURES / f"{task}.py"), small=True)
    t = BY_NAME["rowwise"]
    model, new, inputs = on_gpu(t.render(a, {**t.default(a), **params}), tmp_path, "held_candidate")
    with torch.no_grad():
        want = model(*inputs)
        for _ in range(3):
            assert torch.allclose(new(*inputs), want, rtol=1e-4, atol=1e-5)


def test_a_held_split_takes_one_block_a_chunk():
    a = analyze(str(FIXTURES / "var_layer_norm.py"), small=True)
    p = {**BY_NAME["rowwise"].default(a), "mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1, "COOP": 1}
    assert "SPLIT must be 11" in base.invalid(a, {**p, "SPLIT": 4})
    assert "no LAG" in base.invalid(a, {**p, "SPLIT": 11, "LAG": 1})
    assert "BLOCK_O 1" in base.invalid(a, {**p, "SPLIT": 11, "BLOCK_O": 2})
    assert base.invalid(a, {**p, "SPLIT": 11}) is None


def test_a_lagged_split_also_writes_each_rows_own_outputs(runner, tmp_path):
    """A row's statistic that is an output itself (here its log-sum-exp beside the softmax) is written once,
    by the program that combined the row's partials."""
    task = tmp_path / "softmax_and_lse.py"
    task.write_text('''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1), torch.logsumexp(x, dim=-1)


def get_inputs():
    return [3.0 * torch.randn(5, 700)]


def get_init_inputs():
    return []
''')
    a = analyze(str(task), small=True)
    t = BY_NAME["rowwise"]
    p = {**t.default(a), "mode": "looped", "BLOCK_R": 64, "BLOCK_O": 1, "SPLIT": 3, "LAG": 1}
    assert base.invalid(a, p) is None, base.invalid(a, p)
    source = t.render(a, p)
    assert "while t < TICKETS + LAG:" in source
    out = runner.run(task, source)
    assert out["error"] is None and all(e <= 1e-4 for e in out["rel_errors"]), out


def test_a_lag_needs_a_split_and_a_per_element_output():
    a = analyze(str(FIXTURES / "var_softmax_rows.py"), small=True)
    p = {**BY_NAME["rowwise"].default(a), "mode": "looped", "BLOCK_R": 128, "BLOCK_O": 1}
    assert "LAG runs a split" in base.invalid(a, {**p, "LAG": 1})
    assert "LAG runs a split" in base.invalid(a, {**p, "SPLIT": 4, "GROUP": 4, "LAG": 1})


GROUP_NORM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.gn = nn.GroupNorm(2, 4)
        with torch.no_grad():
            self.gn.weight.uniform_(0.5, 1.5)
            self.gn.bias.uniform_(-1.0, 1.0)

    def forward(self, x):
        return self.gn(x)


def get_inputs():
    return [torch.randn(3, 4, SIDE, SIDE)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("side, params, loads", [  # loads: (at the chunk's start, at a plane's end)
    (8, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1}, (2, 0)),  # planes of 64: a channel over two chunks
    (8, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 2, "tail_first": 1}, (2, 0)),
    (8, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, "SPLIT": 2, "LAG": 1}, (2, 0)),
    (8, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, "SPLIT": 2}, (2, 0)),
    # planes of 36: a chunk meets at most two; rows of 72, two chunks and a remainder, each with its loads
    (6, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1}, (4, 4)),
    (6, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 2, "tail_first": 1}, (4, 4)),
    (6, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, "SPLIT": 2}, (2, 2)),  # splits of 64: two chunks
    (6, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, "SPLIT": 2, "LAG": 1}, (2, 2)),
    (5, {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1}, (0, 0)),  # planes of 25: up to three a chunk
])
def test_a_per_channel_weight_loads_once_per_chunk(side, params, loads, runner, tmp_path):
    """A group norm's weight and bias, one per channel plane: where every chunk of BLOCK_R lies in one plane,
    one load per row and chunk at the chunk's start (r0), not a gather per element; where planes are no
    shorter than a chunk but not a multiple of it, a second load at the first plane's end within the chunk,
    each element picking one of the two."""
    task = tmp_path / "group_norm.py"
    task.write_text(GROUP_NORM.replace("SIDE", str(side)))
    a = analyze(str(task), small=True)
    t = BY_NAME["rowwise"]
    p = {**t.default(a), **params}
    assert base.invalid(a, p) is None, base.invalid(a, p)
    source = t.render(a, p)
    hoisted = re.findall(r"tl\.load\(p\d+ \+ \(\(\(ro \* \d+ \+ \(r0\)\) // \d+\) % 4\), mask=rmask", source)
    at_edge = re.findall(r"tl\.load\(p\d+ \+ \(\(\(ro \* \d+ \+ \(r0 \+ edge\d+ - start\d+\)\) // 36\) % 4\)", source)
    assert (len(hoisted), len(at_edge)) == loads
    out = runner.run(task, source)
    assert out["error"] is None and all(e <= 1e-4 for e in out["rel_errors"]), out


@pytest.mark.parametrize("side, split", [(8, 4), (6, 3)])  # planes of 64 (two chunks each), of 36 (chunks span two)
def test_a_held_group_norm_loads_its_weights_per_chunk(side, split, runner, tmp_path):
    """A held split's output (its own chunk, and the chunks its row's last program re-reads) takes a group
    norm's weight and bias per chunk, as the looped forms do."""
    task = tmp_path / "group_norm.py"
    task.write_text(GROUP_NORM.replace("SIDE", str(side)))
    a = analyze(str(task), small=True)
    t = BY_NAME["rowwise"]
    p = {**t.default(a), "mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, "SPLIT": split, "COOP": 1}
    assert base.invalid(a, p) is None, base.invalid(a, p)
    source = t.render(a, p)
    assert re.search(r"tl\.load\(p\d+ \+ \(\(\(ro \* \d+ \+ \(pid_s \* BLOCK_R\)\) // \d+\) % 4\)", source)
    out = runner.run(task, source)
    assert out["error"] is None and all(e <= 1e-4 for e in out["rel_errors"]), out


BIAS_SIGMOID_SUM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.sigmoid(x + self.bias.view(1, 4, 1, 1)).sum(dim=[1, 2, 3])


def get_inputs():
    return [torch.randn(3, 4, SIDE, SIDE)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("side, split", [(8, 1), (8, 2), (6, 1)])  # planes of 64, a chunk's; of 36, two a chunk
def test_a_per_channel_weight_the_same_for_every_row_loads_as_a_block(side, split, runner, sm90, tmp_path):
    """Rows of whole samples (every channel's plane): a channel's bias, loaded once per chunk, is at the same
    offset in every row. The interpreter takes that scalar pointer under the rows' block mask; Triton's compile
    does not (KernelBench level 2's 65 on an H200, session 41), so the offset is made a block. The candidate
    compiles for sm_90 and matches the reference."""
    task = tmp_path / "bias_sigmoid_sum.py"
    task.write_text(BIAS_SIGMOID_SUM.replace("SIDE", str(side)))
    a = analyze(str(task), small=True)
    t = BY_NAME["rowwise"]
    p = {**t.default(a), "mode": "looped", "BLOCK_R": 32, "BLOCK_O": 1, **({"SPLIT": split} if split > 1 else {})}
    assert base.invalid(a, p) is None, base.invalid(a, p)
    source = t.render(a, p)
    assert re.search(r"tl\.load\(p1 \+ ro \* 0 \+ \(\(r0\) // \d+\), mask=rmask", source)
    path = tmp_path / "candidate.py"
    path.write_text(source)
    sm90(path, "_row_kernel0", {"BLOCK_O": 1, "BLOCK_R": 32, "SFU": True})
    out = runner.run(task, source)
    assert out["error"] is None and all(e <= 1e-4 for e in out["rel_errors"]), out


def test_one_pass_online_forms_in_a_looped_row(runner):
    """Online softmax (running max and rescaled sum) and one-pass mean/variance read the row once for the
    statistics, once more to write."""
    softmax = check("var_softmax_rows", "rowwise", {"mode": "looped", "BLOCK_R": 256, "online": 1}, runner)
    assert _row_loops(softmax, "_row_kernel0") == 2  # softmax's and log-softmax's statistics, then the write
    for welford in (1, 2):
        norm = check("var_layer_norm", "rowwise", {"mode": "looped", "BLOCK_R": 256, "welford": welford}, runner)
        assert _row_loops(norm, "_row_kernel0") == 2


@pytest.mark.parametrize("params", [{"impl": "torch"}, {"impl": "triton", "BLOCK_M": 16, "BLOCK_N": 64}])
def test_a_row_norm_epilogue_over_a_gemm(params, runner):
    """Swish and an RMS norm over each output row of a Linear: with impl "torch" the product is the declared
    vendor GEMM and the rest one Triton row kernel reading its buffer."""
    source = check("var_gemm_rownorm", "gemm", params, runner)
    vendor = params["impl"] == "torch"
    assert ("KERNELWRIGHT_TORCH_OPS = ['aten.addmm']" in source) == vendor and ("torch.addmm(" in source) == vendor
    assert "_row_kernel1[(" in source and ("_gemm_kernel0" in source) != vendor


def test_groups_bound_the_working_set_to_l2():
    """At full size, a split's GROUP choices keep each group's rows within a quarter to a half of L2, the
    rowwise template proposes one, and GROUP needs a split whose row blocks it holds whole."""
    a = analyze(str(FIXTURES / "tpl_softmax_param.py"), small=False, shapes={"batch": 4096, "dim": 393216})
    t = BY_NAME["rowwise"]
    space = t.space(a)
    assert space["GROUP"][0] == 0 and space["GROUP"][1:] == l2_groups(base.plan(a).main) == [16]
    assert all(L2_BYTES / 4 <= g * 393216 * 4 <= L2_BYTES / 2 for g in space["GROUP"][1:])
    grouped = [p for p in t.variants(a) if p.get("GROUP")]
    assert grouped and all(base.invalid(a, p) is None for p in grouped)
    d = t.default(a)
    assert "SPLIT" in base.invalid(a, {**d, "GROUP": 16})
    assert "multiple of BLOCK_O" in base.invalid(a, {**d, "mode": "looped", "BLOCK_R": 4096, "SPLIT": 32,
                                                     "GROUP": 2, "BLOCK_O": 4, "num_warps": 8})


# --- per-kernel parameters: the search retunes the kernel that takes the device time ------------------
FOCUSED = FIXTURES / "var_gemm_rownorm.py"  # a Triton GEMM (kernel 0, the main one), then a row norm (kernel 1)


def test_another_kernel_takes_its_own_parameters(runner):
    plain = check("var_gemm_rownorm", "gemm", {"impl": "triton"}, runner)
    tuned = check("var_gemm_rownorm", "gemm", {"impl": "triton", "kernels": {"1": {"mode": "looped",
                                                                                  "BLOCK_R": 256}}}, runner)
    assert _row_loops(plain, "_row_kernel1") == 0 and _row_loops(tuned, "_row_kernel1") == 2
    assert plain.split("def _row_kernel1")[0] == tuned.split("def _row_kernel1")[0].replace(
        ", 'kernels': {'1': {'mode': 'looped', 'BLOCK_R': 256}}", "")  # the GEMM kernel as it was


def test_per_kernel_parameters_name_a_kernel_other_than_the_main_one():
    a = analyze(str(FOCUSED), small=True)
    d = {**BY_NAME["gemm"].default(a), "impl": "triton"}
    assert base.invalid(a, {**d, "kernels": {"1": {"mode": "looped", "BLOCK_R": 256}}}) is None
    assert "kernel 0 is not a Triton kernel of this plan other than the main one" in base.invalid(
        a, {**d, "kernels": {"0": {"BLOCK_M": 16}}})
    assert "kernel 5 is not" in base.invalid(a, {**d, "kernels": {"5": {}}})
    assert "kernel 1: " in base.invalid(a, {**d, "kernels": {"1": {"mode": "one_pass", "BLOCK_O": 64,
                                                                   "num_warps": 1}}})


def profiled(kernel_ms: dict) -> Individual:
    a = analyze(str(FOCUSED), small=True)
    params = {"template": "gemm", **BY_NAME["gemm"].default(a), "impl": "triton"}
    timing = Timing(1.0, 2.0, 2.0, 0.5, 2.0, 2.0, 0.5, 1.0, False)
    return Individual(3, "src", "template", None, params,
                      result=EvalResult("correct", "ok", timing=timing, kernel_ms=kernel_ms))


def proposals(kernel_ms: dict) -> list:
    source = FOCUSED.read_text()
    task = TaskContext(FOCUSED.stem, source, analyze(source, small=True).to_json(), "cpu", "cpu")
    best = profiled(kernel_ms)
    op = ParamOperator(seed=1)
    op.observe([best])
    return op.propose(task, [best], 8)


def test_the_kernel_with_most_device_time_is_retuned():
    out = proposals({"_row_kernel1": 0.9, "_gemm_kernel0": 0.1})
    retuned = [p for p in out if "kernels" in p.params]
    assert len(out) == 8 and 2 <= len(retuned) < 8  # about half the proposals (FOCUS), the rest as before
    assert all(list(p.params["kernels"]) == ["1"] and "kernel 1, the most device time in candidate 3" in p.note
               for p in retuned)


def test_a_main_kernel_that_takes_the_time_is_tuned_as_before():
    out = proposals({"_gemm_kernel0": 0.9, "_row_kernel1": 0.1, "aten::mm": 5.0})
    assert out and not any("kernels" in p.params for p in out)


@pytest.mark.parametrize("task, params", [
    ("var_layer_norm", {"welford": 0}),  # mean, variance, output: three passes
    ("var_softmax_rows", {}),  # the online max and sum, then the output
])
def test_rows_read_again_are_kept_in_l2_for_the_later_passes(task, params, runner):
    """evict: a looped row kernel that reads its rows again loads them evict_last in its earlier passes and
    evict_first in its last, which stores evict_first too; what it does not walk (a norm's weight) takes no
    hint. A kernel that reads its rows once (cross-entropy, its target folded into the online pass) has no
    such parameter."""
    source = check(task, "rowwise", {"mode": "looped", "BLOCK_R": 256, "evict": 1, **params}, runner)
    body = source.split("def _row_kernel0(", 1)[1].split("class ModelNew", 1)[0]
    loads = re.findall(r'tl\.load\([^\n]*eviction_policy="(\w+)"', body)  # a pass's whole chunks and remainder
    assert [hint for i, hint in enumerate(loads) if i == 0 or loads[i - 1] != hint] == ["evict_last", "evict_first"]
    assert loads.count("evict_last") == 2 * (_row_loops(source, "_row_kernel0") - 1)
    assert set(re.findall(r'tl\.store\([^\n]*eviction_policy="(\w+)"', body)) == {"evict_first"}
    once = analyze(str(FIXTURES / "var_cross_entropy.py"), small=True)
    assert looped_passes(base.plan(once).main, {"mode": "looped"}) == 1
    t = BY_NAME["rowwise"]
    assert "eviction_policy" not in t.render(once, {**t.default(once), "mode": "looped", "BLOCK_R": 128, "evict": 1})


@pytest.mark.parametrize("task, params", [
    ("var_layer_norm", {}),  # two reductions, then the store; its weight and bias not walked
    ("var_softmax_masked", {"BLOCK_O": 2}),  # a partial block of rows
])
def test_a_one_pass_row_is_loaded_evict_last(task, params, runner):
    """evict in a one-pass row kernel: the row it walks, loaded once, takes evict_last; no other load and no
    store takes a hint, and the output is the same. Held as bf16 pairs, the pairs' one load takes it."""
    source = check(task, "rowwise", {"mode": "one_pass", "evict": 1, **params}, runner)
    body = source.split("def _row_kernel0(", 1)[1].split("class ModelNew", 1)[0]
    loads = re.findall(r"tl\.load\([^\n]*", body)
    hinted = [line for line in loads if 'eviction_policy="evict_last"' in line]
    assert len(hinted) == 1 and "tl.load(p0 + ro * " in hinted[0]
    assert body.count("eviction_policy") == 1
    a = analyze(str(FIXTURES / f"{task}.py"), small=True, dtype="bfloat16")
    t = BY_NAME["rowwise"]
    pairs = t.render(a, {**t.default(a), "mode": "one_pass", "pairs": 1, "evict": 1, **params})
    assert re.search(r'u1 = tl\.load\([^\n]*eviction_policy="evict_last"\)\.to\(tl\.uint32', pairs)
    assert pairs.count("eviction_policy") == 1



@pytest.mark.parametrize("params", [
    {"mode": "looped", "BLOCK_R": 256, "evict": 1},  # 3 whole chunks of 256, then 235 around the row's ends
    {"mode": "looped", "BLOCK_R": 256, "BLOCK_O": 4, "tail_first": 0},  # 37 rows: a last block of one row
    {"mode": "looped", "BLOCK_R": 128, "PERSIST": 1},  # programs that take rows in turn
])
def test_rows_of_an_odd_length_load_their_whole_chunks_from_aligned_starts(params, runner):
    """Rows of 1003 fp32 elements start at every offset in a 16-byte word. Each row's whole chunks start at
    its first element on a 16-byte boundary (rbase, hd elements in) and take no mask; the remainder chunk
    takes the rest, the elements after them and the hd before, and the sums and the output are the task's."""
    source = check("var_rows_odd", "rowwise", params, runner)
    assert "rbase = (ro * 1003 + 3) // 4 * 4" in source and "rr = (rq + hd) % 1003" in source
    assert "tl.load(p0 + rbase + rq, mask=mask" in source and re.search(r"tl\.store\(p1 \+ lin\d+, ", source)
    assert "tl.load(p0 + ro * 1003 + rr, mask=mask" in source  # the remainder, at the row's own indices


def test_aligned_rows_compile_to_16_byte_loads_and_stores_for_sm_90(tmp_path):
    """What the aligned starts are for: Triton can prove rbase + rq a multiple of 4 elements, and the whole
    chunks load and store 16 bytes a lane (ld.global.v4), where ro * 1003 + rr took one element a lane. On an
    H200 (session 32) KernelBench's L1 norm over 32768x65535 ran 5.27 -> 4.72 ms so."""
    import importlib.util

    from tools.compile_info import compiled

    a = analyze(str(FIXTURES / "var_rows_odd.py"), small=True)
    t = BY_NAME["rowwise"]
    params = {**t.default(a), "mode": "looped", "BLOCK_R": 256, "evict": 1}
    (tmp_path / "odd.py").write_text(t.render(a, params))
    spec = importlib.util.spec_from_file_location("odd_rows", tmp_path / "odd.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ptx = compiled({"signature": {"p0": "*fp32", "p1": "*fp32", "BLOCK_O": "constexpr", "BLOCK_R": "constexpr"},
                    "constexprs": {"BLOCK_O": params["BLOCK_O"], "BLOCK_R": 256}, "divisible": ["p0", "p1"],
                    "options": {"num_warps": params["num_warps"]}}, module._row_kernel0).asm["ptx"]
    assert "ld.global.L1::evict_last.v4" in ptx or re.search(r"ld\.global\S*\.v4\.", ptx), ptx[:2000]
    assert re.search(r"st\.global\S*\.v4\.", ptx)


def test_passes_that_read_a_weight_along_the_rows_or_aligned_rows_keep_their_chunks():
    """The aligned starts only in a pass where every per-element access walks the rows: the norm chain's first
    pass (its statistics of x alone) takes them, its later passes, which read weights along the 130 elements,
    do not (the weights would be read hd elements off their own alignment); rows of 200 fp32 start on 16
    bytes already; in bf16 the rows of 1003 take words of 8 elements."""
    t = BY_NAME["rowwise"]
    sources = {}
    for task, dtype in [("tpl_norms", None), ("var_rows_many", None), ("var_rows_odd", "bfloat16")]:
        a = analyze(str(FIXTURES / f"{task}.py"), small=True, dtype=dtype)
        sources[task] = t.render(a, {**t.default(a), "mode": "looped", "BLOCK_R": 64})
    norms = sources["tpl_norms"]
    # rbase in the first pass's whole chunks; the row's own indices in the Welford pivot's chunk, the first
    # pass's remainder, and the whole chunks and remainder of each later pass
    assert norms.count("tl.load(p0 + rbase + rq") == 1 and norms.count("tl.load(p0 + ro * 130 + rr") == 6
    assert "tl.load(p1 + rr, " in norms
    assert "rbase" not in sources["var_rows_many"]
    assert "rbase = (ro * 1003 + 7) // 8 * 8" in sources["var_rows_odd"]


BIG_ROWS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, labels):
        return {op}


def get_inputs():
    return [torch.randn({rows}, 8192), torch.randint(0, 8192, ({rows},))]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("op, rows, hinted", [
    ("torch.softmax(x, dim=-1)", 16384, True),  # 256 MB of bf16 rows, read once and written
    ("torch.softmax(x, dim=-1)", 2048, False),  # 32 MB: the rows fit L2
    ("nn.functional.cross_entropy(x, labels)", 16384, False),  # no per-element output
])
def test_one_pass_rows_that_outgrow_l2_try_the_hint_second(op, rows, hinted, tmp_path):
    """rowwise.streams_rows: a one-pass default over bf16 rows of twice L2 or more, with a per-element output,
    takes a variant loading them evict_last (at 8 warps at most) second."""
    task = tmp_path / "rows.py"
    task.write_text(BIG_ROWS.format(op=op, rows=rows))
    a = analyze(str(task), small=False, dtype="bfloat16")
    out = BY_NAME["rowwise"].variants(a)
    assert out[0]["mode"] == "one_pass" and not out[0].get("evict")
    assert (out[1] == {**out[0], "evict": 1, "num_warps": min(8, out[0]["num_warps"])}) == hinted


WIDE_ROWS = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, labels):
        return {op}


def get_inputs():
    return [torch.randn(2048, 128256), torch.randint(0, 128256, (2048,))]


def get_init_inputs():
    return []
"""


def test_bf16_rows_that_fit_l2_try_pairs_two_a_program_second():
    """A one-pass bf16 row with per-element outputs, over rows that fit L2, takes its rows as pairs, two a
    program at 4 warps, loaded evict_last, second; rows of twice L2 (streams_rows) take their own hinted form."""
    for rows, paired in ((4096, True), (16384, False)):
        a = analyze(str(FIXTURES / "var_softmax_rows.py"), False, shapes={"rows": rows, "dim": 4096},
                    dtype="bfloat16")
        out = BY_NAME["rowwise"].variants(a)
        assert out[0]["mode"] == "one_pass" and not out[0].get("pairs")
        second = {**out[0], "pairs": 1, "BLOCK_O": 2, "num_warps": 4, "evict": 1}
        assert (out[1] == second) == paired and base.invalid(a, out[1]) is None


@pytest.mark.parametrize("op, tried", [
    ("nn.functional.cross_entropy(x, labels)", True),  # read once, one loss a row
    ("torch.softmax(x, dim=-1)", False),  # written back per element: its own variants
])
def test_rows_read_once_try_other_chunks_last(op, tried, tmp_path):
    """rowwise.reads_once: a looped default over rows it reads once, with no per-element output, also tries
    chunks of 8192 at 16 warps and of 2048 at 8, after its other forms."""
    task = tmp_path / "wide.py"
    task.write_text(WIDE_ROWS.format(op=op))
    a = analyze(str(task), small=False, dtype="bfloat16")
    out = BY_NAME["rowwise"].variants(a)
    d = out[0]
    assert d["mode"] == "looped" and (d["BLOCK_R"], d["num_warps"]) == (4096, 8)
    chunks = [(p["BLOCK_R"], p["num_warps"]) for p in out[1:] if p == {**d, "BLOCK_R": p["BLOCK_R"],
                                                                          "num_warps": p["num_warps"]}]
    assert (chunks == [(8192, 16), (2048, 8)]) == tried
    assert all(base.invalid(a, p) is None for p in out)


@pytest.mark.parametrize("params", [{}, {"mode": "looped", "BLOCK_R": 128, "fold": 1},
                                    {"mode": "looped", "BLOCK_R": 64, "SPLIT": 4, "fold": 1}])
def test_a_folded_target_log_probability_keeps_rows_far_from_zero(params, runner):
    """The fold summed the coefficients of one selected sum first: x[t] + (max + log(sum)) * -1, where
    (x[t] - max) - log(sum) is exact; a row of -1e30s lost its whole loss."""
    check("var_cross_entropy_offset", "rowwise", params, runner)


def test_rows_of_8192_try_2048_wide_chunks_at_8_warps_after_4096_wide():
    """PolyNorm over 16384x8192 bf16 on an H200 (session 69): 0.1471 ms in 2048-wide chunks at 8 warps, 0.1524 in
    4096-wide at 16 (the only looped variant then), 0.1762 in one pass, torch.compile 0.1480."""
    a = analyze(str(FIXTURES / "var_poly_norm.py"), small=False)
    looped = [(p["BLOCK_R"], p["num_warps"]) for p in BY_NAME["rowwise"].variants(a) if p["mode"] == "looped"]
    assert looped == [(4096, 16), (2048, 8)]


def test_a_looped_argmax_keeps_each_lane_s_first_nan(runner):
    """The chunk loop's update is one unordered compare and a check that the lane holds no NaN yet: without that
    check, a lane's second NaN took its index."""
    source = check("var_nan_args", "rowwise", {"mode": "looped", "BLOCK_R": 64}, runner)
    assert "upd = ~(" in source
