"""Hostile submissions through the real service over HTTP (issue 7): cheats that do not outlive their job,
and escapes. Each case is a real solution file in ``cases/``; see adv_helpers for the rules."""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from adv_helpers import FAST, FSIZE, AdversarialService, assert_healthy, evaluate, source
from kernel_service.judging.outputs import TIMED_SAMPLE_ELEMENTS
from kernel_service.kernelbench.schemas import KernelEvalResponse

# ---- speed and correctness cheats -----------------------------------------------------------------

CHEATS: list[Any] = [
    pytest.param("last_call_only", {}, id="last_call_only"),
    pytest.param("lazy_subclass", {}, id="lazy_subclass"),
    pytest.param("bf16_compute", {}, id="bf16_compute"),
    pytest.param("checked_seeds_only", {}, id="checked_seeds_only"),
    pytest.param("mutate_inputs", {}, id="mutate_inputs"),
    pytest.param("uninitialized_output", {}, id="uninitialized_output"),
    pytest.param("steal_reference_output", {"perf_trials": 9}, id="steal_reference_output"),
    pytest.param("zero_reference_weights", {}, id="zero_reference_weights"),
]


@pytest.mark.parametrize(("case", "options"), CHEATS)
def test_cheat_gets_no_undeserved_correct(client: httpx.Client, case: str, options: dict[str, Any]) -> None:
    res, _ = evaluate(client, source(case), **options)
    assert res.outcome != "correct", (
        f"{case}: judged correct with speedup {res.speedup} ({res.message}); "
        f"ref {res.ref_timing and res.ref_timing.median} ms, new {res.new_timing and res.new_timing.median} ms"
    )
    assert res.reward < 0
    assert_healthy(client)


def test_a_cached_reference_timing_still_checks_every_timed_output(client: httpx.Client) -> None:
    """With the reference's timing from the cache, each timed candidate output is still compared with an
    (untimed) reference output on its seed: a kernel wrong on two of 30 timed calls is caught every time
    (checking three drawn outputs plus the last, as before, missed it about 4 times in 5)."""
    honest = source("honest")
    for _ in range(2):  # the first fills the cache, the second must be served from it
        res, _ = evaluate(client, honest, reuse_reference_timing=True)
        assert res.outcome == "correct", res.message
    assert res.ref_timing_cached
    res, _ = evaluate(client, source("few_timed_calls_wrong"), reuse_reference_timing=True)
    assert res.outcome == "incorrect", f"judged {res.outcome} x{res.speedup}"
    assert "timed call" in res.message, res.message
    assert_healthy(client)


REF_BIG = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(1100, 1024)]  # 1.13M elements: timed outputs are sampled, not cloned whole

def get_init_inputs():
    return []
"""


def test_skipping_part_of_a_large_output_when_timed_is_caught(client: httpx.Client) -> None:
    """Outputs over ``TIMED_SAMPLE_ELEMENTS`` are checked at random positions drawn after each timed call:
    skipping a tenth of the output on timed calls only is still an ``incorrect``."""
    assert 1100 * 1024 > TIMED_SAMPLE_ELEMENTS
    body = {"reference": REF_BIG, "solution": source("skip_rows_when_timed"), "options": FAST}
    res = KernelEvalResponse.model_validate(client.post("/v1/evaluate", json=body).json())
    assert res.correctness_trials_passed == FAST["correctness_trials"], res.message
    assert res.outcome == "incorrect" and "timed call" in res.message, res.message
    honest = {**body, "solution": REF_BIG.replace("class Model(", "class ModelNew(")}
    ok = KernelEvalResponse.model_validate(client.post("/v1/evaluate", json=honest).json())
    assert ok.outcome == "correct", ok.message


def test_stale_cache_gains_nothing(client: httpx.Client) -> None:
    """Caching by input address: fresh inputs per trial make it either wrong (stale hit) or plain work."""
    res, _ = evaluate(client, source("stale_cache_by_pointer"))
    assert res.outcome != "correct" or (res.speedup is not None and res.speedup < 1.5), res.speedup
    assert_healthy(client)


def test_default_fp32_tolerance_is_tight(client: httpx.Client) -> None:
    """bf16 compute fails at the default 1e-4; a loose tolerance is the caller's explicit choice and is reported."""
    res, _ = evaluate(client, source("bf16_compute"))
    assert (res.outcome, res.atol, res.rtol) == ("incorrect", 1e-4, 1e-4), res.message
    loose, _ = evaluate(client, source("bf16_compute"), tolerance=0.5)
    assert loose.atol == loose.rtol == 0.5  # whatever the verdict, the answer says how loose it was


def test_reference_op_is_reported_as_no_custom_kernel(client: httpx.Client) -> None:
    res, body = evaluate(client, source("reference_op_only"))
    assert res.outcome == "correct", res.message  # it is right: the flag, not the verdict, tells
    assert '"uses_custom_kernel":false' in body.replace(" ", ""), "response lacks uses_custom_kernel=false"


# ---- escapes and faults ---------------------------------------------------------------------------


def test_secrets_do_not_leak(adv: AdversarialService, client: httpx.Client) -> None:
    res, body = evaluate(client, source("read_secrets", marker=adv.marker, keys_file=adv.keys_file))
    assert res.outcome == "correct", res.message
    assert adv.marker not in body, f"a secret of the service leaked into the answer:\n{res.output}"


def test_other_workers_files_are_out_of_reach(adv: AdversarialService, client: httpx.Client) -> None:
    planted, _ = evaluate(client, source("plant_file", marker=adv.marker))
    assert planted.outcome == "correct", planted.message
    res, body = evaluate(client, source("read_other_workers", marker=adv.marker, outside_dir=adv.outside_dir))
    assert res.outcome == "correct", res.message
    assert not (adv.outside_dir / "written-by-solution.txt").exists(), "solution wrote outside its temp dir"
    assert f"tenant A secret {adv.marker}" not in body, f"read another worker's file:\n{res.output}"


def test_the_shared_kernel_cache_is_read_only_to_the_candidate(
    adv: AdversarialService, client: httpx.Client
) -> None:
    """PyTorch's NVRTC kernel cache is shared by a judge's sides (a reference process loads what is
    there): the submission sees where it is, and cannot write it."""
    res, _ = evaluate(client, source("poison_kernel_cache", marker=adv.marker))
    assert res.outcome == "correct", res.message
    assert "POISON refused:" in (res.output or ""), res.output
    assert "nvrtc-cache" in (res.output or ""), res.output
    # os.walk, not rglob: the job's directory may still be being removed after the answer
    planted = [
        n
        for _, dirs, files in os.walk(adv.work_dir)
        for n in dirs + files
        if n.startswith(f"poison-{adv.marker}")
    ]
    assert not planted


def test_no_network(adv: AdversarialService, client: httpx.Client) -> None:
    received: list[bytes] = []
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.2)
    port = srv.getsockname()[1]
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                received.append(conn.recv(100) or b"<connected>")

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        res, _ = evaluate(client, source("network_loopback", port=port, marker=adv.marker))
    finally:
        stop.set()
        t.join(2)
        srv.close()
    assert res.outcome == "correct", res.message
    assert not received, f"the solution reached the host's loopback: {received}"


def _marker_processes(marker: str) -> list[int]:
    pids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if marker.encode() in (p / "cmdline").read_bytes():
                    pids.append(int(p.name))
            except OSError:
                pass
    return pids


def test_no_lingering_processes(adv: AdversarialService, client: httpx.Client) -> None:
    marker = adv.marker + "linger"
    try:
        res, _ = evaluate(client, source("lingering_daemon", marker=marker))
        assert res.outcome == "correct", res.message
        deadline = time.monotonic() + 5
        while _marker_processes(marker) and time.monotonic() < deadline:
            time.sleep(0.2)
        left = _marker_processes(marker)
        assert not left, f"{len(left)} processes of the submission outlived its evaluation"
    finally:
        for pid in _marker_processes(marker):  # never leave them behind, even when the defence is missing
            try:
                os.kill(pid, 9)
            except OSError:
                pass
    assert_healthy(client)


def test_huge_file_is_capped(client: httpx.Client) -> None:
    res, _ = evaluate(client, source("huge_file"))
    assert res.output is not None and "HUGE_FILE_WRITTEN=" in res.output, res.message
    written = int(res.output.split("HUGE_FILE_WRITTEN=")[1].split()[0])
    assert written <= FSIZE, f"wrote {written} bytes past the {FSIZE}-byte limit"
    assert "File too large" in res.output
    assert_healthy(client)


def test_host_memory_exhaustion_fails_only_the_submission(client: httpx.Client) -> None:
    res, _ = evaluate(client, source("host_memory"))
    assert res.outcome in ("execution_failure", "sandbox_error"), res.message
    assert_healthy(client)


def test_killing_the_service_fails(adv: AdversarialService, client: httpx.Client) -> None:
    res, _ = evaluate(client, source("kill_service", service_pid=os.getpid()))
    assert adv.server.url and httpx.get(f"{adv.server.url}/healthz", timeout=10).status_code == 200
    assert res.outcome in ("correct", "execution_failure"), res.message
    assert_healthy(client)
