"""Make a bench script run from a checkout without installing: the project's source dirs on the path.

They go on ``sys.path`` (this process) and, absolute, on ``PYTHONPATH`` (the service's worker
subprocesses and a runner subprocess, which start elsewhere).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def use_sources(*runners: str) -> None:
    """Put ``src``, the kernel service and the given ``runners/<name>`` dirs first on both paths."""
    dirs = [
        ROOT / "src",
        ROOT / "services" / "kernel-service" / "src",
        *(ROOT / "runners" / r for r in runners),
    ]
    sys.path[:0] = [str(p) for p in dirs if str(p) not in sys.path]
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join([*(str(p) for p in dirs), *inherited])
