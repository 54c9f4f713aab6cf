"""Shape-general GEMM kernels (issue 16): under params["shapes"] = "dynamic" a matrix product whose M, the rows of its
output, is the batch (a Linear) takes M as a run-time argument, its epilogue fused or its product a vendor
torch.addmm (the Linear's bias with it), and a row kernel after it follows the same batch. Each candidate, tuned
at batch 12, goes through the evaluator at batches 1, 7 and 33 (TaskSpec.shape_sets) in the Triton interpreter;
a GEMM that needs the batch fixed (its K, a bmm, SPLIT_K) is refused in one sentence."""
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base
from tools.results import EvalJob, TaskSpec
from tools.rules import check_source

FIXTURES = Path(__file__).resolve().parent / "fixtures"
SETS = [{"batch_size": 1}, {"batch_size": 7}, {"batch_size": 33}]
GRID = "(kw_batch + 15) // 16"  # the GEMM's row tiles at BLOCK_M 16 (one column tile: N is 45 at most)


def _analysis(name: str):
    return analyze(str(FIXTURES / f"{name}.py"), small=True, arch="cpu")


def _render(name: str, params: dict) -> str:
    analysis = _analysis(name)
    gemm = BY_NAME["gemm"]
    full = {**gemm.default(analysis), **params}
    assert base.invalid(analysis, full) is None
    source = gemm.render(analysis, full)
    assert check_source(source, (FIXTURES / f"{name}.py").read_text()) is None  # the grids stay host code
    return source


@pytest.fixture(scope="module")
def candidates():
    dynamic = {"shapes": "dynamic", "BLOCK_M": 16}
    return {"gelu": ("shapes_linear_gelu", _render("shapes_linear_gelu", dynamic)),
            "vendor": ("shapes_linear_gelu", _render("shapes_linear_gelu", {**dynamic, "impl": "torch"})),
            "rows": ("shapes_linear_logsumexp", _render("shapes_linear_logsumexp", dynamic)),
            "chain": ("shapes_mlp_chain", _render("shapes_mlp_chain", dynamic)),
            "chain_vendor": ("shapes_mlp_chain", _render("shapes_mlp_chain", {**dynamic, "impl": "torch"})),
            "static": ("shapes_linear_gelu", _render("shapes_linear_gelu", {"BLOCK_M": 16}))}


@pytest.fixture(scope="module")
def results(candidates, warm_executor):
    name, gelu = candidates["gelu"]
    baked = gelu.replace(GRID, "(12 + 15) // 16")  # the row tiles of the tuned batch only
    sources = [(n, s) for n, s in candidates.values()] + [(name, baked)]
    jobs = [EvalJob(TaskSpec(str(FIXTURES / f"{n}.py"), shape_sets=SETS), s, trials=1, profile=False)
            for n, s in sources]
    return dict(zip(list(candidates) + ["baked"], warm_executor.map(jobs)))


def test_a_dynamic_gemm_takes_its_rows_at_call_time(candidates):
    _, gelu = candidates["gelu"]
    assert "num_m = tl.cdiv(n0, BLOCK_M)" in gelu and "mask = (rm < n0) & (rn < 23)" in gelu
    assert "(rm1[:, None] < n0)" in gelu  # the rows of A are masked even where the tuned M fills its tiles
    assert f"[({GRID}, 1, 1,)]" in gelu and "torch.empty((kw_batch, 23)" in gelu
    assert "x.dim() != 2 or tuple(x.shape[1:]) != (19,)" in gelu  # the guard: rank and in_features only
    _, vendor = candidates["vendor"]
    assert "= torch.addmm(w_linear_bias, x, " in vendor and "n0 * 23" in vendor  # follows x; the epilogue: n0
    _, rows = candidates["rows"]
    assert rows.count(", n0, BLOCK_") == 2  # the GEMM and the softmax/logsumexp row kernel after it
    _, chain = candidates["chain_vendor"]  # addmm reads the sigmoid's buffer through a view of the call's batch
    assert "torch.addmm(w_first_bias, buf_v2.as_strided((kw_batch, 20,), (20, 1), 0), " in chain
    _, static = candidates["static"]
    assert "n0" not in static and "kw_batch" not in static


@pytest.mark.parametrize("name", ["gelu", "vendor", "rows", "chain", "chain_vendor"])
def test_a_dynamic_gemm_tuned_at_one_batch_is_right_at_others(results, name):
    r = results[name]
    assert r.verdict == "correct", r.reason
    assert [c.shapes for c in r.shapes] == [{"batch_size": 12}] + SETS
    assert all(c.verdict == "correct" and not c.fallback for c in r.shapes), [c.reason for c in r.shapes]


def test_a_static_gemm_takes_its_fallback_and_a_baked_grid_is_wrong(results):
    static = results["static"]
    assert static.verdict == "rejected" and all(c.fallback for c in static.shapes[1:]), static.reason
    baked = results["baked"]  # one tile of 16 rows: right up to batch 16, rows left unwritten at 33
    assert baked.verdict == "incorrect" and baked.reason.startswith("At batch_size=33:"), baked.reason
    assert [c.verdict for c in baked.shapes] == ["correct", "correct", "correct", "incorrect"]


def test_a_gemm_that_needs_the_batch_fixed_is_refused():
    gemm = BY_NAME["gemm"]
    cases = [("shapes_gemm_over_batch", {}, "is a GEMM whose batch is not its M"),
             ("tpl_bmm", {}, "is a batched GEMM (bmm), which takes only static shapes"),
             ("shapes_linear_gelu", {"SPLIT_K": 2}, "splits its GEMM's K over programs (SPLIT_K)")]
    for name, params, said in cases:
        analysis = _analysis(name)
        full = {**gemm.default(analysis), **params}
        assert base.invalid(analysis, full) is None  # static: fine
        reason = base.invalid(analysis, {**full, "shapes": "dynamic"})
        assert reason and reason.startswith("shapes='dynamic': in kernel 0, ") and said in reason, (name, reason)
