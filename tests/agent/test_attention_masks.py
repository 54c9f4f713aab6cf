"""Hand-written attention with a mask between the product and the softmax (fixtures/attention_masks.py: 37
tokens, head size 24) lowers to one flash-attention kernel and no softmax pass, and matches the reference in
the interpreter: minGPT's masked_fill over a tril-of-ones buffer and a computed tril become the kernel's causal
form (no mask loaded), a key-padding boolean mask per batch and additive masks (over scaled scores, and under
the scale) are loaded with the mask's own (batch, heads) dims; Swin V2's per-head logit scale is folded into
the queries and its position bias and window mask, added in differently grouped views, become one mask over
(batch / windows, windows, heads). Returned weights keep the decomposition.

    python -m pytest -q tests/agent/test_attention_masks.py
"""
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import matching
from agent.templates.base import plan
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


def task_of(kind: str, folder: Path) -> Path:
    path = folder / f"attention_masks_{kind}.py"
    path.write_text((FIXTURES / "attention_masks.py").read_text().replace('kind = "mingpt"', f'kind = "{kind}"'))
    return path


@pytest.mark.parametrize("kind", ["mingpt", "tril", "padding", "left_padded", "additive", "under_scale", "swin"])
def test_masked_attention_is_one_kernel_and_matches(kind, runner, tmp_path):
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    pl = plan(a)
    assert [k.kind for k in pl.kernels].count("attention") == 1
    assert not any(n.op == "reduce" and n.fn == "max" for n in pl.program.nodes)  # no softmax outside it
    (node,) = [n for n in pl.program.nodes if n.op == "attention"]
    causal = kind in ("mingpt", "tril")
    assert node.attrs["causal"] == causal and (node.args[3] is None) == causal
    t = matching(a)[0]
    source = t.render(a, {**t.default(a), "BLOCK_N": 16})  # three key steps over 37 keys
    assert check_source(source, task.read_text()) is None
    assert ("tl.minimum(37, (pid_m + 1) * BLOCK_M)" in source) == causal
    assert ("m_ptr" in source) != causal
    out = runner.run(task, source)
    assert out["error"] is None, out["error"]
    assert out["rel_errors"] and max(out["rel_errors"]) <= 1e-5, out


def test_returned_weights_keep_the_decomposition(runner, tmp_path):
    task = task_of("weights", tmp_path)
    a = analyze(str(task), small=True)
    assert "attention" not in [k.kind for k in plan(a).kernels]
    t = matching(a)[0]
    out = runner.run(task, t.render(a, t.default(a)))
    assert out["error"] is None and len(out["rel_errors"]) == 2 and max(out["rel_errors"]) <= 1e-5, out
