"""Where a bench script's JSON report goes: one place, so every report is written the same way."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def save_report(path: Path, report: dict[str, Any]) -> None:
    """``report`` as indented JSON at ``path`` (its folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1) + "\n")
