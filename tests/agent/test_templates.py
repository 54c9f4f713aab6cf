"""The templates on small fixture tasks, run in the Triton interpreter: every family's default and
structural variants match the reference, the pointwise generator handles chains it has never seen, and a
candidate passes the real evaluator (no torch compute, correct on every trial).

Candidates run in one interpreter subprocess (fixtures/tpl_runner.py): TRITON_INTERPRET must be set before
triton is first imported, which other test modules may already have done in this process."""
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base, matching, unsupported_reason
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


def check(task: str, template: str, params: dict, runner) -> str:
    a = analyze(str(FIXTURES / f"{task}.py"), small=True)
    t = BY_NAME[template]
    source = t.render(a, {**t.default(a), **params})
    assert check_source(source, (FIXTURES / f"{task}.py").read_text()) is None
    assert "class ModelNew(Model)" in source and "@triton.jit" in source
    out = runner.run(FIXTURES / f"{task}.py", source)
    assert out["error"] is None, out["error"]
    assert all(e <= 1e-4 for e in out["rel_errors"]) and all(out["exact"]), out
    return source


FAMILIES = [  # (fixture, template that must claim it)
    ("tpl_chain_tanh_sigmoid", "elementwise"), ("tpl_softmax_epilogue", "rowwise"), ("tpl_norms", "rowwise"),
    ("tpl_group_norm", "rowwise"), ("tpl_batch_norm_train", "rowwise"), ("tpl_losses", "rowwise"),
    ("tpl_matvec", "rowwise"), ("tpl_reduce_middle", "axis_reduce"), ("tpl_argmin_middle", "axis_reduce"),
    ("tpl_scans", "scan"), ("tpl_pooling", "pooling"), ("tpl_depthwise", "pooling"),
    ("tpl_gemm_epilogue", "gemm"), ("tpl_bmm", "gemm"), ("tpl_matmul", "gemm"),
]


@pytest.mark.parametrize("task, template", FAMILIES)
def test_family_default_and_variants_match_the_reference(task, template, runner):
    a = analyze(str(FIXTURES / f"{task}.py"), small=True)
    assert template in [t.NAME for t in matching(a)]
    t = BY_NAME[template]
    variants = t.variants(a)
    assert variants[0] == t.default(a) and base.invalid(a, variants[0]) is None
    space = t.space(a)
    assert set(variants[0]) <= set(space)
    for params in variants:
        check(task, template, params, runner)


@pytest.mark.parametrize("task", ["tpl_chain_tanh_sigmoid", "tpl_chain_where_bias", "tpl_chain_views",
                                  "tpl_chain_mixed"])
def test_unseen_pointwise_chains_become_one_pass(task, runner):
    """Broadcast operands, parameters, constants, masks, strided and flipped inputs, reshapes and several
    outputs: one flat kernel reading each input once."""
    source = check(task, "elementwise", {}, runner)
    assert source.count("_flat_kernel0[(") == 1 and "_kernel1" not in source  # one kernel, one launch


@pytest.mark.parametrize("task, template, params", [
    ("tpl_softmax_epilogue", "rowwise", {"mode": "looped", "BLOCK_R": 128, "BLOCK_O": 2, "online": 1}),
    ("tpl_softmax_epilogue", "rowwise", {"mode": "looped", "BLOCK_R": 128, "online": 0, "num_warps": 2}),
    ("tpl_softmax_epilogue", "rowwise", {"mode": "looped", "BLOCK_R": 128, "online": 1, "tail_first": 1}),
    ("tpl_norms", "rowwise", {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 4}),
    ("tpl_norms", "rowwise", {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 2, "tail_first": 0}),
    ("tpl_losses", "rowwise", {"mode": "looped", "BLOCK_R": 8, "BLOCK_O": 2}),
    ("tpl_matvec", "rowwise", {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 4}),
    ("tpl_reduce_middle", "axis_reduce", {"BLOCK_R": 4, "BLOCK_I": 16}),
    ("tpl_argmin_middle", "axis_reduce", {"BLOCK_R": 2, "BLOCK_I": 16}),
    ("tpl_scans", "scan", {"mode": "looped", "BLOCK_R": 32, "BLOCK_O": 2}),
    ("tpl_gemm_epilogue", "gemm", {"SPLIT_K": 3, "BLOCK_K": 16, "BLOCK_M": 16, "GROUP_M": 1}),
    ("tpl_bmm", "gemm", {"SPLIT_K": 2, "BLOCK_K": 16}),
    ("tpl_gemm_epilogue", "gemm", {"impl": "torch"}),
])
def test_structural_choices(task, template, params, runner):
    source = check(task, template, params, runner)
    if params.get("impl") == "torch":
        # the Linear's own bias goes with the product into the vendor addmm (rounded once, as PyTorch's Linear)
        assert "KERNELWRIGHT_TORCH_OPS = ['aten.addmm']" in source and "torch.addmm(w_fc_bias, " in source
    if "tail_first" in params:  # the writing pass walks the row's chunks from the last one, or in order
        assert ("for it in range(" in source) == bool(params["tail_first"]) and "for r0 in range(" in source
    if params.get("SPLIT_K", 1) > 1:  # partial products, then their sum with the epilogue
        assert "_gemm_kernel0[(" in source and "_col_kernel1[(" in source


def test_evict_keeps_the_walked_input_in_l2_and_leaves_broadcasts_and_stores_alone(runner):
    """A flat kernel's `evict` (elementwise.variants): the tensor it walks is loaded evict_last; a per-channel
    parameter and a broadcast row, read again and again, and the output keep no hint; the result is the same."""
    source = check("tpl_chain_where_bias", "elementwise", {"evict": 1}, runner)
    loads = [line for line in source.splitlines() if "tl.load(" in line]
    walked = [line for line in loads if "+ offs," in line]
    assert len(walked) == 1 and 'eviction_policy="evict_last"' in walked[0]
    assert len(loads) == 3 and all("eviction_policy" not in line for line in loads if line not in walked)
    assert "tl.store(" in source and all("eviction_policy" not in line for line in source.splitlines()
                                         if "tl.store(" in line)
    plain = check("tpl_chain_where_bias", "elementwise", {"evict": 0}, runner)
    assert "eviction_policy" not in plain
    again = check("tpl_chain_where_bias", "elementwise", {"evict": 2}, runner)  # the operands read again
    loads = [line for line in again.splitlines() if "tl.load(" in line]
    assert [('eviction_policy="evict_last"' in line) for line in loads] == [("+ offs," not in line) for line in loads]
    assert again.count("eviction_policy") == 2


ROPE = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x, cos, sin):
        return x * cos + torch.cat((-x[..., 64:], x[..., :64]), dim=-1) * sin


def get_inputs():
    return [torch.randn(1, 8, {tokens}, 128), torch.randn({tokens}, 128), torch.randn({tokens}, 128)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("tokens, hint", [(512, 2), (32, 1)])
def test_broadcast_operands_read_again_try_their_own_hint_second(tokens, hint, tmp_path):
    """elementwise.variants: where a flat kernel reads broadcast operands of REREAD_BYTES or more again along its
    walk (RoPE's cos and sin, 256 KB each over 512 positions in fp32), the second variant loads them evict_last
    (evict 2); with 16 KB of them, the tensor walked (evict 1)."""
    task = tmp_path / "rope.py"
    task.write_text(ROPE.format(tokens=tokens))
    a = analyze(str(task), small=False)
    out = BY_NAME["elementwise"].variants(a)
    assert out[1] == {**out[0], "evict": hint}


def test_split_rows_for_a_full_reduction(runner):
    """A loss over every element: SPLIT programs each write a partial sum, a combine kernel finishes."""
    source = check("tpl_mse", "rowwise", {"mode": "looped", "BLOCK_R": 128, "SPLIT": 8}, runner)
    assert "_row_kernel0_final[(" in source and "pid_s" in source


ROWS_OF = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn({rows}, 131072)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("body, rows, split", [
    ("x.sum(1, keepdim=True)", 200, True), ("x.sum(1, keepdim=True)", 300, False),  # 2 rows an SM, 8 warps each
    ("torch.softmax(x, 1)", 300, True), ("torch.softmax(x, 1)", 600, False),  # rows written back: 4 an SM
])
def test_long_rows_split_over_programs_only_where_too_few_fill_the_gpu(body, rows, split, tmp_path):
    """split_below: a kernel that only reduces its rows keeps a row a program from 2 rows an SM (level 2's 15's
    statistics on an H200: 0.4875 ms unsplit, 0.530 split in 4); one that writes them back, from 4."""
    task = tmp_path / "rows.py"
    task.write_text(ROWS_OF.format(body=body, rows=rows))
    a = analyze(str(task), small=False)
    assert (BY_NAME["rowwise"].default(a).get("SPLIT", 1) > 1) == split


def test_full_shapes_render_without_memory_and_index_in_64_bits():
    a = analyze(str(FIXTURES / "tpl_chain_tanh_sigmoid.py"), small=False, shapes={"rows": 65536, "cols": 40000})
    source = BY_NAME["elementwise"].render(a, BY_NAME["elementwise"].default(a))
    assert "tl.int64" in source and "(65536, 40000)" in source


def test_invalid_configurations_are_refused():
    a = analyze(str(FIXTURES / "tpl_softmax_param.py"), small=False, shapes={"dim": 70000})
    t = BY_NAME["rowwise"]
    bad = {**t.default(a), "mode": "one_pass"}
    assert base.invalid(a, bad)
    with pytest.raises(ValueError, match="registers"):
        t.render(a, bad)


def test_a_one_pass_row_may_hold_128_elements_a_thread():
    """A 16K-wide row over 4 warps (the fastest softmax measured on an H200) is allowed; over 2 warps it is
    256 a thread and refused, and a looped chunk keeps the general bound of 64."""
    a = analyze(str(FIXTURES / "tpl_softmax_param.py"), small=False, shapes={"dim": 16384})
    one_pass = {**BY_NAME["rowwise"].default(a), "mode": "one_pass", "BLOCK_O": 1}
    assert base.invalid(a, {**one_pass, "num_warps": 4}) is None
    assert "spill" in base.invalid(a, {**one_pass, "num_warps": 2})
    assert "spill" in base.invalid(a, {**one_pass, "mode": "looped", "BLOCK_R": 16384, "num_warps": 4})


def test_long_forward_scans_hold_their_row_and_long_reversed_ones_loop():
    """On an H200, over rows of 32768 fp32: a forward running sum held in registers at 16 warps ran 2.049 ms
    against 2.113 in chunks (KernelBench's 92, rewritten); a reversed one 2.709 against 2.164 (91)."""
    scan = BY_NAME["scan"]
    forward = analyze(str(FIXTURES / "low_cat_exclusive.py"), small=False, shapes={"cols": 32768})
    assert scan.default(forward) == {"mode": "one_pass", "BLOCK_O": 1, "BLOCK_R": 32768, "num_warps": 16,
                                     "num_stages": 1}
    assert scan.variants(forward)[1]["mode"] == "looped"
    narrower = analyze(str(FIXTURES / "low_cat_exclusive.py"), small=False, shapes={"cols": 8192})
    assert scan.default(narrower)["num_warps"] == 4  # 64 elements a thread, as at 32768
    reversed_ = analyze(str(FIXTURES / "tpl_scans.py"), small=False, shapes={"length": 32768})
    assert scan.default(reversed_)["mode"] == "looped" and scan.variants(reversed_)[1]["mode"] == "one_pass"


def test_unsupported_tasks_say_why():
    a = analyze(str(FIXTURES / "tpl_unsupported.py"), small=True)
    assert matching(a) == []
    assert unsupported_reason(a) == \
        "The forward computes aten._fft_r2c.default on complex numbers, which the templates do not build."


@pytest.mark.slow
def test_candidates_pass_the_evaluator(warm_executor):
    """Through the real sandboxed evaluator: correct on every trial, no PyTorch compute (the torch GEMM
    variant keeps only its declared aten.addmm)."""
    from tools.results import EvalJob, TaskSpec
    for task, template, params in [("tpl_chain_where_bias", "elementwise", {}), ("tpl_losses", "rowwise", {}),
                                   ("tpl_gemm_epilogue", "gemm", {"impl": "torch"})]:
        a = analyze(str(FIXTURES / f"{task}.py"), small=True)
        t = BY_NAME[template]
        source = t.render(a, {**t.default(a), **params})
        result = warm_executor.submit(EvalJob(TaskSpec(path=str(FIXTURES / f"{task}.py"), small=True), source,
                                              trials=2, profile=False, timeout_s=120)).result()
        assert result.verdict == "correct", (task, result.reason)
        assert result.torch_ops == ([] if params.get("impl") != "torch" else ["aten.addmm"])
