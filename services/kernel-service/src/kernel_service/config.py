"""The kernel service's deployment settings (``KernelServiceConfig``) and the environment variables they
fall back to, so that the runners' embedded services follow an operator's ``KS_MPS`` / ``KS_OWN_BASELINE``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Literal

#: The service's MPS setting where a config names none: the embedded services of the runners read it.
MPS_ENV = "KS_MPS"
#: The own-baseline setting where a config names none; the eval workers get the service's resolved
#: setting under the same name (``judging.own_baseline`` reads it there).
OWN_BASELINE_ENV = "KS_OWN_BASELINE"
Setting = Literal["auto", "on", "off"]


def setting_from_env(name: str) -> Setting:
    """An auto/on/off setting from the environment variable ``name`` (auto when unset)."""
    value = os.environ.get(name, "auto").strip().lower()
    for setting in ("auto", "on", "off"):
        if value == setting:
            return setting
    raise ValueError(f"{name}: expected auto, on or off; got {value!r}")


@dataclass
class KernelServiceConfig:
    """Deployment settings. ``gpus=None``: every visible GPU; ``[]``: CPU only."""

    gpus: list[int] | None = None
    cpu_workers: int = 1
    compile_workers: int | None = None  # None: 1 on CPU hosts, cores // 4 on GPU hosts
    cpu_threads: int = 1  # torch threads per CPU worker (timings on a shared CPU are noisy otherwise)
    dataset_sources: list[Path] = field(default_factory=list)
    work_dir: Path | None = None
    build_cache_dir: Path | None = None
    #: Evict least-recently-used builds past this many bytes (None: unbounded).
    build_cache_max_bytes: int | None = None
    #: Answer identical resubmissions from a result cache (off by default for the library: an embedding
    #: test that resubmits on purpose wants a fresh run; ``kernel-service serve`` turns it on).
    result_cache: bool = False
    result_cache_dir: Path | None = None
    result_cache_max_entries: int = 10_000
    #: "local": worker subprocesses on this host; "ray": compile and eval actors on a Ray cluster.
    executor: Literal["local", "ray"] = "local"
    ray_address: str | None = None  # "local" / None: start a local Ray; else an address ("auto", "ray://...")
    #: Custom Ray resources each compile / evaluation actor asks for, so builds run only on the build
    #: nodes and timing only on the GPU nodes (``ray start --resources '{"ks_build": 4}'``).
    ray_compile_resources: dict[str, float] = field(default_factory=dict)
    ray_eval_resources: dict[str, float] = field(default_factory=dict)
    #: Precompile torch/extension.h once per flag set for the compile workers (``fast_builds``).
    build_pch: bool = False
    #: Also build each solution with ``torch/extension.h`` includes made ``torch/types.h``, at the same
    #: time as the source as written, and judge the light one when it builds (``fast_builds``).
    light_include: bool = False
    compile_step: bool = True
    ref_timing_cache: bool = True
    ref_timing_cache_file: Path | None = None
    sandbox: str = "auto"
    max_jobs_per_worker: int = 50
    fsize_bytes: int = 1 << 30
    nproc: int | None = None
    #: NVIDIA MPS for the eval workers' GPUs ("auto", the default: when there are GPUs and the control tool
    #: exists; unset: ``KS_MPS``). Under MPS a reading is one call: a reading's calls cannot be overlapped,
    #: batched or shared, and each starts from a flushed L2 (``mps.py`` says what it costs: one client's
    #: fatal fault ends the judge's context too). Off, a short call is timed several to a reading and a
    #: reading's calls are only bounded from below by lone calls (docs/integrity.md).
    mps: Setting = field(default_factory=partial(setting_from_env, MPS_ENV))
    #: Read a kernel against the reference timed in the kernel's own process before the kernel loads there
    #: (``judging.own_baseline``; unset: ``KS_OWN_BASELINE``). "auto": under MPS, where a side process's
    #: mode for real calls would otherwise split the sides; "on": BackendBench on any GPU path too.
    own_baseline: Setting = field(default_factory=partial(setting_from_env, OWN_BASELINE_ENV))
