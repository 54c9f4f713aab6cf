"""What the agent tests share: `runner`, one long-lived Triton-interpreter process (fixtures/tpl_runner.py,
which sets TRITON_INTERPRET=1 before importing triton) that runs candidates against their tasks, one for the
session's tests (its start, PyTorch, Triton and the analysis imported, was some 5 s of a CPU for each module)."""
import importlib.util
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"
_spec = importlib.util.spec_from_file_location("tpl_client", FIXTURES / "tpl_client.py")
tpl_client = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tpl_client)


@pytest.fixture(scope="session")
def runner(tmp_path_factory):
    r = tpl_client.Runner(tmp_path_factory.mktemp("candidates"))
    yield r
    r.close()
