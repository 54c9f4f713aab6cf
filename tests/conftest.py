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
