"""A column reduction's reduced axis split over programs (kernels._col_split): its partials and their combine,
against the reference in the interpreter, and what the split refuses."""
import re
from pathlib import Path

import pytest

from agent.analysis import analyze
from agent.templates import BY_NAME, base
from tools.rules import check_source

FIXTURES = Path(__file__).parent / "fixtures"


def task_of(kind: str, tmp_path: Path, rows: int = 301) -> Path:
    task = tmp_path / f"col_split_{kind}.py"
    text = (FIXTURES / "col_split.py").read_text().replace('kind = "max"', f'kind = "{kind}"')
    task.write_text(text.replace("torch.randn(3, 301, 37)", f"torch.randn(3, {rows}, 37)"))
    return task


@pytest.mark.parametrize("kind", ["max", "mean_relu", "sum_min", "sum_first_row"])
def test_a_split_column_reduction_matches_the_reference(kind, runner, tmp_path):
    """Four programs a tile of 16 columns, each over 80 rows (the last over 61 of them), then the combine and
    the epilogue: every partial of a reduction, and each reduction's own, reach the output."""
    task = task_of(kind, tmp_path)
    a = analyze(str(task), small=True)
    t = BY_NAME["axis_reduce"]
    params = {**t.default(a), "BLOCK_I": 16, "BLOCK_R": 16, "SPLIT": 4}
    assert base.invalid(a, params) is None
    source = t.render(a, params)
    assert "_final" in source and re.search(r"range\(pid_s \* 80, pid_s \* 80 \+ 80, BLOCK_R\)", source)
    assert len(re.findall(r"_part\d+ = torch.empty\(\(4, 111\)", source)) == (2 if kind == "sum_min" else 1)
    assert check_source(source, task.read_text()) is None
    out = runner.run(task, source)
    assert out["error"] is None and out["rel_errors"] and all(e <= 1e-5 for e in out["rel_errors"]), out


@pytest.mark.parametrize("kind,why", [("argmax", "sums, maxima or minima"), ("softmax", "sums, maxima or minima")])
def test_a_column_split_takes_plain_reductions_of_the_input_alone(kind, why, tmp_path):
    a = analyze(str(task_of(kind, tmp_path)), small=True)
    t = BY_NAME["axis_reduce"]
    assert "SPLIT" not in base.space(a) and not any(v.get("SPLIT", 1) > 1 for v in t.variants(a))
    assert why in base.invalid(a, {**t.default(a), "SPLIT": 4})


def test_a_long_column_reduction_tries_the_split_second(tmp_path):
    """The variant splits a reduced axis of 1024 rows or more (128 a program), and no split leaves a program no
    rows."""
    t = BY_NAME["axis_reduce"]
    long = analyze(str(task_of("max", tmp_path, rows=4096)), small=True)
    assert [v.get("SPLIT", 1) for v in t.variants(long)][:2] == [1, 8]
    (tmp_path / "short").mkdir()
    short = analyze(str(task_of("max", tmp_path / "short")), small=True)
    assert all(v.get("SPLIT", 1) == 1 for v in t.variants(short))
    assert "at least BLOCK_R rows" in base.invalid(short, {**t.default(short), "BLOCK_R": 16, "SPLIT": 32})
    assert "without SPLIT" in base.invalid(long, {**t.default(long), "SPLIT": 8, "shapes": "dynamic"})
