"""Progress reporting: plain lines off a terminal, a rich bar on one."""

from __future__ import annotations

import io

from rich.console import Console

from benchmark_runner.progress import LogProgress, RichProgress, make_progress


def test_plain_lines_when_not_a_terminal() -> None:
    stream = io.StringIO()
    p = make_progress(stream)
    assert isinstance(p, LogProgress)
    p.start(3, 2)
    p.task_finished("a", False)
    p.task_finished("b", True, "RuntimeError: boom")
    p.close()
    out = stream.getvalue().splitlines()
    assert out[0] == "3 task(s) to do, 2 already finished (resumed)"
    assert out[1].startswith("[1/3] ok   a (failed 0, eta ")
    assert out[2].startswith("[2/3] FAIL b: RuntimeError: boom (failed 1, eta ")


def test_rich_bar_counts_done_and_failed() -> None:
    buf = io.StringIO()
    p = RichProgress(Console(file=buf, force_terminal=True, width=120))
    p.start(2, 0)
    p.task_finished("a", True, "boom")
    p.task_finished("b", False)
    p.close()
    text = buf.getvalue()
    assert "FAIL" in text and "a: boom" in text
    assert "2/2" in text and "failed" in text
