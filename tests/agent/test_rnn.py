"""Recurrent layers in the interpreter: LSTM (two layers, bidirectional, batch-first, all three outputs), GRU
(batch second, bidirectional), tanh and ReLU RNNs with and without biases, each lowered whole (one graph node)
and matching the reference at small irregular sizes, in both forms: one persistent launch stepping through time
(the default) and a step kernel the host launches per time step."""
import time
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, matching, unsupported_reason
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn_tanh", "rnn_relu"])
def test_recurrent_layers_match_the_reference(kind, runner, tmp_path):
    task = tmp_path / f"rnn_{kind}.py"  # a candidate embeds its task's source: set the kind in it
    task.write_text((FIXTURES / "rnn_kinds.py").read_text().replace('kind = "lstm"', f'kind = "{kind}"'))
    a = analyze(str(task), small=True)
    assert [o.target for o in a.ops if o.kind == "recurrent"] == [f"kernelwright.{kind}.default"]  # one node
    assert a.family == "recurrent" and a.total_flops > 0
    assert "rnn" in [t.NAME for t in matching(a)]
    t = BY_NAME["rnn"]
    persistent, stepped = t.default(a), t.variants(a)[2]
    for params, loop in ((persistent, "    for s in range(T):"), (stepped, "        for s in range(5):")):
        source = t.render(a, params)
        assert check_source(source, task.read_text()) is None and loop in source
        out = runner.run(task, source)
        assert out["error"] is None, out["error"]
        assert len(out["rel_errors"]) == (3 if kind == "lstm" else 2)
        assert all(e <= 1e-5 for e in out["rel_errors"]), out


def _rnn_task(tmp_path, kind: str, sizes: str = "", layers: int = 2):
    """The fixture at `kind`, its sizes line replaced by `sizes` and its stacked layers by `layers`."""
    source = (FIXTURES / "rnn_kinds.py").read_text().replace('kind = "lstm"', f'kind = "{kind}"')
    if sizes:
        source = source.replace("steps, batch, features, hidden = 5, 3, 7, 6", sizes)
    task = tmp_path / f"rnn_{kind}_{layers}.py"
    task.write_text(source.replace("hidden, 2, ", f"hidden, {layers}, "))
    return task


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_the_persistent_form_over_three_bidirectional_layers(kind, runner, tmp_path):
    """Three layers at an even number of steps: the layers above the first compute their input products ahead,
    in the order the layer below stores its times (both halves of the sequence), into two layers' slots that the
    third layer reuses; 20 hidden units, not a power of two. The interpreter runs a layer-direction as one
    program, a GPU as several that wait for each other, so the launch is cooperative there."""
    task = _rnn_task(tmp_path, kind, "steps, batch, features, hidden = 6, 3, 7, 20", layers=3)
    a = analyze(str(task), small=True)
    t = BY_NAME["rnn"]
    candidate = t.render(a, t.default(a))
    assert "for k in range((T + 1) // 2):" in candidate  # the input products ahead
    assert "launch_cooperative_grid=x.is_cuda" in candidate and "if x.is_cuda else 1" in candidate
    out = runner.run(task, candidate)
    assert out["error"] is None and all(e <= 1e-5 for e in out["rel_errors"]), out


def test_a_batch_larger_than_a_block_gets_programs_of_its_own(runner, tmp_path):
    """37 batch rows in blocks of 16 (the last one short): each block's recurrence runs apart, with counters of
    its own."""
    task = _rnn_task(tmp_path, "gru", "steps, batch, features, hidden = 4, 37, 5, 9")
    a = analyze(str(task), small=True)
    t = BY_NAME["rnn"]
    candidate = t.render(a, {**t.default(a), "BLOCK_B": 16})
    assert "NB=3, BLOCK_B=16" in candidate
    out = runner.run(task, candidate)
    assert out["error"] is None and all(e <= 1e-5 for e in out["rel_errors"]), out


@pytest.mark.parametrize("bidirectional, slices, units, warps, stages", [
    (False, 16, 16, 4, 3), (True, 8, 32, 8, 3), (True, 8, 32, 8, 1)])
def test_the_persistent_kernels_shared_memory_is_known_before_it_compiles(bidirectional, slices, units, warps, stages,
                                                                           tmp_path, sm90):
    """Level 3's LSTMs (6 layers, 256 hidden, batch 10) at the default's slices: compiled for sm_90, the kernel
    asks the shared memory rnn_persistent.shared_bytes says, within a block's. 4 slices of 64 units would ask
    278,528 bytes, which an H100 refused at launch: the template refuses them in a sentence instead."""
    from agent.templates.codegen import SMEM_BYTES
    from agent.templates.rnn_persistent import shared_bytes
    task = _rnn_task(tmp_path, "lstm", "steps, batch, features, hidden = 4, 10, 128, 256", layers=6)
    if not bidirectional:
        task.write_text(task.read_text().replace("batch_first=True, bidirectional=True", "batch_first=True"))
    a = analyze(str(task), small=True)
    t = BY_NAME["rnn"]
    (tmp_path / "cand.py").write_text(t.render(a, {**t.default(a), "num_stages": stages}))
    ints = ("x_off", "x_t", "x_b", "x_col", "h0_off", "c0_off", "out_off", "out_t", "out_b", "IN")
    consts = {"S": slices, "BLOCK_H": units, "H": 256, "T": 4, "NB": 1, "BLOCK_B": 16, "BLOCK_K": 64}
    kernel = sm90(tmp_path / "cand.py", "_rnn_kernel0", consts, num_warps=warps, num_stages=stages, ints=ints)
    assert kernel.metadata.shared == shared_bytes(16, 64, 4 * units, stages) <= SMEM_BYTES
    with pytest.raises(ValueError, match="would take 278528 bytes of shared memory a program"):
        t.render(a, {**t.default(a), "SLICES": 4})


@pytest.mark.gpu
@pytest.mark.parametrize("kind, layers", [("lstm", 3), ("gru", 3), ("rnn_tanh", 1)])
def test_the_persistent_form_on_a_gpu_where_slices_wait_for_each_other(kind, layers, tmp_path, on_gpu):
    """On a GPU a layer-direction is several programs (40 hidden units: two slices of 32), and every call starts
    its counters afresh: the output matches the reference call after call."""
    import torch
    task = _rnn_task(tmp_path, kind, "steps, batch, features, hidden = 9, 3, 7, 40", layers)
    a = analyze(str(task), small=True)
    t = BY_NAME["rnn"]
    model, new, inputs = on_gpu(t.render(a, t.default(a)), tmp_path, "rnn_candidate")
    with torch.no_grad():
        want = model(*inputs)
        for _ in range(3):
            for got, ref in zip(new(*inputs), want):
                assert torch.allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_a_long_sequence_traces_as_one_op():
    """Per-step decomposition took minutes for hundreds of steps; kept whole it takes a moment."""
    start = time.monotonic()
    a = analyze(str(FIXTURES / "rnn_kinds.py"), small=False, shapes={"steps": 2048, "hidden": 512})
    assert time.monotonic() - start < 20
    assert sum(1 for o in a.ops if o.kind == "recurrent") == 1


@pytest.mark.parametrize("kind", ["lstm", "gru"])
def test_layers_called_without_an_initial_state_start_from_zeros(kind, runner, tmp_path):
    """No h0 (nor c0): PyTorch starts from zeros, a constant the candidate fills a state buffer with; it
    rendered an empty argument before."""
    task = tmp_path / f"rnn_{kind}_zeros.py"
    source = (FIXTURES / "rnn_kinds.py").read_text().replace('kind = "lstm"', f'kind = "{kind}"')
    task.write_text(source.replace("self.rnn(x, (h0, c0))", "self.rnn(x)").replace("self.rnn(x, h0)", "self.rnn(x)"))
    a = analyze(str(task), small=True)
    t = BY_NAME["rnn"]
    candidate = t.render(a, t.default(a))
    assert ".fill_(0)" in candidate and check_source(candidate, task.read_text()) is None
    out = runner.run(task, candidate)
    assert out["error"] is None and all(e <= 1e-5 for e in out["rel_errors"]), out


def test_an_lstm_with_a_projection_is_refused_in_a_sentence(tmp_path):
    """proj_size adds a fifth weight per layer (weight_hr) and narrows h: the kernel read the next layer's weights
    in its place and gave a wrong sequence, where it now says what it does not compute."""
    task = tmp_path / "rnn_proj.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n"
                    "        self.rnn = nn.LSTM(5, 6, 2, batch_first=True, proj_size=3)\n\n"
                    "    def forward(self, x):\n        return self.rnn(x)[0]\n\n\n"
                    "def get_inputs():\n    return [torch.randn(2, 4, 5)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    a = analyze(str(task), small=True)
    assert unsupported_reason(a) == ("The LSTM projects its hidden state (proj_size), which the recurrent kernel "
                                     "does not compute.")
