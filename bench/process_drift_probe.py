"""Probe (issue 18): is the smoke self-check's spread (an op against itself reads 0.96-1.04, the ops of one
batch moving together) a property of the two side *processes*, or of *when* each side is timed?

Two trusted side processes run the same 7 us op (``x * y`` on a million floats), 128 calls a reading,
through the judge's real gated timer. Their readings are interleaved (A, B, A, B, ...), so both see the
same GPU at the same time, in rounds separated by a pause:

* ``process_ratio``: median A / median B over all rounds, each net of its own process's null cost. If
  the spread comes from the processes (where their outputs lie, their contexts), this varies from one
  fresh pair to the next by about as much as the self-check does.
* ``round_ratio``: a process's median in its first round / in its last round. If the spread comes from
  the time of timing (the GPU's state drifting between the candidate's phase and the reference's),
  this varies instead.

Variants: ``new_output`` (the op's output from the side's own allocator), ``in_place`` (written over an
input, in the judge's arena) and ``one_arena`` (both sides' inputs in one arena, the candidate's): whether
a process's speed follows its own output memory, or the arena the judge gave it.

    python bench/process_drift_probe.py --out $OUT/process_drift.json
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

from _report import save_report
from _sources import use_sources

use_sources("backendbench-runner")

import torch  # noqa: E402
from kernel_service.backendbench.evaluator import default_judge  # noqa: E402
from kernel_service.judge import Run, calibrate  # noqa: E402

NEW_OUTPUT = "def f(x, y):\n    return x * y\n"
#: variant -> (source, whether both sides use one arena): the output in memory of the side's own
#: allocator, or written over an input in the judge's arena; each side's inputs in an arena of its own,
#: or both in the candidate's
VARIANTS = {
    "new_output": (NEW_OUTPUT, False),
    "in_place": ("def f(x, y):\n    return x.mul_(y)\n", False),
    "one_arena": (NEW_OUTPUT, True),
}


def share_arena(run: Run) -> None:
    """The reference side maps the candidate's input arena instead of its own (readings alternate, so
    one side's inputs are never written while the other computes)."""
    arena = run.arenas[("candidate", "in")]
    msg: dict[str, Any] = {"op": "arena", "which": "in", "nbytes": arena.nbytes, "kind": arena.kind}
    if arena.handle is not None:
        msg["handle"] = arena.handle.hex()
    assert run.ask("reference", msg, arena.fd).get("ok")
    run.arenas.pop(("reference", "in")).close()
    run.arenas[("reference", "in")] = arena


CALLS = 128
ROLES = ("candidate", "reference")


def pair(
    judge: Any, device: torch.device, variant: str, rounds: int, per_round: int, pause_s: float
) -> dict[str, Any]:
    """One fresh pair of side processes, timed interleaved."""
    source, one_arena = VARIANTS[variant]
    with tempfile.TemporaryDirectory(dir=judge.tmp) as tmp:
        run = Run(judge, Path(tmp), device, timeout_s=300)
        build = str(Path(tmp) / "build")
        Path(build).mkdir()
        try:
            for role in ROLES:
                run.fork(role, build)
            run.ask_each({role: {"op": "setup", "device": str(device), "build_dir": build} for role in ROLES})
            for role in ROLES:
                assert run.ask(role, {"op": "load_fn", "source": source, "function": "f"})["ok"]
            base = judge.gpu_timer(device)
            base.start_job()
            timers = {role: base.bind(role, partial(run.ask, role)) for role in ROLES}

            def sets() -> list[tuple[list[torch.Tensor], dict[str, Any]]]:
                return [([torch.rand(1 << 20, device=device), torch.rand(1 << 20, device=device)], {})
                        for _ in range(CALLS)]  # fmt: skip

            one = sets()
            null = {"reference": calibrate(run, base, timers["reference"], one)}
            null["candidate"] = calibrate(run, base, timers["candidate"], one, role="candidate")
            for role in ROLES:  # warm-up
                for _ in range(3):
                    run.calls(role, sets(), timers[role])
            if one_arena:
                share_arena(run)
            by_round: dict[str, list[list[float]]] = {role: [] for role in ROLES}
            for r in range(rounds):
                if r:
                    time.sleep(pause_s)
                for role in ROLES:
                    by_round[role].append([])
                for _ in range(per_round):
                    for role in ROLES:
                        call = run.calls(role, sets(), timers[role])
                        assert call.ms is not None
                        by_round[role][-1].append((call.ms - null[role]) / CALLS)
        finally:
            if one_arena and run.arenas.get(("reference", "in")) is run.arenas.get(("candidate", "in")):
                run.arenas.pop(("reference", "in"))  # closed once, with the candidate's entry
            run.close()
    med = {role: statistics.median(x for rnd in by_round[role] for x in rnd) for role in ROLES}
    return {
        "null_us": {role: round(null[role] * 1e3, 2) for role in ROLES},
        "per_call_us": {role: round(med[role] * 1e3, 4) for role in ROLES},
        "process_ratio": round(med["candidate"] / med["reference"], 4),
        "round_ratio": {
            role: round(statistics.median(by_round[role][0]) / statistics.median(by_round[role][-1]), 4)
            for role in ROLES
        },
        "round_medians_us": {
            role: [round(statistics.median(rnd) * 1e3, 4) for rnd in by_round[role]] for role in ROLES
        },
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--per-round", type=int, default=10)
    parser.add_argument("--pause-s", type=float, default=1.0)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no GPU: nothing to probe")
        return 0
    device = torch.device("cuda", 0)
    judge = default_judge()
    report: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "calls_per_reading": CALLS}
    for variant in VARIANTS:
        rows = []
        for p in range(args.pairs):
            row = pair(judge, device, variant, args.rounds, args.per_round, args.pause_s)
            rows.append(row)
            print(f"{variant} pair {p + 1}: {row}", flush=True)
        process = [r["process_ratio"] for r in rows]
        rounds = [v for r in rows for v in r["round_ratio"].values()]
        report[variant] = {
            "pairs": rows,
            "process_ratio_range": [min(process), max(process)],
            "process_ratio_sd": statistics.pstdev(process),
            "round_ratio_range": [min(rounds), max(rounds)],
            "round_ratio_sd": statistics.pstdev(rounds),
        }
        print(
            f"{variant}: process ratio {min(process):.4f}-{max(process):.4f} (sd {statistics.pstdev(process):.4f}); "
            f"first/last round {min(rounds):.4f}-{max(rounds):.4f} (sd {statistics.pstdev(rounds):.4f})",
            flush=True,
        )
    judge.close()
    if args.out:
        save_report(args.out, report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
