"""One corpus run whose chosen tasks a later run (``corpus.py --tasks``) judged again: the later run's
verdict where it judged a task, the first run's elsewhere, summarised as ``corpus.py`` summarises a run.

A change that alters only some solutions' verdicts (89abddf: the judge builds both models on the CPU when a
solution's build draws from the CPU's generator) is checked by judging exactly those solutions again, not
the whole corpus. The throughput figures (``wall_s``, ``per_min``, ``gpu_worker_s``, ``gpu_busy_share``)
stay the base run's, which judged every task in one run; ``merged`` says which tasks came from which run.
Tasks the corpus file no longer yields (rows the runner now skips: ``custom_code`` the text "None") are
dropped. Both inputs are ``corpus.py`` reports; ``--base-run`` re-reads the base run's rows from its
directory (rows of reports written before 2026-11-28 lack ``timing_degraded``; such rows count as not
degraded, and ``merged.rows_without_timing_degraded`` says how many)::

    python bench/corpus_merge.py --solutions /data/cuda-l1/optimized_cuda_code/h100.json \\
        --base-report bench/results/corpus_h100_215_2xh200_616ac36.json --base-run runs/corpus-h100 \\
        --rejudged-report corpus-h100-subset.json --out merged.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from _report import save_report
from corpus import print_table, summarize_rows, summarize_run  # bench/ (the script's dir) is on sys.path
from kernelbench_runner.solutions import load_solutions

#: The base report's fields that describe its run as a whole (kept as they were).
RUN_FIELDS = (
    "corpus", "command", "mps", "device", "gpus", "torch", "calls",
    "wall_s", "per_min", "gpu_worker_s", "gpu_build_s", "gpu_busy_share",
)  # fmt: skip


def merge_rows(
    base: list[dict[str, Any]], again: list[dict[str, Any]], keep: set[str]
) -> list[dict[str, Any]]:
    """``base``'s rows of ``keep`` with ``again``'s in their place, in task order (as a run lists them)."""
    by_task = {r["task_id"]: r for r in [*base, *again] if r["task_id"] in keep}
    return [by_task[t] for t in sorted(by_task)]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--solutions", type=Path, required=True, help="the corpus file both runs judged")
    parser.add_argument("--base-report", type=Path, required=True, help="corpus.py's report of the whole run")
    parser.add_argument("--base-run", type=Path, help="the whole run's directory, to re-read its rows")
    parser.add_argument(
        "--rejudged-report", type=Path, required=True, help="corpus.py's report of the later run"
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    base = json.loads(args.base_report.read_text())
    again = json.loads(args.rejudged_report.read_text())
    base_rows = summarize_run(args.base_run)["per_task"] if args.base_run else base["per_task"]
    keep = {t.id for t in load_solutions(args.solutions, problems=list).tasks}
    rows = merge_rows(base_rows, again["per_task"], keep)
    report: dict[str, Any] = {
        "bench": "corpus",
        "tasks": len(keep),
        **summarize_rows(rows),
        **{k: base.get(k) for k in RUN_FIELDS},
        "merged": {
            "base": {k: base.get(k) for k in ("command", "device", "gpus", "done", "wall_s", "per_min")},
            "rejudged": {
                **{k: again.get(k) for k in ("command", "device", "gpus", "done", "wall_s", "gpu_build_s")},
                "task_ids": sorted(r["task_id"] for r in again["per_task"]),
            },
            "dropped_from_base": sorted({r["task_id"] for r in base_rows} - keep),
            "rows_without_timing_degraded": sum("timing_degraded" not in r for r in rows),
        },
    }
    save_report(args.out, report)
    print_table(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
