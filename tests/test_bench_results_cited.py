"""bench/results/ holds only what BENCHMARKS.md cites, and BENCHMARKS.md stays short (issue 53).

A results file is cited when its path (``bench/results/NAME``) or its bare name appears in BENCHMARKS.md.
A cited path must exist, except one read at a commit (``<sha>:bench/results/NAME``, as in ``git show``):
superseded files live in git history, and BENCHMARKS.md's History names the commit to find them at.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "BENCHMARKS.md"
RESULTS = ROOT / "bench" / "results"
MAX_LINES = 800

#: ``bench/results/NAME`` not read at a commit (``0123abc:bench/results/NAME``); NAME may end a sentence.
CITED_PATH = re.compile(r"(?<![0-9a-f]:)(?<![\w./-])bench/results/([\w.*-]*[\w*-])")


def _text() -> str:
    return BENCHMARKS.read_text(encoding="utf-8")


def _results() -> list[str]:
    return sorted(p.relative_to(RESULTS).as_posix() for p in RESULTS.rglob("*") if p.is_file())


def _cited(name: str, text: str) -> bool:
    """``name`` appears as a whole file name: not inside a longer name, a path of its own or a suffix."""
    bare = Path(name).name
    pattern = r"(?<![\w.-])(?:bench/results/)?" + re.escape(name if "/" in name else bare) + r"(?![\w-]|\.\w)"
    return re.search(pattern, text) is not None


def test_every_results_file_is_cited_in_benchmarks_md() -> None:
    text = _text()
    uncited = [name for name in _results() if not _cited(name, text)]
    assert not uncited, (
        f"{len(uncited)} file(s) under bench/results/ are not cited in BENCHMARKS.md; cite each where its "
        f"figures are given, or delete it (git history keeps it): {', '.join(uncited)}"
    )


def test_every_cited_results_path_exists() -> None:
    present = set(_results())
    cited = sorted({m.group(1) for m in CITED_PATH.finditer(_text())})
    broken = [name for name in cited if "*" not in name and name not in present]
    assert not broken, (
        "BENCHMARKS.md cites bench/results/ paths that do not exist (a file read at a commit is written "
        f"<sha>:bench/results/NAME): {', '.join(broken)}"
    )


def test_benchmarks_md_is_at_most_800_lines() -> None:
    lines = len(_text().splitlines())
    assert lines <= MAX_LINES, (
        f"BENCHMARKS.md has {lines} lines (at most {MAX_LINES}): keep the current figures; superseded ones "
        "go to git history, named in its History section"
    )


def test_benchmarks_md_internal_links_name_a_heading() -> None:
    text = _text()
    slugs = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        slugs.add(slug)
    missing = sorted({a for a in re.findall(r"\]\(#([^)]+)\)", text) if a not in slugs})
    assert not missing, f"BENCHMARKS.md links to anchors no heading makes: {', '.join(missing)}"
