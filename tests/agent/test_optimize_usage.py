"""`kernelwright optimize` refuses bad input with exit code 2 and one sentence, before writing anything."""
import socket
from pathlib import Path

import pytest
from openai_server import ScriptedOpenAI

from agent.cli import main
from agent.runstore import RunStore

TASK = str(Path(__file__).parent / "fixtures" / "task_scale_shift.py")


@pytest.fixture(autouse=True)
def _no_llm_env(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


def _refused(argv, capsys) -> str:
    assert main(["optimize", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelwright: ") and len(err.splitlines()) == 1
    return err


def test_bad_task_and_numbers(tmp_path, capsys):
    assert "does not exist" in _refused([str(tmp_path / "nope.py"), "--out", str(tmp_path / "o")], capsys)
    assert "--budget" in _refused([TASK, "--budget", "0", "--out", str(tmp_path / "o")], capsys)
    assert not (tmp_path / "o").exists()


def test_model_without_key_and_key_without_model(tmp_path, capsys, monkeypatch):
    assert "OPENAI_API_KEY is not set" in _refused([TASK, "--model", "m", "--out", str(tmp_path / "o")], capsys)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    assert "pass --model NAME" in _refused([TASK, "--out", str(tmp_path / "o")], capsys)
    assert not (tmp_path / "o").exists()


def test_unreachable_endpoint_and_rejected_key(tmp_path, capsys, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    err = _refused([TASK, "--model", "m", "--out", str(tmp_path / "o")], capsys)
    assert f"cannot reach the LLM endpoint at http://127.0.0.1:{port}/v1" in err
    with ScriptedOpenAI([]) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url)
        monkeypatch.setenv("OPENAI_API_KEY", "wrong")
        assert "rejected the API key" in _refused([TASK, "--model", "m", "--out", str(tmp_path / "o")], capsys)
    assert not (tmp_path / "o").exists()


def test_resume_needs_a_run_of_the_same_task(tmp_path, capsys):
    assert "no run to resume" in _refused([TASK, "--resume", str(tmp_path / "missing")], capsys)
    store = RunStore(tmp_path / "r" / "run.sqlite")
    store.create_run("/somewhere/else.py", {"budget": 3})
    store.close()
    assert "optimizes /somewhere/else.py" in _refused([TASK, "--resume", str(tmp_path / "r")], capsys)
    RunStore(tmp_path / "o" / "run.sqlite").close()
    assert "already holds a run" in _refused([TASK, "--out", str(tmp_path / "o")], capsys)


BROKEN_TASKS = {  # a task whose own code fails or computes no tensor: (forward body, get_inputs' shape, said)
    "raises": ("return x @ x", "(3, 4)", "the forward on get_inputs() raised RuntimeError: mat1 and mat2 shapes"),
    "none": ("return None", "(3, 4)", "forward returns None, not a tensor"),
    "number": ("return x.sum().item()", "(3, 4)", "forward returns a Python number, not a tensor"),
    "empty": ("return torch.relu(x)", "(0, 4)", "output 0 has no elements (shape (0, 4))"),
}


@pytest.mark.parametrize("case", sorted(BROKEN_TASKS))
def test_a_broken_task_is_bad_input(case, tmp_path, capsys):
    body, shape, said = BROKEN_TASKS[case]
    task = tmp_path / f"{case}.py"
    task.write_text(f"import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                    f"        {body}\n\n\ndef get_inputs():\n    return [torch.randn{shape}]\n\n\n"
                    f"def get_init_inputs():\n    return []\n")
    assert said in _refused([str(task), "--budget", "2", "--no-knowledge", "--out", str(tmp_path / "o")], capsys)
    assert not (tmp_path / "o").exists()


def test_a_model_that_cannot_be_built_is_bad_input(tmp_path, capsys):
    task = tmp_path / "init.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self, a, b):\n"
                    "        super().__init__()\n        self.fc = nn.Linear(a, b)\n\n    def forward(self, x):\n"
                    "        return self.fc(x)\n\n\ndef get_inputs():\n    return [torch.randn(3, 4)]\n\n\n"
                    "def get_init_inputs():\n    return [4]\n")
    err = _refused([str(task), "--budget", "2", "--no-knowledge", "--out", str(tmp_path / "o")], capsys)
    assert "Model(*get_init_inputs()) raised TypeError" in err
