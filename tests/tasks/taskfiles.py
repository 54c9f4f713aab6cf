"""Where the suite's files are and how the tests load them: shared by test_tasks.py, test_tasks_gpu.py and
check_candidates.py (which runs in its own interpreter process)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

TASKS_DIR = Path(__file__).resolve().parents[2] / "tasks"
TASK_FILES = sorted(p.name for p in TASKS_DIR.glob("*.py"))
CANDIDATE_FILES = sorted(p.name for p in (TASKS_DIR / "candidates").glob("*.py"))
FAMILIES = ("elementwise", "softmax", "norm", "reduction", "argreduce", "scan", "pooling", "loss", "matvec",
            "matmul", "gemm_epilogue", "conv")


def load_module(path: Path, name: str, overrides: dict | None = None) -> ModuleType:
    """Execute a task or candidate file as a fresh module, then override some of its globals."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for key, value in (overrides or {}).items():
        setattr(module, key, value)
    return module


def load_task(name: str, small: bool) -> ModuleType:
    """A task file of tasks/, at its SMALL_SHAPES or at its full size."""
    module = load_module(TASKS_DIR / name, f"task_{name[:-3]}")
    if small:
        for key, value in module.SMALL_SHAPES.items():
            setattr(module, key, value)
    return module


def load_candidate(name: str, overrides: dict | None = None) -> ModuleType:
    return load_module(TASKS_DIR / "candidates" / name, f"candidate_{name[:-3]}", overrides)


def family_of(module: ModuleType) -> str:
    """The `Family: <family>` line of a task's docstring, or ''."""
    match = re.search(r"^Family: (\w+)$", module.__doc__ or "", re.MULTILINE)
    return match.group(1) if match else ""
