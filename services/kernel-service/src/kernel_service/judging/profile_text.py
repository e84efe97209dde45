"""An answer's advisory ``profile`` as the table an agent reads: both sides' heaviest kernels (on a CPU,
PyTorch ops) with calls and times, the share of each call outside them, and ncu's metrics of the
candidate's heaviest kernel, trimmed to a character budget. Plain data in, text out (no torch), so both
runners and the RL environments use the same table.
"""

from __future__ import annotations

from typing import Any

#: Rows of each side's table before the budget trims them.
PROFILE_ROWS = {"candidate": 10, "reference": 5}
#: A kernel's name in the table is cut to this many characters (C++ template names run to hundreds).
PROFILE_NAME_CHARS = 90
_NCU = (
    ("sm_throughput_pct", "SM throughput", "% of peak"),
    ("dram_throughput_pct", "DRAM throughput", "% of peak"),
    ("achieved_occupancy_pct", "achieved occupancy", "%"),
    ("registers_per_thread", "registers/thread", ""),
    ("gpu_time_us", "time", " us"),
)


def profile_table(profile: dict[str, Any], budget: int, titles: dict[str, str]) -> str | None:
    """``profile`` as a table of at most ``budget`` characters (``titles``: each side's name in it, by
    role): rows go from the end of the longest list (the reference's first) until it fits. None without
    a profiled side."""
    sides = {role: profile.get(role) for role in ("candidate", "reference")}
    if not any(isinstance(v, dict) and v.get("kernels") for v in sides.values()):
        return None
    rows = {
        role: list(side.get("kernels") or [])[: PROFILE_ROWS[role]] if isinstance(side, dict) else []
        for role, side in sides.items()
    }
    while True:
        text = _lines(profile, sides, rows, titles)
        if len(text) <= budget or not any(rows.values()):
            break
        longest = max(rows, key=lambda r: (len(rows[r]), r == "reference"))
        rows[longest].pop()
    return text if len(text) <= budget else text[: budget - 5] + "\n[...]"


def _lines(
    profile: dict[str, Any],
    sides: dict[str, Any],
    rows: dict[str, list[dict[str, Any]]],
    titles: dict[str, str],
) -> str:
    cuda = str(profile.get("device", "")).startswith("cuda")
    what = "kernel" if cuda else "op"
    on = f" on {profile['input']}" if profile.get("input") else ""
    lines = [f"Profile of one untimed call{on} ({profile.get('source') or 'torch.profiler'}; advisory):"]
    for role in ("candidate", "reference"):
        side, title = sides[role], titles[role]
        if not isinstance(side, dict):
            continue
        if side.get("error") and not side.get("kernels"):
            lines.append(f"{title}: not profiled ({side['error']})")
            continue
        facts = []
        if isinstance(side.get("call_us"), int | float):
            facts.append(f"{side['call_us']:.1f} us a call")
        count = side.get("kernel_count") or len(side.get("kernels") or [])
        facts.append(f"{count} {what}s")
        if isinstance(side.get("outside_share"), int | float):
            facts.append(f"{side['outside_share']:.0%} of the call outside {what}s")
        lines.append(f"{title}: " + ", ".join(facts))
        shown = rows[role]
        if shown:
            lines.append(f"  {'time_us':>10}  {'calls':>5}  {what}")
        for k in shown:
            name = str(k.get("name", "?"))
            name = name if len(name) <= PROFILE_NAME_CHARS else name[: PROFILE_NAME_CHARS - 3] + "..."
            lines.append(f"  {float(k.get('time_us') or 0):>10.1f}  {int(k.get('calls') or 0):>5}  {name}")
        if len(shown) < count:
            lines.append(f"  ... {count - len(shown)} more")
    ncu = profile.get("ncu")
    if isinstance(ncu, dict) and isinstance(ncu.get("metrics"), dict) and ncu["metrics"]:
        m = ncu["metrics"]
        parts = [
            f"{label} {m[key]:.1f}{unit}" for key, label, unit in _NCU if isinstance(m.get(key), int | float)
        ]
        kernel = str(ncu.get("kernel") or "")[:PROFILE_NAME_CHARS]
        lines.append(f"ncu, your heaviest kernel ({kernel}): " + ", ".join(parts))
    elif cuda and isinstance(ncu, dict) and ncu.get("error"):
        lines.append(f"ncu: not run ({str(ncu['error'])[:200]})")
    return "\n".join(lines)
