"""An NVIDIA MPS control daemon of the service's own (``kernel-service serve --mps auto``, the default).

Without MPS, the judge's stream waiting on a side's event crosses GPU contexts, and the time-sliced
switch adds about 0.28 ms to every timed call, which the judge measures with null calls and subtracts;
the switch also means the judge's end of a call cannot pass work the candidate's context still runs on
another stream (measured: a side-stream kernel gains nothing). Under MPS clients run concurrently, so the
judge times differently there (issue 30): every reading is one call (``timing.calls_per_reading``: no set
of calls for a candidate to batch or overlap, L2 flushed before each), the go/done hop goes through stream
memory operations (``cuda_ipc.Hop``: 6.6 us, against 16 or 23 us by process with inter-process events),
and a candidate's time is bounded by the judge's copy of its outputs (``judging.copy_bound``: work hidden
on another stream past *done* delays that copy). The hop sits at one of two levels by process (~6.6 or
~10.9 us on the H100), and at the upper one a real call's path costs more than its null calls say, so the
candidate is moved to the lower level before its code loads (``placement._candidate_low``) and each side is read
against its own level (``judging.own_level``). A process also reads a real call's path at an offset of its
own (sd 0.2-0.3 us), so a KernelBench call under 10 us is timed in eight fresh process pairs
(``kernelbench.speedup._pairs``), and each process sits in one of two modes for real calls (~1.1 us apart on
mm) that neither level probe sees, one role keeping the slow mode for a service's life (mm 0.93-1.09 over
six services). So each kernel is read against the reference timed in its own process before it loads
(``judging.OWN_BASELINE_ENV``, auto under MPS). Measured on the H100 at this rule (BENCHMARKS.md, issue 30):
every reading-calls cheat within 0.91-1.00x of the honest rewrite, fidelity 10 of 10 within bounds, the
adversarial run 19/19, level 1 99/100 within 0.98-1.02 (2.40 s an evaluation), a 1x128 add on a busy host
within 4.8% of idle, the BackendBench smoke ops 0.985-1.012 against themselves; on a 2x H200 host both GPUs
judge correctly. Hence on by default where the host runs it; ``--mps off`` times short calls several to a
reading instead (``judging.lone_bound``).

One daemon a GPU, each with its own pipe and log dirs under the service's work dir (so it touches no
other MPS user of the host), started with ``CUDA_VISIBLE_DEVICES`` naming that GPU alone; the eval worker
of that GPU finds it through ``CUDA_MPS_PIPE_DIRECTORY`` and names the GPU as ``0``, since a client's
``CUDA_VISIBLE_DEVICES`` counts within its daemon's GPUs (:meth:`MpsDaemon.client_env`). Why one a GPU: a
fatal GPU fault of one client (an illegal address, a device-side assert) ends every client of that GPU's
server, and one daemon serving several GPUs refuses new clients on all of them until the faulted ones
have exited: with one daemon for two GPUs, 12 faulting kernels gave 3 of 24 honest jobs on the other GPU
false verdicts; with a daemon a GPU, honest clients of the other GPU ran on untouched (2x H200,
``bench/fault_probe.py``). On its own GPU a fault still ends the judge's context: the job is charged as a
crash in its phase (``worker._shared_context_fault``), and the worker's replacement waits until the GPU
takes clients again before it starts CUDA (``workers.gpu_ready``).
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

logger = logging.getLogger(__name__)
CONTROL = "nvidia-cuda-mps-control"


class MpsDaemon:
    """The control daemon of one GPU (``gpu``: its ``CUDA_VISIBLE_DEVICES`` entry as the service sees it)."""

    def __init__(self, root: Path, gpu: str) -> None:
        self.gpu = gpu
        self.pipe_dir = root / f"mps-pipe-{gpu}"
        self.log_dir = root / f"mps-log-{gpu}"
        self.running = False

    @property
    def env(self) -> dict[str, str]:
        """The daemon's own environment: its dirs, and its one GPU."""
        return {**self.client_env, "CUDA_VISIBLE_DEVICES": self.gpu}

    @property
    def client_env(self) -> dict[str, str]:
        """What a client of this daemon sets: its dirs, and GPU ``0`` (the daemon's only one)."""
        return {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
            "CUDA_VISIBLE_DEVICES": "0",
        }

    def start(self) -> bool:
        """Start the daemon; False (and a log line saying why) when this host cannot run one."""
        exe = shutil.which(CONTROL)
        if exe is None:
            logger.warning("MPS: %s not found; GPU timings carry the cross-context switch", CONTROL)
            return False
        self.pipe_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        done = subprocess.run([exe, "-d"], env={**os.environ, **self.env}, capture_output=True, text=True)
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip()
            logger.warning("MPS: the control daemon of GPU %s did not start: %s", self.gpu, why)
            return False
        self.running = True
        return True

    def stop(self) -> None:
        if not self.running:
            return
        exe = shutil.which(CONTROL)
        if exe is not None:
            subprocess.run(
                [exe], input="quit\n", env={**os.environ, **self.env}, capture_output=True, text=True
            )
        self.running = False
