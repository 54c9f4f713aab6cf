"""--dtype on optimize, batch and ci casts every task as a task list's `dtype` does, through the same TaskSpec."""
from pathlib import Path

import pytest

from agent.batch import Settings, load_specs
from agent.cli import build_parser
from agent.optimize import plan_run

FIXTURES = Path(__file__).parents[1] / "tools" / "fixtures"


@pytest.mark.parametrize("argv", [["optimize", "TASK.py"], ["batch", "SUITE"], ["ci"]])
def test_each_searching_command_offers_the_three_dtypes(argv):
    parser = build_parser()
    assert parser.parse_args(argv + ["--dtype", "bfloat16"]).dtype == "bfloat16"
    assert parser.parse_args(argv).dtype is None
    with pytest.raises(SystemExit):
        parser.parse_args(argv + ["--dtype", "float64"])


def test_optimize_keeps_the_dtype_in_its_run_config(tmp_path):
    args = build_parser().parse_args(["optimize", str(FIXTURES / "task_cumsum.py"), "--dtype", "float16",
                                      "--out", str(tmp_path / "run")])
    assert plan_run(args).config.dtype == "float16"


def test_batch_dtype_overrides_the_task_list(tmp_path):
    suite = tmp_path / "suite.toml"
    suite.write_text(f'[[task]]\npath = "{FIXTURES / "task_cumsum.py"}"\ndtype = "float16"\n\n'
                     f'[[task]]\npath = "{FIXTURES / "task_epilogue.py"}"\n')
    assert [s.dtype for s in load_specs(str(suite))] == ["float16", None]
    assert [s.dtype for s in load_specs(str(suite), dtype="bfloat16")] == ["bfloat16", "bfloat16"]
    args = build_parser().parse_args(["batch", str(suite), "--dtype", "bfloat16"])
    assert Settings.from_args(args, 1).dtype == "bfloat16"
