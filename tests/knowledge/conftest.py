import shutil

import pytest

from knowledge.store import KnowledgeStore
from tools.results import EvalResult, Timing


@pytest.fixture(scope="session")
def built_kb(tmp_path_factory):
    """A store built once from the shipped corpus with the default embedding; copy it before changing it."""
    path = tmp_path_factory.mktemp("kb-built") / "kb"
    with KnowledgeStore(path, embed="hash") as store:
        store.stats()
    return path


@pytest.fixture
def kb_dir(built_kb, tmp_path, monkeypatch):
    """A private, writable copy of the built store, also set as the default for the CLI."""
    path = tmp_path / "kb"
    shutil.copytree(built_kb, path)
    monkeypatch.setenv("KERNELWRIGHT_KB_DIR", str(path))
    monkeypatch.delenv("KERNELWRIGHT_EMBED", raising=False)
    return path


@pytest.fixture
def results():
    """Builders of evaluator results: results.gpu(ms=...) and results.cpu(), as tools.evaluate returns them."""
    class Results:
        gpu = staticmethod(_gpu_result)
        cpu = staticmethod(_cpu_result)
    return Results


def _gpu_result(ms=0.5, eager_ms=1.0, device="cuda:NVIDIA H200 (sm_90)", verdict="correct"):
    t = Timing(ms=ms, eager_ms=eager_ms, compile_ms=0.8, floor_ms=0.4, speedup_vs_eager=eager_ms / ms,
               speedup_vs_compile=0.8 / ms, floor_fraction=0.4 / ms, spread_pct=1.0, interpreted=False)
    return EvalResult(verdict, "checked", device=device, timing=t, max_abs_err=1e-6)


def _cpu_result(verdict="correct"):
    t = Timing(ms=40.0, eager_ms=None, compile_ms=None, floor_ms=None, speedup_vs_eager=None,
               speedup_vs_compile=None, floor_fraction=None, spread_pct=3.0, interpreted=True)
    return EvalResult(verdict, "checked", device="cpu (Triton interpreter)", interpreted=True, timing=t)
