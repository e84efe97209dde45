"""Progress of a run: a rich bar on a terminal, plain log lines when stderr is a file or a pipe.

Both write to stderr so stdout carries only the final summary (scriptable). The plain reporter
prints one line per finished task: a CI log then shows exactly which task failed and why.
"""

from __future__ import annotations

import sys
import time
from typing import Protocol, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


class ProgressReporter(Protocol):
    def start(self, total: int, already_done: int) -> None: ...

    def task_finished(self, task_id: str, failed: bool, detail: str = "") -> None: ...

    def close(self) -> None: ...


def _eta(done: int, total: int, elapsed: float) -> str:
    if done == 0:
        return "?"
    left = (total - done) * elapsed / done
    return f"{left:.0f}s"


class LogProgress:
    """One line per finished task on ``stream``: ``[  3/20] ok  task-id (failed 0, eta 12s)``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.total = 0
        self.done = 0
        self.failed = 0
        self._t0 = time.monotonic()
        self._width = 1

    def start(self, total: int, already_done: int) -> None:
        self.total = total
        self._width = len(str(total))
        self._t0 = time.monotonic()
        msg = f"{total} task(s) to do"
        if already_done:
            msg += f", {already_done} already finished (resumed)"
        print(msg, file=self.stream, flush=True)

    def task_finished(self, task_id: str, failed: bool, detail: str = "") -> None:
        self.done += 1
        self.failed += int(failed)
        mark = "FAIL" if failed else "ok  "
        eta = _eta(self.done, self.total, time.monotonic() - self._t0)
        tail = f": {detail}" if detail and failed else ""
        print(
            f"[{self.done:>{self._width}}/{self.total}] {mark} {task_id}{tail} (failed {self.failed}, eta {eta})",
            file=self.stream,
            flush=True,
        )

    def close(self) -> None:
        pass


class RichProgress:
    """A live bar with done / failed counts and an ETA; failures are also printed above the bar."""

    def __init__(self, console: Console | None = None) -> None:
        self.console = console if console is not None else Console(stderr=True)
        self.failed = 0
        self._progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("failed [red]{task.fields[failed]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=self.console,
            transient=False,
        )
        self._task = self._progress.add_task("tasks", total=0, failed=0)

    def start(self, total: int, already_done: int) -> None:
        if already_done:
            self.console.print(f"resuming: {already_done} task(s) already finished")
        self._progress.update(self._task, total=total)
        self._progress.start()

    def task_finished(self, task_id: str, failed: bool, detail: str = "") -> None:
        if failed:
            self.failed += 1
            self._progress.console.print(f"[red]FAIL[/red] {task_id}: {detail}")
        self._progress.update(self._task, advance=1, failed=self.failed)

    def close(self) -> None:
        self._progress.stop()


def make_progress(stream: TextIO | None = None) -> ProgressReporter:
    """A rich bar when ``stream`` (default stderr) is a terminal, plain lines otherwise."""
    stream = stream if stream is not None else sys.stderr
    if stream.isatty():
        return RichProgress(Console(file=stream))
    return LogProgress(stream)
