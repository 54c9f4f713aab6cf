"""The opt-in suite against a real model server: `bash tests/real_llm/run.sh` installs llama.cpp's server and a
small model, serves it, and runs this file (`pytest -m real_llm`). Without a server these tests skip.

A 270M-parameter model writes no useful kernel; nothing here measures a model's quality. What is tested is
that whatever a real server sends (empty replies, text where a tool call was asked for, replies cut at their
length limit, slow replies, streamed replies) reaches the client and the operator, and that every run and
session still ends well: within its time limit, with best.py and a report, every reply stored.
"""
import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

MODEL = os.environ.get("KERNELWRIGHT_REAL_LLM_MODEL")
pytestmark = [pytest.mark.real_llm, pytest.mark.skipif(
    not (MODEL and os.environ.get("OPENAI_BASE_URL")),
    reason="no real model server: bash tests/real_llm/run.sh installs and serves one, then runs this suite")]
ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tasks" / "04_softmax.py"
LIMIT = 240  # the optimize runs' --time-limit, in seconds
SLACK = 60  # what a run may take past its limit: the evaluation already running, writing the report


def _kernelwright(*args: str, env: dict | None = None, stdin: str | None = None, timeout: float = 900):
    env = {k: v for k, v in {**os.environ, **(env or {})}.items() if v is not None}
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "agent.cli", *args], cwd=ROOT, env=env, input=stdin, text=True,
                          capture_output=True, timeout=timeout)
    return proc, time.monotonic() - start


def _optimize(out: Path, model: str | None, **env):
    args = ["optimize", str(TASK), "--budget", "4", "--time-limit", str(LIMIT), "--out", str(out), "--no-knowledge"]
    if model is None:
        env.update(OPENAI_BASE_URL=None, OPENAI_API_KEY=None)
    else:
        args += ["--model", model]
    proc, seconds = _kernelwright(*args, env=env)
    assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-3000:]
    return proc, seconds, json.loads((out / "report.json").read_text())


def _candidates(out: Path) -> list[sqlite3.Row]:
    db = sqlite3.connect(out / "run.sqlite")
    db.row_factory = sqlite3.Row
    return db.execute("SELECT * FROM candidates ORDER BY id").fetchall()


def test_optimize_with_a_real_model_ends_in_time_and_no_worse_than_without_one(tmp_path):
    without, _, plain = _optimize(tmp_path / "plain", None)
    proc, seconds, report = _optimize(tmp_path / "llm", MODEL)
    print(proc.stdout)
    assert proc.returncode == without.returncode == 0, proc.stderr[-2000:]
    assert seconds < LIMIT + SLACK
    assert (tmp_path / "llm" / "best.py").is_file() and report["best"]["verdict"] == "correct"
    assert report["llm"]["conversations"] >= 1

    # the templates' first round is the same with and without the model, and nothing the model did cost it
    ours = {r["source"] for r in _candidates(tmp_path / "llm")}
    first_round = [r for r in _candidates(tmp_path / "plain") if r["operator"] == "template"]
    assert first_round and all(r["source"] in ours for r in first_round)
    assert plain["best"]["verdict"] == "correct"

    # every conversation is stored with its replies; one without code is an error that says why
    model_rows = [r for r in _candidates(tmp_path / "llm") if r["operator"] == "llm"]
    assert model_rows
    for r in model_rows:  # a reply, or a request that the time limit ended before it said anything
        assert "--- model reply 1 ---" in r["prompt"] or "deadline came during a request" in r["reason"]
        if not r["source"]:
            assert r["verdict"] == "error" and r["reason"].startswith("no usable code: ")


def test_optimize_streaming_with_replies_cut_at_a_small_cap_still_ends_well(tmp_path):
    proc, seconds, report = _optimize(tmp_path / "cut", MODEL, KERNELWRIGHT_LLM_STREAM="1",
                                      KERNELWRIGHT_LLM_MAX_TOKENS="48")
    print(proc.stdout)
    assert proc.returncode == 0 and seconds < LIMIT + SLACK and (tmp_path / "cut" / "best.py").is_file()
    replies = "\n".join(r["prompt"] for r in _candidates(tmp_path / "cut") if r["operator"] == "llm")
    assert "[finish: length" in replies  # the cap cut replies, and the run went on


@pytest.mark.parametrize("stream,max_tokens", [("0", "1024"), ("1", "1024"), ("1", "24")])
def test_chat_two_turns_asking_for_tools_stays_up_and_says_what_happened(tmp_path, stream, max_tokens):
    lines = ["Use the read_task tool on tasks/04_softmax.py and tell me what it computes.",
             "Now call write_kernel to save a Triton softmax kernel to " + str(tmp_path / "k.py") + ".",
             "/quit"]
    proc, _ = _kernelwright("chat", "--model", MODEL, stdin="\n".join(lines) + "\n", timeout=600,
                            env={"KERNELWRIGHT_CHAT_DB": str(tmp_path / "chat.sqlite"),
                                 "KERNELWRIGHT_LLM_STREAM": stream, "KERNELWRIGHT_LLM_MAX_TOKENS": max_tokens})
    print(proc.stdout)
    assert proc.returncode == 0 and "Traceback" not in proc.stdout + proc.stderr, proc.stderr[-2000:]
    turns = proc.stdout.split("you> ")[1:3]
    assert len(turns) == 2
    for turn in turns:  # each turn shows a reply, a tool call, a note on what went wrong, or the error
        assert any(mark in turn for mark in ("agent> ", "[tool]", "  (", "kernelwright: ")), turn
    if max_tokens == "24":
        assert "cut at the model's length limit" in proc.stdout


def test_the_client_learns_the_servers_context_and_sees_a_cut_reply():
    from agent.llm import ChatClient, llm_config
    chat = ChatClient(llm_config(MODEL, max_tokens=16))
    chat.check()
    reply = chat.invoke([("user", "Count from one to one hundred in words.")], deadline=time.monotonic() + 120)
    assert reply.response_metadata.get("finish_reason") == "length"
    long = "Describe this kernel.\n" + "x = tl.load(ptr + offs, mask=mask)\n" * 1500  # ~50,000 characters
    chat.invoke([("user", long)], deadline=time.monotonic() + 300)
    assert chat.context_tokens == 8192  # run.sh serves an 8192-token context; the server's error said so
