"""The warm process that the parent's sm_90 compiles run in (tools/compile_server.py): a compile there gives what
the same compile gives in a process the server never forked (this one), in the job's folder with the job's
environment; one that fails says why and one that hangs is killed at the time limit, and the same server takes the
next; a change of the environment it started with beyond what each job sets starts another."""
import json
import os
import sys

import pytest

from tools.compile_info import SPECS_FILE, answer
from tools.compile_server import CompileServer

COPY = '''import triton
import triton.language as tl


@triton.jit
def copy(src, dst, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst + offs, tl.load(src + offs, mask=offs < n) * 2, mask=offs < n)
'''
SPEC = {"name": "copy", "function": "copy", "signature": {"src": "*fp32", "dst": "*fp32", "n": "i32",
                                                          "BLOCK": "constexpr"},
        "constexprs": {"BLOCK": 1024}, "options": {"num_warps": 4}, "divisible": ["src", "dst", "n"]}


def job(tmp_path, name: str, source: str, spec: dict = SPEC) -> tuple[str, dict]:
    """A job's work folder holding `source` as candidate.py and its launch specs, and the environment each
    compile of a job gets (tools/evaluate.py): the job's folder as HOME, a Triton cache of its own."""
    work = tmp_path / name / "work"
    work.mkdir(parents=True)
    (work / "candidate.py").write_text(source)
    (work / SPECS_FILE).write_text(json.dumps([spec]))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return str(work), {**env, "HOME": str(work), "TRITON_CACHE_DIR": str(tmp_path / name / "triton")}


def test_compiles_one_after_another_in_one_server_as_elsewhere(tmp_path, monkeypatch):
    work, env = job(tmp_path, "a", COPY)
    monkeypatch.chdir(work)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "here"))
    try:
        here = answer()  # candidate.py imported as kw_candidate, compiled in this process
    finally:
        sys.modules.pop("kw_candidate", None)
    assert json.loads(here)[0]["registers"] > 0
    with CompileServer() as server:
        assert server.run(work, env, 120) == here
        pid = server.proc.pid

        work, env = job(tmp_path, "b", COPY, {**SPEC, "constexprs": {"BLOCK": 128}, "options": {"num_warps": 1}})
        (narrow,) = json.loads(server.run(work, env, 120))
        assert (narrow["num_warps"], server.proc.pid) == (1, pid)

        probe = ("import os\n"
                 "raise RuntimeError(repr([os.getcwd(), os.environ['HOME'], os.environ['TRITON_CACHE_DIR']]))")
        work, env = job(tmp_path, "c", probe)
        with pytest.raises(RuntimeError) as seen:
            server.run(work, env, 120)
        assert str(seen.value) == f"RuntimeError: {[work, work, env['TRITON_CACHE_DIR']]!r}"
        assert server.proc.pid == pid

        work, env = job(tmp_path, "d", "import time\nwhile True:\n    time.sleep(0.05)\n")
        with pytest.raises(RuntimeError, match="no answer within 1 s"):
            server.run(work, env, 1)
        work, env = job(tmp_path, "e", COPY)
        assert json.loads(server.run(work, env, 120))[0]["registers"] > 0 and server.proc.pid == pid

        work, env = job(tmp_path, "f", probe)
        with pytest.raises(RuntimeError, match="RuntimeError: "):
            server.run(work, {**env, "TRITON_DEFAULT_FP_FUSION": "0"}, 120)
        assert server.proc.pid != pid  # a setting Triton reads: a server started with it
    assert server.proc is None
