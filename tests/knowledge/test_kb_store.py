"""The store on real Chroma: offline first use, filters, budgets, write-back dedup, refusal, rebuild."""
import json
import socket
from pathlib import Path

import pytest

from knowledge.corpus import CORPUS_DIR, seed_kernels
from knowledge.errors import KBError, UnverifiedKernelError
from knowledge.store import KnowledgeStore, default_kb_dir

KERNEL = '''
import triton
import triton.language as tl

@triton.jit
def _relu(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=offs < n)
'''


def test_first_use_builds_offline_without_chroma_default_embedding(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("KERNELWRIGHT_EMBED", raising=False)

    def no_network(*args, **kwargs):
        raise AssertionError(f"network used: {args}")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    kb = tmp_path / "fresh" / "kb"
    with KnowledgeStore(kb) as store:
        assert not kb.exists()  # nothing happens before first use
        hits = store.retrieve("shared memory per SM on the A100", kind="docs", k=3)
        stats = store.stats()
        assert all(col._embedding_function is None for col in store._cols.values())
    assert hits[0].metadata["doc_id"] == "hw-a100"
    assert stats["documents"] == len(list(CORPUS_DIR.glob("*.md"))) >= 15
    assert stats["kernels"] == len(seed_kernels()) >= 6
    assert json.loads((kb / "manifest.json").read_text())["embed"] == "hash"
    assert not (tmp_path / "home" / ".cache" / "chroma").exists()  # Chroma's ONNX model never fetched


def test_default_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.delenv("KERNELWRIGHT_KB_DIR", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_kb_dir() == tmp_path / "xdg" / "kernelwright" / "kb"
    monkeypatch.setenv("KERNELWRIGHT_KB_DIR", str(tmp_path / "mine"))
    assert default_kb_dir() == tmp_path / "mine"
    assert KnowledgeStore(tmp_path / "arg").kb_dir == tmp_path / "arg"


def test_metadata_filters_and_arch_flags(kb_dir):
    with KnowledgeStore(kb_dir) as store:
        hw = store.retrieve("memory bandwidth L2 cache shared memory", kind="docs", k=10,
                            where={"kind": "hardware"})
        assert {r.metadata["kind"] for r in hw} == {"hardware"}
        on_a100 = store.retrieve("TMA tensor descriptors and memory bandwidth", kind="docs", k=10,
                                 where={"arch": "sm_80"})
        ids = {r.metadata["doc_id"] for r in on_a100}
        assert "hw-a100" in ids and not ids & {"hw-h100-h200", "hw-b200", "pb-tma-descriptors"}
        on_h100 = store.retrieve("TMA tensor descriptors", kind="docs", k=3, where={"arch": "sm_90"})
        assert on_h100[0].metadata["doc_id"] == "pb-tma-descriptors"  # listed for sm_90 and sm_100
        norms = store.retrieve("fast kernel", kind="kernels", k=5, where={"family": "norm"})
        assert [r.id for r in norms] == ["seed-layer_norm"]
        both = store.retrieve("kernel", kind="kernels", k=9,
                              where={"$and": [{"family": "softmax"}, {"arch": "gfx942"}]})
        assert {r.id for r in both} == {"seed-softmax_row", "seed-softmax_online"}


def test_budget_in_characters_and_at_most_two_passages_per_doc(kb_dir):
    with KnowledgeStore(kb_dir) as store:
        full = store.retrieve("softmax layer norm row reduction", kind="docs", k=6)
        assert max(sum(r.metadata["doc_id"] == d for r in full) for d in {r.metadata["doc_id"] for r in full}) <= 2
        small = store.retrieve("softmax layer norm row reduction", kind="docs", k=6, budget_chars=1500)
        assert small and sum(len(r.text) for r in small) <= 1500
        assert store.retrieve("softmax", kind="docs", k=3, budget_chars=10) == []


def test_context_for_task_gives_hardware_notes_playbooks_and_family_kernels(kb_dir):
    task = (Path(__file__).resolve().parents[2] / "tasks" / "04_softmax.py")
    source = task.read_text() if task.exists() else (
        '"""Softmax over rows.\n\nFamily: softmax\n"""\nimport torch\nclass Model(torch.nn.Module):\n'
        '    def forward(self, x):\n        return torch.softmax(x, dim=1)\n')
    with KnowledgeStore(kb_dir) as store:
        ctx = store.context_for_task(source, "sm_90", k_docs=3, k_kernels=2, budget_chars=9000)
    assert ctx.docs[0].metadata["doc_id"] == "hw-h100-h200"
    assert "pb-softmax-norms" in {r.metadata["doc_id"] for r in ctx.docs[1:]}
    assert ctx.kernels and all(r.metadata["family"] == "softmax" for r in ctx.kernels)
    assert len(ctx.docs) <= 3 and ctx.chars <= 9000
    with KnowledgeStore(kb_dir) as store:
        amd = store.context_for_task(source, "gfx942")
    assert amd.docs[0].metadata["doc_id"] == "hw-mi300x"
    assert not {r.metadata["doc_id"] for r in amd.docs} & {"hw-h100-h200", "pb-tma-descriptors"}


def test_write_back_dedups_by_normalized_code_and_updates_measurements(kb_dir, results):
    with KnowledgeStore(kb_dir) as store:
        n0 = len(store.items("kernels"))
        kid = store.write_back(KERNEL, {"task": "19_ReLU", "parent_id": 3, "shapes": {"n": 4096},
                                        "dtype": "float32"}, results.gpu(ms=0.5))
        reformatted = "# a comment\n" + KERNEL.replace("    x = tl.load", "    # load\n    x  =  tl.load") + "\n\n"
        again = store.write_back(reformatted, {"task": "19_ReLU", "parent_id": 9}, results.gpu(ms=0.25))
        assert again == kid
        items = dict(store.items("kernels"))
        assert len(items) == n0 + 1
        m = items[kid]
        assert (m["verified"], m["parent_id"], m["speedup_vs_eager"]) == (2, "9", 4.0)
        assert m["arch"] == "sm_90" and m["device"].endswith("(sm_90)") and json.loads(m["shapes"]) == {"n": 4096}
        # an interpreter run of the same code never replaces the GPU measurement
        store.write_back(KERNEL, {"task": "19_ReLU"}, results.cpu())
        m = dict(store.items("kernels"))[kid]
        assert (m["verified"], m["speedup_vs_eager"], m["interpreted"]) == (3, 4.0, False)
        # a different program is a new entry, found by the similarity search
        other = store.write_back(KERNEL.replace("tl.maximum(x, 0.0)", "tl.minimum(x, 0.0)"), {}, results.cpu())
        assert other != kid and len(store.items("kernels")) == n0 + 2
        hits = store.retrieve("relu kernel for 19_ReLU", kind="kernels", k=3, where={"arch": "sm_90"})
        assert hits[0].id == kid and "tl.maximum" in hits[0].text


@pytest.mark.parametrize("verdict", ["incorrect", "rejected", "timeout", "crash", "error"])
def test_unverified_results_are_refused(kb_dir, results, verdict):
    with KnowledgeStore(kb_dir) as store:
        n0 = len(store.items("kernels"))
        with pytest.raises(UnverifiedKernelError, match=verdict):
            store.write_back(KERNEL, {"task": "19_ReLU"}, results.gpu(verdict=verdict))
        assert len(store.items("kernels")) == n0


def _corrupt(kb_dir: Path) -> None:
    (kb_dir / "chroma.sqlite3").write_bytes(b"this is not a database" * 1000)


def test_corrupt_store_names_rebuild_and_rebuild_recovers(kb_dir, results):
    with KnowledgeStore(kb_dir) as store:
        store.write_back(KERNEL, {"task": "19_ReLU"}, results.gpu())
    _corrupt(kb_dir)
    with pytest.raises(KBError) as err:
        KnowledgeStore(kb_dir).retrieve("softmax", kind="docs")
    msg = str(err.value)
    assert "kernelwright kb rebuild" in msg and str(kb_dir) in msg and msg.count(". ") == 0
    report = KnowledgeStore(kb_dir).rebuild()
    assert report.lost and "lost" in report.summary()
    with KnowledgeStore(kb_dir) as store:
        assert store.retrieve("online softmax", kind="docs", k=1)[0].metadata["doc_id"] == "pb-softmax-norms"
        assert len(store.items("kernels")) == len(seed_kernels())


def test_rebuild_keeps_written_back_kernels_and_added_docs(kb_dir, results, tmp_path):
    note = tmp_path / "cluster.md"
    note.write_text("---\ntitle: Our cluster\n---\n# Our cluster\n\nThe zebrafish nodes carry eight GPUs each.\n")
    with KnowledgeStore(kb_dir) as store:
        kid = store.write_back(KERNEL, {"task": "19_ReLU"}, results.gpu())
        doc_id, _ = store.add_document(note)
    report = KnowledgeStore(kb_dir).rebuild()
    assert (report.lost, report.kept_kernels, report.kept_docs) == (False, 1, 1)
    with KnowledgeStore(kb_dir) as store:
        assert kid in dict(store.items("kernels"))
        assert store.retrieve("zebrafish nodes", kind="docs", k=1)[0].metadata["doc_id"] == doc_id


def test_missing_database_and_other_embedding_are_clear_errors(kb_dir):
    with pytest.raises(KBError, match="built with the 'hash' embedding, not 'minilm'.*kb rebuild"):
        KnowledgeStore(kb_dir, embed="minilm").retrieve("x", kind="docs")
    (kb_dir / "chroma.sqlite3").unlink()
    with pytest.raises(KBError, match="missing its database file.*kb rebuild"):
        KnowledgeStore(kb_dir).retrieve("x", kind="docs")
    with pytest.raises(KBError, match="unknown embedding 'bert'"):
        KnowledgeStore(kb_dir, embed="bert")


def test_rebuild_refuses_a_directory_that_is_not_a_store(tmp_path):
    other = tmp_path / "photos"
    other.mkdir()
    (other / "cat.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(KBError, match="not a kernelwright knowledge store"):
        KnowledgeStore(other).rebuild()
    assert (other / "cat.jpg").exists()


def test_a_changed_corpus_rebuilds_on_open_and_keeps_measured_seeds(kb_dir, results, monkeypatch):
    seed = next(k for k in seed_kernels() if k.id == "seed-softmax_row")
    with KnowledgeStore(kb_dir) as store:
        assert store.write_back(seed.source, {"task": "04_softmax"}, results.gpu(ms=0.2)) == seed.id
    # the shipped seed changes (a new release): its measured old version must survive under its own id
    edited = seed.source.replace("num_warps = 4 if", "num_warps = 2 if")
    monkeypatch.setattr("knowledge.store.seed_kernels",
                        lambda: [k if k.id != seed.id else type(k)(k.id, edited, k.embed_text,
                                                                   {**k.metadata, "code_hash": "new"})
                                 for k in seed_kernels()])
    monkeypatch.setattr("knowledge.store.corpus_fingerprint", lambda: "changed")
    with KnowledgeStore(kb_dir) as store:
        items = dict(store.items("kernels"))
    assert items[seed.id]["code_hash"] == "new" and items[seed.id].get("verified", 0) == 0
    moved = [m for m in items.values() if m.get("speedup_vs_eager") == 5.0]
    assert len(moved) == 1 and moved[0]["origin"] == "writeback" and moved[0]["task"] == "04_softmax"


def test_a_tasks_own_stored_winner_is_its_next_runs_first_proposal_as_it_was(kb_dir, results):
    """A run's winner, written back, comes back as a seed naming its task, and the parameter operator proposes
    it as it was, its 512-position tiles (a size no space lists) included; a similar task's winner is fitted
    to this task's space (256)."""
    import dataclasses

    from agent.analysis import analyze
    from agent.context import RunConfig
    from agent.interfaces import TaskContext
    from agent.operators.param import SEED_TASK, ParamOperator
    from agent.optimize import param_seeds
    from agent.templates import BY_NAME

    source = (Path(__file__).resolve().parents[1] / "agent" / "fixtures" / "conv_norm.py").read_text()
    a = analyze(source, small=True)
    t = BY_NAME["gemm"]
    winner = {"template": "gemm", **next(v for v in t.variants(a) if v["BLOCK_M"] == 512)}
    task = TaskContext("conv_norm", source, a.to_json(), "cpu", "sm_90")
    with KnowledgeStore(kb_dir) as store:
        store.write_back(t.render(a, winner), {"task": "conv_norm", "arch": "sm_90", "params": winner},
                         results.gpu())
        seeds = [s for s in param_seeds(store, task, RunConfig()) if s[SEED_TASK] == "conv_norm"]
    assert len(seeds) == 1
    first = ParamOperator(seeds=seeds).propose(task, [], 1)[0]
    assert "known-good" in first.note and {k: v for k, v in first.params.items() if k != "rewrites"} == winner
    other = ParamOperator(seeds=[{**seeds[0], SEED_TASK: "another task"}]).propose(task, [], 1)[0]
    assert other.params["BLOCK_M"] == 256
    unnamed = dataclasses.replace(task, name="")  # a seed stored without a task is no task's own
    assert ParamOperator(seeds=[{**seeds[0], SEED_TASK: ""}]).propose(unnamed, [], 1)[0].params["BLOCK_M"] == 256
