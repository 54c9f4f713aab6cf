"""`kernelwright kb ...` through argparse, as the top-level CLI registers it."""
import argparse
import json
import time
from pathlib import Path

import pytest

from knowledge import cli

TASKS = Path(__file__).resolve().parents[2] / "tasks"


def run(*argv):
    parser = argparse.ArgumentParser(prog="kernelwright")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(list(argv))
    return args.func(args)


def test_search_answers_under_a_second_after_the_first_build(kb_dir, capsys):
    t0 = time.perf_counter()
    assert run("kb", "search", "online softmax for long rows", "--json") == 0
    elapsed = time.perf_counter() - t0
    found = json.loads(capsys.readouterr().out)
    assert elapsed < 1.0, f"kb search took {elapsed:.2f}s"
    assert {r["kind"] for r in found} == {"doc", "kernel"}
    assert found[0]["metadata"]["doc_id"] == "pb-softmax-norms"
    assert "seed-softmax_online" in [r["id"] for r in found if r["kind"] == "kernel"][:2]


def test_search_kind_k_arch_and_kb_dir_flag(kb_dir, capsys, monkeypatch):
    monkeypatch.delenv("KERNELWRIGHT_KB_DIR")
    assert run("kb", "search", "tensor memory accelerator", "--kind", "docs", "--k", "2", "--arch", "sm_80",
               "--kb-dir", str(kb_dir)) == 0
    out = capsys.readouterr().out
    assert out.count("[doc ") == 2 and "[kernel" not in out and "pb-tma-descriptors" not in out
    assert run("kb", "--kb-dir", str(kb_dir), "search", "x", "--k", "0") == 2


def test_add_document_then_find_it(kb_dir, tmp_path, capsys):
    note = tmp_path / "ops-notes.md"
    note.write_text("# Ops notes\n\nOur batch of quokka-shaped tensors always has 7 channels.\n")
    assert run("kb", "add", str(note)) == 0
    assert "added document user-ops-notes" in capsys.readouterr().out
    assert run("kb", "search", "quokka tensors channels", "--kind", "docs", "--k", "1") == 0
    assert "user-ops-notes#0" in capsys.readouterr().out


def test_add_refuses_an_unverified_kernel_and_bad_paths(kb_dir, tmp_path, capsys):
    kernel = tmp_path / "k.py"
    kernel.write_text("import triton\n")
    assert run("kb", "add", str(kernel)) == 2
    err = capsys.readouterr().err
    assert "refusing to add" in err and "--task" in err and len(err.strip().splitlines()) == 1
    assert run("kb", "add", str(tmp_path / "missing.md")) == 2
    (tmp_path / "pic.png").write_bytes(b"\x89PNG")
    assert run("kb", "add", str(tmp_path / "pic.png")) == 2


def test_list_and_stats(kb_dir, capsys):
    assert run("kb", "list") == 0
    out = capsys.readouterr().out
    assert "18 documents:" in out or "documents:" in out
    assert "seed-matmul_epilogue" in out and "hw-mi300x" in out
    assert run("kb", "stats", "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["embed"] == "hash" and stats["written_back"] == 0 and stats["families"]["softmax"] == 2


def test_corrupt_store_is_one_sentence_and_exit_1_then_rebuild(kb_dir, capsys):
    (kb_dir / "chroma.sqlite3").write_bytes(b"\0garbage" * 512)
    assert run("kb", "search", "softmax") == 1
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "kernelwright kb rebuild" in lines[0] and "Traceback" not in captured.err
    assert run("kb", "rebuild") == 0
    assert "were lost" in capsys.readouterr().out
    assert run("kb", "search", "softmax", "--k", "1") == 0


@pytest.mark.slow
@pytest.mark.skipif(not (TASKS / "candidates" / "04_softmax.py").exists(), reason="needs the task suite")
def test_add_kernel_verified_by_the_evaluator(kb_dir, capsys):
    """The real evaluator in its sandbox (Triton interpreter on a CPU): a correct kernel is added, a
    candidate for another task is not."""
    args = ("kb", "add", str(TASKS / "candidates" / "04_softmax.py"), "--task", str(TASKS / "04_softmax.py"))
    assert run(*args) == 0
    assert "verified correct" in capsys.readouterr().out
    assert run("kb", "stats", "--json") == 0
    assert json.loads(capsys.readouterr().out)["written_back"] == 1
    wrong = TASKS / "candidates" / "22_max_pool2d.py"
    assert run("kb", "add", str(wrong), "--task", str(TASKS / "04_softmax.py")) == 1
    assert "not added" in capsys.readouterr().err
