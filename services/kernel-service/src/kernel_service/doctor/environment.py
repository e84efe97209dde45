"""The environment rows of the doctor's table: driver, CUDA, torch, GPUs, MPS, the sandbox layers, nvcc
and ncu. In-process, from this host (``nvidia-smi``, the tools on the PATH, what the service's workers
reported when they started); with ``--url``, from what the service's answers say (hardware, versions,
timing method, each worker's isolation report), the rest ``unknown``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from typing import Any

from ..judging.sandbox import available_launcher
from .report import Environment


def _run(cmd: list[str], timeout: float = 20.0) -> str | None:
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return res.stdout.strip() if res.returncode == 0 else None


def nvidia_smi() -> tuple[str | None, list[str]]:
    """The driver version and each GPU the service would use (index: name), or (None, []) without
    ``nvidia-smi``. ``nvidia-smi`` lists every GPU of the host; ``CUDA_VISIBLE_DEVICES`` (indices or
    UUIDs) narrows the list to those its workers see, as ``serve --gpus all`` does."""
    if shutil.which("nvidia-smi") is None:
        return None, []
    out = _run(["nvidia-smi", "--query-gpu=index,uuid,name,driver_version", "--format=csv,noheader"])
    if not out:
        return None, []
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    rows = [r for r in rows if len(r) > 3]
    driver = rows[0][3] if rows else None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        wanted = [v.strip() for v in visible.split(",") if v.strip()]
        rows = [r for r in rows if any(w == r[0] or (len(w) > 3 and r[1].startswith(w)) for w in wanted)]
    return driver, [f"{r[0]}: {r[2]}" for r in rows]


def tool(name: str, version_args: list[str] | None = None) -> str:
    """``<version> (<path>)`` of a tool on the PATH, or ``not found``."""
    path = shutil.which(name)
    if path is None:
        return "not found"
    if version_args is None:
        return path
    out = _run([path, *version_args]) or ""
    release = re.search(r"release ([0-9.]+)|Version ([0-9.]+)", out)
    version = (release.group(1) or release.group(2)) if release else "version unknown"
    return f"{version} ({path})"


def describe_isolation(iso: dict[str, Any] | None) -> tuple[str | None, str | None]:
    """The namespaces and Landlock rows from a worker's isolation report."""
    if not iso:
        return None, None
    launcher = iso.get("launcher", "none")
    ns = [k for k in ("pid", "net", "mount", "ipc") if iso.get(f"{k}_namespace")]
    namespaces = f"{', '.join(ns)} ({launcher})" if ns else f"none (launcher {launcher})"
    abi = int(iso.get("landlock_abi") or 0)
    if iso.get("landlock_fs"):
        parts = ["files"] + [
            n for k, n in (("landlock_net", "TCP"), ("landlock_scoped_signals", "signals")) if iso.get(k)
        ]
        landlock = f"ABI {abi}: {', '.join(parts)}"
    else:
        landlock = f"not applied (ABI {abi})"
    return namespaces, landlock


def bubblewrap_row(iso: dict[str, Any] | None, in_process: bool) -> str | None:
    if iso and iso.get("launcher") == "bwrap":
        return "works (the workers' launcher)"
    if not in_process:
        return None if not iso else f"not used (launcher {iso.get('launcher')})"
    if shutil.which("bwrap") is None:
        return "not installed (unshare or none instead)"
    launcher, _ = available_launcher("bwrap")
    return (
        "works, not used (--sandbox)" if launcher == "bwrap" else "installed, cannot create namespaces here"
    )


def environment(
    *,
    target: str,
    path: str,
    in_process: bool,
    env_info: dict[str, Any],
    mps: str | None,
    settings: dict[str, Any],
) -> Environment:
    """The rows known before any job ran; ``private_dev_shm`` and (``--url``) more are filled in later."""
    iso = env_info.get("isolation")
    namespaces, landlock = describe_isolation(iso)
    driver, gpus = nvidia_smi() if in_process else (None, [])
    if not gpus and env_info.get("hardware") and path == "gpu":
        gpus = [str(env_info["hardware"])]
    return Environment(
        target=target,
        path="gpu" if path == "gpu" else "cpu",
        driver=driver if in_process else None,
        cuda=env_info.get("cuda_version") or ("none" if path == "cpu" else None),
        torch=env_info.get("torch_version"),
        gpus=gpus,
        mps=mps,
        namespaces=namespaces,
        landlock=landlock,
        bubblewrap=bubblewrap_row(iso, in_process),
        nvcc=tool("nvcc", ["--version"]) if in_process else None,
        ncu=tool("ncu", ["--version"]) if in_process else None,
        settings=settings,
        isolation=iso,
    )
