"""The live progress of a batch: bars per running task and overall on a terminal, plain lines elsewhere,
and a stand-in for sys.stdout that keeps the lines of concurrent tasks whole."""
from __future__ import annotations

import shutil
import sys
import threading

from agent.report_html import TaskRow


class Progress:
    """Live progress. On a terminal: a line per running task (a bar of its evaluations, its best so far)
    and an overall bar with the best speedup so far, redrawn in place, log lines scrolling above them.
    Elsewhere (a pipe, a CI log): plain lines, one per evaluation and one per finished task."""

    WIDTH = 20

    def __init__(self, total: int, done: int = 0, budget: int = 24, stream=None, live: bool | None = None):
        self.stream = stream or sys.stdout
        self.live = self.stream.isatty() if live is None else live
        self.total, self.done, self.budget = total, done, budget
        self.running: dict[str, tuple[int, str]] = {}
        self.correct = 0
        self.best: tuple[float, str] | None = None  # (speedup vs eager, task): GPU runs only
        self.lock = threading.RLock()
        self.drawn = 0

    def started(self, name: str, evaluated: int) -> None:
        with self.lock:
            self.running[name] = (evaluated, "")
            self._draw()

    def update(self, name: str, evaluated: int, best: str) -> None:
        with self.lock:
            self.running[name] = (evaluated, best)
            self._draw()

    def detail(self, line: str) -> None:
        """A line that plain output shows and the live view summarizes in its bars."""
        if not self.live:
            self.log(line)

    def log(self, line: str) -> None:
        with self.lock:
            self._clear()
            self.stream.write(line + "\n")
            self._draw()

    def finished(self, name: str, row: TaskRow | None, quiet: bool = False) -> None:
        with self.lock:
            self.running.pop(name, None)
            if row is None:
                self._draw()
                return
            self.done += 1
            self.correct += row.verdict == "correct"
            if row.kept and (self.best is None or row.speedup_vs_eager > self.best[0]):  # a loss is no best
                self.best = (row.speedup_vs_eager, name)
            if not quiet:
                self.log(f"done {self.done}/{self.total} {name}: {row.brief()}")
                if not self.live:
                    self.stream.write(self.overall() + "\n")
            self.stream.flush()

    def overall(self) -> str:
        line = f"{self.done}/{self.total} tasks done, {self.correct} with a correct kernel"
        if self.best:
            line += f", best {self.best[0]:.2f}x eager ({self.best[1]})"
        return line + (f", {len(self.running)} running" if self.running else "")

    def close(self) -> None:
        with self.lock:
            self._clear()
            self.stream.flush()

    def _bar(self, fraction: float) -> str:
        n = max(0, min(self.WIDTH, round(fraction * self.WIDTH)))
        return "[" + "#" * n + "." * (self.WIDTH - n) + "]"

    def _clear(self) -> None:
        if self.live and self.drawn:
            self.stream.write(f"\x1b[{self.drawn}F\x1b[J")
            self.drawn = 0

    def _draw(self) -> None:
        if not self.live:
            return
        width = shutil.get_terminal_size((100, 24)).columns - 1
        lines = [f"  {name[:28]:<28} {self._bar(n / self.budget)} {n:>3}/{self.budget} {best}"
                 for name, (n, best) in self.running.items()]
        lines.append(f"{self._bar(self.done / max(self.total, 1))} {self.overall()}")
        self._clear()
        self.stream.write("\n".join(line[:width] for line in lines) + "\n")
        self.stream.flush()
        self.drawn = len(lines)


class StdoutLines:
    """Stands in for sys.stdout while tasks run in threads: whole lines go to `sink` (the progress view),
    so a line printed by a task never lands in the middle of another or of the bars."""

    def __init__(self, sink):
        self.sink, self.partial = sink, threading.local()

    def write(self, text: str) -> int:
        *lines, rest = (getattr(self.partial, "text", "") + text).split("\n")
        for line in lines:
            self.sink(line)
        self.partial.text = rest
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

