"""The batch report: results files agree with tools/score.py, and report.html works in a real headless
Chromium (driven over the DevTools protocol on a pipe): rows sort on a mouse click, every plot draws one mark
per task, the page loads nothing from anywhere, and CPU (interpreter) runs never show speedups."""
import base64
import csv
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from agent.report_html import TaskRow, summary_lines, write_results
from tools.score import summarize

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Chromium: apt-get install -y chromium")


def gpu_rows() -> list[TaskRow]:
    """Six finished tasks on a GPU (one without a correct kernel) and one still pending."""
    def done(task, ms, eager, compile_ms, floor, curve):
        return TaskRow(task, f"tasks/{task}.py", "done", "correct", evaluations=curve[-1][0], correct=3,
                       best_ms=ms, eager_ms=eager, compile_ms=compile_ms, floor_ms=floor, floor_fraction=floor / ms,
                       speedup_vs_eager=eager / ms, speedup_vs_compile=compile_ms / ms, device="NVIDIA H200",
                       seconds=100.0, best_kernel=f"{task}/best.py", stop_reason="evaluation budget of 8 spent",
                       progress=curve)
    return [
        done("gelu", 0.50, 1.00, 0.60, 0.45, [[1, 0.9], [2, 0.9], [3, 0.5]]),
        done("softmax", 0.20, 0.90, 0.30, 0.10, [[1, 0.4], [4, 0.2]]),
        done("matmul", 2.00, 1.60, 1.50, 1.00, [[2, 3.0], [5, 2.0]]),
        done("rms_norm", 0.10, 0.35, 0.12, 0.08, [[1, 0.3], [2, 0.1]]),
        done("cumsum", 0.30, 0.45, 0.50, 0.05, [[3, 0.3]]),
        TaskRow("argmax", "tasks/argmax.py", "done", "incorrect", "no candidate passed", evaluations=8,
                eager_ms=0.2, compile_ms=0.1, device="NVIDIA H200", seconds=90.0),
        TaskRow("conv", "tasks/conv.py", "pending"),
    ]


def cpu_rows() -> list[TaskRow]:
    return [TaskRow("scale_shift", "t.py", "done", "correct", evaluations=2, correct=2, best_ms=1.3, eager_ms=0.01,
                    interpreted=True, device="cpu (Triton interpreter)", seconds=10.0, best_kernel="scale_shift/best.py",
                    progress=[[1, 2.0], [2, 1.3]])]


def test_results_files_agree_with_the_scores(tmp_path):
    rows = gpu_rows()
    write_results(tmp_path, "tasks/suite.toml", rows)
    data = json.loads((tmp_path / "results.json").read_text())
    assert (data["finished"], data["total"], data["interpreted"]) == (6, 7, False)
    expected = summarize([r.outcome() for r in rows if r.status == "done"]).to_json()
    assert data["summary"] == expected
    assert data["summary"]["correct"] == 5 and data["summary"]["fast_p"]["eager@1"] == pytest.approx(4 / 6)
    assert data["summary"]["fast_p"]["compile@1.5"] == pytest.approx(1 / 6)  # cumsum (1.67x); softmax is 1.5x
    with open(tmp_path / "results.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["task"] for r in table] == [r.task for r in rows]
    assert table[1]["verdict"] == "correct" and float(table[1]["speedup_vs_eager"]) == pytest.approx(4.5)
    assert table[5]["best_ms"] == "" and table[6]["status"] == "pending"
    text = "\n".join(summary_lines(rows, tmp_path))
    assert "6/7 tasks finished; 5 with a correct kernel (correctness rate 83.3%)" in text
    assert "vs eager" in text and "83.3%" in text and "geomean speedup" in text
    # a GPU batch stopped before any task finished says that, not that its times are the interpreter's
    text = "\n".join(summary_lines([replace(r, status="interrupted") for r in rows], tmp_path))
    assert "No task finished" in text and "interpreter" not in text


def test_cpu_results_are_times_never_speedups(tmp_path):
    write_results(tmp_path, "s", cpu_rows())
    page = (tmp_path / "report.html").read_text()
    assert "Triton interpreter on a CPU" in page and "x eager" not in page and 'id="fast-p"' not in page
    assert "no speedups" in "\n".join(summary_lines(cpu_rows(), tmp_path))
    assert json.loads((tmp_path / "results.json").read_text())["summary"]["geomean"]["eager"] is None


# --- a real browser ---------------------------------------------------------------------------------------
PLACE_FDS = "import os, sys; os.dup2(int(sys.argv[1]), 3); os.dup2(int(sys.argv[2]), 4); os.execv(sys.argv[3], sys.argv[3:])"


class Browser:
    """Headless Chromium, driven over --remote-debugging-pipe (fd 3 commands in, fd 4 replies out)."""

    def __init__(self, profile: Path):
        low_in, self.w = os.pipe()
        self.r, low_out = os.pipe()
        # the child's ends moved above 10, so that placing them on fds 3 and 4 cannot clobber one with the other
        to_child, from_child = (fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in (low_in, low_out))
        os.close(low_in)
        os.close(low_out)
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
                 "--remote-debugging-pipe", "--window-size=1200,1600", "about:blank"]
        self.proc = subprocess.Popen([sys.executable, "-c", PLACE_FDS, str(to_child), str(from_child), CHROMIUM, *flags],
                                     pass_fds=(to_child, from_child), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        for fd in (to_child, from_child):
            os.close(fd)
        self.buf, self.next_id, self.session = b"", 0, None

    def call(self, method: str, session: bool = True, **params):
        self.next_id += 1
        msg = {"id": self.next_id, "method": method, "params": params}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            while b"\0" in self.buf:
                raw, self.buf = self.buf.split(b"\0", 1)
                reply = json.loads(raw)
                if reply.get("id") == self.next_id:
                    assert "error" not in reply, reply
                    return reply["result"]
            self.buf += os.read(self.r, 1 << 16)
        raise TimeoutError(method)

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", session=False, url=url)["targetId"]
        self.session = self.call("Target.attachToTarget", session=False, targetId=target, flatten=True)["sessionId"]
        for _ in range(100):
            if self.js("[location.href, document.readyState]") == [url, "complete"]:
                return
            time.sleep(0.05)
        raise TimeoutError(url)

    def js(self, expression: str):
        got = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        assert "exceptionDetails" not in got, got
        return got["result"].get("value")

    def click(self, selector: str) -> None:
        """A real mouse click (pressed and released) at the centre of the element."""
        x, y = self.js(f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
                       " return [r.x + r.width / 2, r.y + r.height / 2]; })()")
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        os.close(self.r)
        os.close(self.w)


@pytest.fixture
def browser(tmp_path):
    b = Browser(tmp_path / "profile")
    yield b
    b.close()


COLUMN = """Array.from(document.querySelectorAll('#tasks tbody tr')).map(r => r.cells[{}].textContent.trim())"""


def header(name: str) -> str:
    return f"#tasks thead th:nth-child({name})"


@needs_chromium
def test_report_sorts_on_click_and_draws_every_plot(tmp_path, browser):
    rows = gpu_rows()
    write_results(tmp_path / "out", "tasks/suite.toml", rows)
    browser.open((tmp_path / "out" / "report.html").as_uri())

    headers = browser.js("Array.from(document.querySelectorAll('#tasks th')).map(h => h.textContent)")
    task_col, speed_col = headers.index("task"), headers.index("x eager")
    assert browser.js(COLUMN.format(task_col)) == [r.task for r in rows]

    browser.click(header(speed_col + 1))  # ascending; tasks without a speedup go last
    assert browser.js(COLUMN.format(task_col)) == ["matmul", "cumsum", "gelu", "rms_norm", "softmax", "argmax", "conv"]
    browser.click(header(speed_col + 1))  # descending
    assert browser.js(COLUMN.format(task_col))[:5] == ["softmax", "rms_norm", "gelu", "cumsum", "matmul"]
    assert browser.js(f"document.querySelector('{header(speed_col + 1)}').getAttribute('aria-sort')") == "descending"
    browser.click(header(task_col + 1))
    assert browser.js(COLUMN.format(task_col)) == sorted(r.task for r in rows)

    # plots: visible, with one mark per task that has the figure
    sizes = browser.js("Array.from(document.querySelectorAll('svg.plot')).map(s => s.getBoundingClientRect().width)")
    assert len(sizes) == 3 and min(sizes) > 300
    bars = browser.js("Array.from(document.querySelectorAll('svg.bars rect.bar')).map(r => r.getBBox().width)")
    assert len(bars) == 10 and min(bars) >= 1  # five correct tasks, over eager and over torch.compile
    assert browser.js("document.querySelectorAll('svg.roofline circle.point').length") == 5
    curves = browser.js("Array.from(document.querySelectorAll('svg.curves polyline')).map(p => p.getBBox().width)")
    assert len(curves) == 5 and max(curves) > 100
    assert browser.js("document.querySelector('#fast-p').innerText").count("%") == 6
    assert browser.js("performance.getEntriesByType('resource').length") == 0  # self-contained: loads nothing

    shot = base64.b64decode(browser.call("Page.captureScreenshot", format="png")["data"])
    (tmp_path / "report.png").write_bytes(shot)
    assert shot[:8] == b"\x89PNG\r\n\x1a\n" and len(shot) > 20000


@needs_chromium
def test_cpu_report_in_the_browser_shows_interpreter_times_only(tmp_path, browser):
    write_results(tmp_path, "s", cpu_rows())
    browser.open((tmp_path / "report.html").as_uri())
    assert "Triton interpreter on a CPU" in browser.js("document.querySelector('#interpreter-note').innerText")
    headers = browser.js("Array.from(document.querySelectorAll('#tasks th')).map(h => h.textContent)")
    assert "best ms (interpreter)" in headers and not any("x " in h for h in headers)
    assert browser.js("document.querySelectorAll('svg.bars rect.bar').length") == 1
    assert browser.js("document.querySelectorAll('svg.roofline').length") == 0
    assert "x" not in browser.js("Array.from(document.querySelectorAll('svg.plot .tick')).map(t => t.textContent)"
                                 ".join('')").replace("ms", "")
