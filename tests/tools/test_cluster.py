"""The cluster executor (tools/cluster.py) on a real Dask LocalCluster of two worker processes: a batch reaches
the local executor's verdicts and loses nothing though a worker is killed under it, a job carries its task's
source and reuses its device's baselines, and an unreachable scheduler is one sentence and exit 2."""
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from distributed import Client, LocalCluster

from agent.cli import main as run
from tools.cluster import ClusterConfig, ClusterExecutor, pick_kind
from tools.results import EvalJob, TaskSpec

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "agent" / "fixtures"
TASKS = [FIX / "task_scale_shift.py", ROOT / "tasks" / "02_swish_bias.py", FIX / "tpl_unsupported.py"]


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as c:
        yield c


@pytest.fixture
def no_llm(monkeypatch):
    for var in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "KERNELWRIGHT_CLUSTER"):
        monkeypatch.delenv(var, raising=False)


def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "suite"
    folder.mkdir()
    for task in TASKS:
        (folder / task.name).write_text(task.read_text())
    return folder


def verdicts(out: Path) -> dict[str, list]:
    """Per task: (id, status, verdict) of every candidate, and the hosts the evaluations ran on."""
    found = {}
    for db in sorted(out.glob("*/run.sqlite")):
        with sqlite3.connect(db) as c:
            rows = c.execute("SELECT id, status, verdict, metrics FROM candidates ORDER BY id").fetchall()
        found[db.parent.name] = [(i, status, verdict, json.loads(m or "{}").get("host", ""))
                                 for i, status, verdict, m in rows]
    return found


def batch(folder: Path, out: Path, *more: str) -> list[str]:
    return ["batch", str(folder), "--budget", "2", "--workers", "2", "--out", str(out), "--no-knowledge", *more]


def test_a_batch_on_the_cluster_reaches_the_local_verdicts_though_a_worker_dies(tmp_path, cluster, no_llm):
    folder = suite(tmp_path)
    assert run(batch(folder, tmp_path / "local")) == 1  # tpl_unsupported has no kernel: exit 1 either way
    out = tmp_path / "cluster"
    client = Client(cluster.scheduler_address, set_as_default=False)
    cmd = [sys.executable, "-m", "agent.cli", *batch(folder, out, "--cluster", cluster.scheduler_address)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT)
    killed = None
    try:
        deadline = time.monotonic() + 120
        while killed is None and proc.poll() is None and time.monotonic() < deadline:
            busy = [a for a, keys in client.processing().items() if keys]
            if busy:  # an evaluation is running there: take its worker down under it
                killed = client.run(os.getpid, workers=busy[:1])[busy[0]]
                os.kill(killed, signal.SIGKILL)
            time.sleep(0.2)
        text = proc.communicate(timeout=240)[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        client.close()
    assert killed is not None and proc.returncode == 1, text
    local, remote = verdicts(tmp_path / "local"), verdicts(out)
    assert {t: [r[:3] for r in rows] for t, rows in remote.items()} == {t: [r[:3] for r in rows]
                                                                        for t, rows in local.items()}
    for task in ("task_scale_shift", "02_swish_bias"):  # every candidate evaluated once, none lost to the kill
        assert [r[:3] for r in remote[task]] == [(1, "evaluated", "correct"), (2, "evaluated", "correct")], text
    assert all(r[3] == "" for rows in local.values() for r in rows)  # a local run names no host
    assert all(r[3] == socket.gethostname() for rows in remote.values() for r in rows)
    results = json.loads((out / "results.json").read_text())["tasks"]
    assert [(t["task"], t["status"], t["verdict"]) for t in results] == [
        ("02_swish_bias", "done", "correct"), ("task_scale_shift", "done", "correct"),
        ("tpl_unsupported", "done", "none")]


def test_a_job_carries_its_task_source(cluster):
    source = (ROOT / "tasks" / "02_swish_bias.py").read_text()
    candidate = (ROOT / "tasks" / "candidates" / "02_swish_bias.py").read_text()
    spec = TaskSpec(path="/only/on/another/host/02_swish_bias.py", name="02_swish_bias", source=source)
    with ClusterExecutor(ClusterConfig(cluster.scheduler_address)) as executor:
        first, second = [executor.submit(EvalJob(task=spec, candidate=candidate, timeout_s=120, trials=2)).result()
                         for _ in range(2)]
    assert first.verdict == "correct", first.reason
    assert first.baselines.device == "cpu" and first.host == socket.gethostname()
    assert second.baselines == first.baselines  # measured once per task and device kind, then reused


def test_an_unreachable_scheduler_exits_2_with_one_sentence(tmp_path, capsys, no_llm):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "out"
    code = run(["batch", str(FIX / "task_scale_shift.py"), "--out", str(out), "--cluster", f"tcp://127.0.0.1:{port}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"kernelwright: The Dask scheduler at tcp://127.0.0.1:{port} did not answer")
    assert not (out / "batch.json").exists()  # nothing written: the same command works once it is up


def test_each_task_is_pinned_to_the_device_kind_with_room():
    kinds = {"w1": "NVIDIA H200", "w2": "NVIDIA H200", "w3": "NVIDIA A100"}
    pinned: dict[str, str] = {}
    for task in ("a", "b", "c", "d"):
        pinned[task] = pick_kind(kinds, pinned)
    assert pinned == {"a": "NVIDIA H200", "b": "NVIDIA A100", "c": "NVIDIA H200", "d": "NVIDIA H200"}
