"""`kernelwright export`: a run's best kernel as an importable module, checked in a fresh process (eager, under
torch.compile(fullgraph=True), through torch.export, and the fallback at an unverified shape), and bad input.

The run is fixtures/export_run: best.py and report.json of a real `optimize tasks/02_swish_bias.py --budget 2
--small` on a CPU (a template kernel verified at SMALL_SHAPES, x of (5, 300), by the Triton interpreter)."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli import main

ROOT = Path(__file__).resolve().parents[2]
RUN = Path(__file__).parent / "fixtures" / "export_run"

# Run in a fresh interpreter with the exported module's folder on sys.path; prints one JSON line.
CHECK = r'''
import json, warnings
import torch
from swish_bias import KernelFallbackWarning, SwishBias, _kw_reference

torch.manual_seed(0)
model = SwishBias(300).eval()
reference = _kw_reference.Model(300).eval()
reference.load_state_dict(model.state_dict())
x, odd = torch.randn(5, 300), torch.randn(7, 300)
found = {}
with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    same = lambda a, b: bool(torch.allclose(a, b, atol=1e-5, rtol=1e-5))
    found["eager"] = same(model(x), reference(x))
    found["op"] = same(torch.ops.kwtest.swish_bias(x, model.bias), reference(x))
    found["warnings_verified"] = sum(issubclass(w.category, KernelFallbackWarning) for w in caught)
    found["compile"] = same(torch.compile(model, fullgraph=True)(x), reference(x))
    program = torch.export.export(model, (x,))
    found["export_calls_op"] = "torch.ops.kwtest.swish_bias" in program.graph_module.code
    found["export"] = same(program.module()(x), reference(x))
    found["warnings_before_fallback"] = sum(issubclass(w.category, KernelFallbackWarning) for w in caught)
    found["fallback"] = same(model(odd), reference(odd)) and same(model(odd), reference(odd))
    found["fallback_compiled"] = same(torch.compile(model, fullgraph=True)(odd), reference(odd))
    fallbacks = [str(w.message) for w in caught if issubclass(w.category, KernelFallbackWarning)]
found["fallback_warnings"] = fallbacks
print(json.dumps(found))
'''


def export(*argv: str) -> int:
    return main(["export", *argv])


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """The fixture run, its report pointing at this checkout's task file."""
    folder = tmp_path_factory.mktemp("run")
    shutil.copy(RUN / "best.py", folder / "best.py")
    report = json.loads((RUN / "report.json").read_text())
    report["task"] = str(ROOT / report["task"])
    (folder / "report.json").write_text(json.dumps(report))
    return folder


@pytest.fixture(scope="module")
def exported(run_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("kernels")
    assert export(str(run_dir), "--name", "kwtest::swish_bias", "--out", str(out)) == 0
    return out


def test_module_header_records_what_was_verified(exported):
    text = (exported / "swish_bias.py").read_text()
    head = text.split("# ---- the kernel")[0]
    assert "[5, 300], [300] (the task's SMALL_SHAPES)" in head
    assert "dtypes: float32" in head
    assert "interpreter one on a CPU" in head and "no speedup is claimed" in head
    assert sorted(p.name for p in exported.iterdir()) == ["swish_bias.py"]


def test_exported_module_in_a_fresh_process(exported):
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(exported))
    done = subprocess.run([sys.executable, "-c", CHECK], cwd=exported, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["eager"] and found["op"] and found["warnings_verified"] == 0
    assert found["compile"]  # the default backend (inductor): the op is an opaque call it does not compile
    assert found["export"] and found["export_calls_op"] and found["warnings_before_fallback"] == 0
    assert found["fallback"] and found["fallback_compiled"]
    assert len(found["fallback_warnings"]) == 1, found["fallback_warnings"]
    assert "float32[7, 300]" in found["fallback_warnings"][0]


def test_other_constructor_arguments_run_the_reference(exported):
    code = ("import warnings, torch\nfrom swish_bias import KernelFallbackWarning, SwishBias\n"
            "with warnings.catch_warnings(record=True) as w:\n    warnings.simplefilter('always')\n"
            "    m = SwishBias(dim=40)\n    x = torch.randn(3, 40)\n"
            "    assert torch.allclose(m(x), x * torch.sigmoid(x) + m.bias)\n"
            "print(sum(issubclass(i.category, KernelFallbackWarning) for i in w))\n")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(exported))
    done = subprocess.run([sys.executable, "-c", code], cwd=exported, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split()[-1] == "1"


def _one_sentence(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("kernelwright: ") and err.endswith("."), err
    return err


def test_existing_module_is_kept_unless_forced(run_dir, exported, capsys):
    before = (exported / "swish_bias.py").read_text()
    assert export(str(run_dir), "--name", "kwtest::swish_bias", "--out", str(exported)) == 2
    assert "--force" in _one_sentence(capsys)
    assert (exported / "swish_bias.py").read_text() == before
    assert export(str(run_dir), "--name", "kwtest::swish_bias", "--out", str(exported), "--force") == 0


@pytest.mark.parametrize("name", ["swish", "kw::", "kw::swish-bias", "1kw::swish", "kw::class", "aten::swish"])
def test_invalid_op_name(run_dir, tmp_path, capsys, name):
    assert export(str(run_dir), "--name", name, "--out", str(tmp_path)) == 2
    _one_sentence(capsys)
    assert not list(tmp_path.iterdir())


def test_run_without_a_correct_kernel(run_dir, tmp_path, capsys):
    failed = tmp_path / "failed"
    failed.mkdir()
    report = json.loads((run_dir / "report.json").read_text())
    report["best"] = None
    (failed / "report.json").write_text(json.dumps(report))
    assert export(str(failed), "--name", "kw::swish", "--out", str(tmp_path / "out")) == 2
    assert "no correct kernel" in _one_sentence(capsys)
    assert not (tmp_path / "out").exists()


def test_missing_run_dir(tmp_path, capsys):
    assert export(str(tmp_path / "nowhere"), "--name", "kw::swish", "--out", str(tmp_path / "out")) == 2
    assert "no optimize run" in _one_sentence(capsys)
