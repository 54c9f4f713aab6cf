import os

import pytest


def _has_gpu() -> bool:
    import torch
    return torch.cuda.is_available()


def pytest_collection_modifyitems(config, items):
    if _has_gpu():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; this machine has none")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory):
    """Evaluator caches (Triton, Inductor, device ceilings) in a fresh folder for the test session."""
    old = os.environ.get("KERNELWRIGHT_CACHE")
    os.environ["KERNELWRIGHT_CACHE"] = str(tmp_path_factory.mktemp("kw-cache"))
    yield
    if old is None:
        os.environ.pop("KERNELWRIGHT_CACHE", None)
    else:
        os.environ["KERNELWRIGHT_CACHE"] = old


@pytest.fixture(scope="session")
def warm_executor(_isolated_cache):
    """One executor with one warm worker slot, as a run's, for the session's tests that judge candidates and read
    the verdicts: each test that opened its own paid for its worker's start (PyTorch, Triton and Dynamo imported,
    about 6 s of a CPU). Jobs go through it one at a time; a candidate that leaves the worker unclean, or crashes
    or hangs it, is caught and the worker replaced before the next job (tools/forkserver.py), as in a run. Tests
    that change the environment the worker starts with, or look at the worker itself, open their own."""
    from tools.executor import ExecutorConfig, LocalExecutor
    with LocalExecutor(ExecutorConfig(workers_per_device=1)) as ex:
        yield ex
