"""The trials of tools/verify.py run directly on candidates, past the static rules (which may refuse a cheat
before it runs): the runtime checks must catch it on their own. Run with TRITON_INTERPRET=1 on a CPU:

    python tests/tools/verify_probe.py '[["TASK", "CANDIDATE"], ...]'     # prints one JSON line: verdicts"""
from __future__ import annotations

import json
import sys

import torch

from tools.compare import TOLERANCES, Failed
from tools.guard import LaunchRecorder
from tools.results import TaskSpec
from tools.task import import_file, load_task_module
from tools.verify import Setup, verify


def judge(task_path: str, candidate_path: str, recorder: LaunchRecorder) -> dict:
    task = load_task_module(TaskSpec(task_path), small=True)
    init = task.get_init_inputs()
    torch.manual_seed(0)
    reference = task.Model(*init)
    candidate = import_file(candidate_path, "kw_probe_candidate").ModelNew(*init)
    setup = Setup(task, reference, candidate, torch.device("cpu"), None, TOLERANCES[torch.float32], [], recorder)
    try:
        verify(setup, trials=3)
    except Failed as e:
        return {"verdict": e.verdict, "reason": e.sentence()}
    return {"verdict": "correct", "reason": "Correct on every trial."}


def main(cases: str) -> None:
    recorder = LaunchRecorder()
    recorder.install()
    print(json.dumps([judge(task, candidate, recorder) for task, candidate in json.loads(cases)]))


if __name__ == "__main__":
    main(sys.argv[1])
