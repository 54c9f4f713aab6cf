"""Memory discipline of the evaluator: a whole evaluation (load, verify, profile) holds at most three times the
task's own footprint (inputs, outputs, parameters) plus the L2 flush buffer, and comparisons walk outputs in
pieces with the same verdicts and figures as a comparison of whole tensors."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tools.verify import TOLERANCES, Checked, Failed, _pieces, compare

ROOT = Path(__file__).parents[2]
FIXTURES = Path(__file__).parent / "fixtures"
PIECE_ALLOWANCE = 8 << 20  # float64 temporaries of a comparison's smallest pieces (MIN_PIECE elements)


def probe(tmp_path: Path, shapes: dict) -> dict:
    """One evaluation of the affine task in a fresh process (tests/tools/memory_probe.py): its peak and footprint."""
    cache = Path(os.environ["KERNELWRIGHT_CACHE"]) / "triton"
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_CACHE_DIR=str(cache))
    if not torch.cuda.is_available():
        env["TRITON_INTERPRET"] = "1"
    task, candidate = FIXTURES / "task_affine.py", FIXTURES / "candidates" / "affine.py"
    run = subprocess.run([sys.executable, str(Path(__file__).parent / "memory_probe.py"), str(task), str(candidate),
                          json.dumps(shapes)],
                         capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_an_evaluation_holds_at_most_three_footprints(tmp_path):
    got = probe(tmp_path, {"rows": 512, "cols": 2048})  # 4 MiB in, 4 MiB out
    assert got["verdict"] == "correct", got["reason"]
    assert got["footprint"] > 8 << 20 and got["flush"] == 0
    # Before: a device clone of every input, three outputs alive at once and float64 copies of whole outputs
    # in the comparison took the peak past 11 footprints.
    assert got["peak"] <= 3 * got["footprint"] + PIECE_ALLOWANCE, got


@pytest.mark.gpu
def test_an_evaluation_holds_at_most_three_footprints_on_a_gpu(tmp_path):
    got = probe(tmp_path, {"rows": 1 << 16, "cols": 4096})  # 1 GiB in, 1 GiB out
    assert got["verdict"] == "correct", got["reason"]
    assert 0 < got["flush"] <= 256 << 20
    assert got["peak"] <= 3 * got["footprint"] + got["flush"] + PIECE_ALLOWANCE, got


def reference_figures(y: torch.Tensor, r: torch.Tensor) -> tuple[float, float]:
    """max abs error and relative error norm computed on whole tensors, as the evaluator did before pieces."""
    y64, r64 = y.double(), r.double()
    finite = torch.isfinite(r64)
    diff = (y64[finite] - r64[finite]).abs()
    return diff.max().item(), (diff.norm() / r64[finite].norm()).item()


@pytest.mark.parametrize("shape", [(3, 70001), (300, 1000), (5, 7, 4099), (131072 * 3 + 5,), ()])
def test_pieces_cover_every_element_once_in_order(shape):
    x = torch.randn(shape)
    for t in (x, x.t() if x.dim() == 2 else x, x[..., ::2] if x.dim() else x):
        got = [a for a, _ in _pieces(t, t)]
        assert torch.equal(torch.cat(got), t.reshape(-1))
        assert len(got) == 1 or max(a.numel() for a in got) < t.numel()


def test_piecewise_comparison_gives_the_whole_tensor_figures():
    torch.manual_seed(0)
    r = torch.randn(700, 3001)
    y = r + 1e-4 * torch.randn_like(r)
    r[5, 7], y[5, 7] = float("inf"), float("inf")  # a non-finite element the candidate matches
    r[9, 9], y[9, 9] = float("nan"), float("nan")
    checked = Checked()
    compare(y.t().contiguous().t(), r, (1e-3, 1e-3, 1e-3), checked)  # a non-contiguous output
    max_err, rel = reference_figures(y, r)
    assert checked.max_abs_err == pytest.approx(max_err) and checked.rel_err == pytest.approx(rel, rel=1e-9)
    with pytest.raises(Failed, match="relative error"):
        compare(y, r, TOLERANCES[torch.float32], Checked())


def test_piecewise_comparison_catches_one_bad_element_anywhere():
    r = torch.randn(400, 2000)
    for index, value, what in [((399, 1999), float("nan"), "1 NaN or Inf"), ((0, 0), 1e3, "1 of 800000 elements"),
                               ((200, 5), float("-inf"), "1 NaN or Inf")]:
        y = r.clone()
        y[index] = value
        with pytest.raises(Failed, match=what):
            compare(y, r, TOLERANCES[torch.float32], Checked())
    y = r.clone()
    y[3, 3], r[3, 3] = float("inf"), float("-inf")  # non-finite in both, but not the same
    with pytest.raises(Failed, match="differs from the reference at 1 elements where the reference is NaN"):
        compare(y, r, TOLERANCES[torch.float32], Checked())
    y[3, 3], y[7, 7], r[7, 7] = float("-inf"), 1.0, float("nan")  # finite where the reference is not: it said
    with pytest.raises(Failed, match="at 1 elements where the reference is NaN"):  # "0 NaN or Inf elements"
        compare(y, r, TOLERANCES[torch.float32], Checked())
    ints = torch.arange(300000)
    with pytest.raises(Failed, match="in 1 of 300000 elements"):
        compare(torch.where(ints == 299999, 0, ints), ints, TOLERANCES[torch.float32], Checked())


def test_large_inputs_are_checked_for_mutation_by_a_hash_not_a_copy(monkeypatch):
    from tools import verify
    x = torch.randn(300, 1000)
    monkeypatch.setattr(verify, "HASH_ABOVE_BYTES", x.numel() * x.element_size() - 1)
    snapshot = verify._snapshot([x, 3])
    assert isinstance(snapshot[0], verify.BitsHash) and snapshot[1] == 3  # no tensor of the input's size held
    verify._check_unchanged([x, 3], snapshot, "mutates-input")
    x[299, 999] = torch.nextafter(x[299, 999], torch.tensor(float("inf")))  # the last element, by one ulp
    with pytest.raises(Failed, match="modified its input 0"):
        verify._check_unchanged([x, 3], snapshot, "mutates-input")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool])
def test_the_input_hash_sees_any_changed_bit(dtype):
    from tools.verify import BitsHash
    x = (torch.randn(70, 1001) * 5).to(dtype)
    view = x.t()  # a strided input is hashed in the order of its elements, as the copy was compared
    first = BitsHash(view, key=12345)
    assert first.matches(view) and BitsHash(view, key=12346).sums != first.sums
    for flip in (0, 7, x.element_size() * 8 - 1):  # lowest bit, a middle one, the sign (a bool's only bit: 0)
        changed = x.clone()
        bits = changed.view(-1)[35035:35036].view(torch.uint8)
        bits[flip // 8] ^= 1 << (flip % 8) if dtype != torch.bool else 1
        assert not first.matches(changed.t()), (dtype, flip)
    assert not first.matches(view.contiguous().view(70, 1001))  # the same bits in another shape
