"""agent/analysis.py on small fixture tasks: what it traces, counts and concludes."""
import json
from pathlib import Path

import pytest

from agent.analysis import TraceError, analyze, load_task
from agent.templates import unsupported_reason

FIXTURES = Path(__file__).parent / "fixtures"


def fixture(name: str) -> str:
    return str(FIXTURES / f"{name}.py")


@pytest.mark.parametrize("name, family", [
    ("tpl_chain_tanh_sigmoid", "elementwise"),
    ("tpl_chain_where_bias", "elementwise"),
    ("tpl_softmax_epilogue", "softmax"),
    ("tpl_norms", "norm"),
    ("tpl_group_norm", "norm"),
    ("tpl_reduce_middle", "reduction"),
    ("tpl_argmin_middle", "argreduce"),
    ("tpl_scans", "scan"),
    ("tpl_pooling", "pooling"),
    ("tpl_losses", "loss"),
    ("tpl_matvec", "matvec"),
    ("tpl_bmm", "gemm_epilogue"),
    ("tpl_matmul", "matmul"),
    ("tpl_gemm_epilogue", "gemm_epilogue"),
    ("tpl_depthwise", "conv"),
])
def test_family_guess(name, family):
    assert analyze(fixture(name), small=True).family == family


def test_ops_shapes_axes_and_chains():
    a = analyze(fixture("tpl_softmax_epilogue"), small=True)
    targets = [o.target for o in a.ops]
    assert targets.index("aten._softmax.default") < targets.index("aten.gelu.default")
    softmax = next(o for o in a.ops if o.target == "aten._softmax.default")
    assert softmax.shape == [9, 300] and softmax.dtype == "float32" and softmax.axes == [1]
    assert a.reduction_axes == [[1], [1]]  # the softmax and the log-softmax
    chains = [set(c) for c in a.fusable_chains]
    gelu = next(o.name for o in a.ops if o.target == "aten.gelu.default")
    assert any(gelu in c and len(c) >= 3 for c in chains)  # mul, gelu, add fuse into one pass
    assert [t.shape for t in a.inputs] == [[9, 300]] and [t.shape for t in a.params] == [[300]]
    assert a.outputs[0].shape == [9, 300]


def test_flops_bytes_and_roofline_at_full_shapes_without_memory():
    # full shapes are traced on the meta device: a (8192 x 8192) GEMM costs nothing here
    src = (FIXTURES / "tpl_bmm.py").read_text()
    a = analyze(src, small=False, shapes={"b": 4, "m": 2048, "k": 2048, "n": 2048})
    bmm = next(o for o in a.ops if "bmm" in o.target)
    assert bmm.flops == 2 * 4 * 2048 * 2048 * 2048
    assert a.dominant_flops_op == bmm.name
    assert a.min_bytes == 3 * 4 * 2048 * 2048 * 4  # two inputs and one output, fp32, each once
    assert a.roofline == "compute" and a.intensity > a.ridge
    assert a.floor_s == pytest.approx(a.total_flops / 51e12)

    e = analyze(fixture("tpl_chain_tanh_sigmoid"), small=False, shapes={"rows": 4096, "cols": 4096})
    assert e.roofline == "memory" and e.intensity < 1
    assert e.min_bytes == (2 * 4096 * 4096 + 4096) * 4
    assert e.dominant_bytes_op is not None


def test_small_shapes_and_overrides_apply():
    a = analyze(fixture("tpl_softmax_param"), small=True)
    assert a.inputs[0].shape == [128, 96] and a.shapes == {"batch": 128, "dim": 96}
    b = analyze(fixture("tpl_softmax_param"), small=False, shapes={"dim": 50})
    assert b.inputs[0].shape == [128, 50] and b.small is False
    with pytest.raises(ValueError, match="not a global"):
        load_task(fixture("tpl_softmax_param"), small=False, shapes={"nope": 3})


def test_to_json_is_plain_and_complete():
    a = analyze((FIXTURES / "tpl_losses.py").read_text(), small=True, name="losses")
    data = json.loads(json.dumps(a.to_json()))
    assert data["name"] == "losses" and data["family"] == "loss" and data["roofline"] in ("memory", "compute")
    assert {"ops", "total_flops", "min_bytes", "fusable_chains", "reduction_axes", "shapes"} <= set(data)
    assert "module" not in data and "source" not in data
    assert all({"target", "shape", "dtype", "flops", "bytes"} <= set(op) for op in data["ops"])


def test_a_mixture_of_experts_dispatched_by_token_lists_is_refused_for_its_sizes():
    """A top-1 router whose experts take the tokens torch.where picks, which branches on their count: traced on
    real tensors, the lists have this input's sizes, and the refusal said no template lowers aten.nonzero."""
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        self.router = nn.Linear(6, 3)\n"
              "        self.experts = nn.ModuleList([nn.Linear(6, 6) for _ in range(3)])\n\n"
              "    def forward(self, x):\n        pick = self.router(x).argmax(-1)\n        out = torch.zeros_like(x)\n"
              "        for e, expert in enumerate(self.experts):\n            (tok,) = torch.where(pick == e)\n"
              "            if tok.numel():\n                out.index_add_(0, tok, expert(x[tok]))\n        return out\n\n\n"
              "def get_inputs():\n    return [torch.randn(10, 6)]\n\n\ndef get_init_inputs():\n    return []\n")
    try:
        said = unsupported_reason(analyze(source, small=True))
    except TraceError as e:
        said = str(e)
    assert said == ("The forward makes a tensor whose size depends on its input's values (aten.nonzero.default), "
                    "which a kernel of fixed shapes cannot compute.")


def test_rejects_a_file_without_the_kernelbench_names():
    with pytest.raises(ValueError, match="get_inputs"):
        analyze("import torch\nclass Model: pass\n", small=True)


@pytest.mark.parametrize("call, op", [("torch.bincount(i, minlength=10)", "aten.bincount.default"),
                                      ("torch.unique(i, return_counts=True)[1]", "aten._unique2.default")])
def test_a_size_that_depends_on_input_values_is_refused_in_a_sentence(call, op):
    """unique's op returns a tuple: the sentence named the getitem after it (<built-in function getitem>)."""
    source = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, i):\n"
              f"        return {call}\n\n\ndef get_inputs():\n"
              "    return [torch.randint(0, 10, (50,))]\n\n\ndef get_init_inputs():\n    return []\n")
    with pytest.raises(TraceError) as caught:
        analyze(source, small=True)
    said = str(caught.value)
    assert said == (f"The forward makes a tensor whose size depends on its input's values ({op}), "
                    "which a kernel of fixed shapes cannot compute.")
