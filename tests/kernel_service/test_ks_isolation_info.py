"""The service states its isolation where an operator sees it (issue 55): a line in ``serve``'s log at
startup, ``GET /v1/info``, and every answer's ``isolation`` field, all from the same report."""

from __future__ import annotations

import httpx
from kernel_service.judging import sandbox
from ks_serve import ServeProcess


def test_serve_logs_and_serves_its_isolation(serve_process: ServeProcess) -> None:
    info = httpx.get(f"{serve_process.url}/v1/info", timeout=30).json()
    assert info["service"] == "kernel" and info["sandbox"] == "auto"
    iso = info["isolation"]["eval"]
    launcher, why = sandbox.available_launcher("auto")  # the probe sees what the server saw
    assert iso["launcher"] == launcher
    assert iso["pid_namespace"] is (launcher != "none")
    assert iso["private_shm"] is (launcher == "bwrap") or launcher == "unshare"
    assert iso["rlimits"]["core"] == 0
    assert all(w in iso["fallbacks"] for w in why), (why, iso["fallbacks"])
    report = sandbox.IsolationReport.model_validate({k: v for k, v in iso.items() if k != "summary"})
    assert iso["summary"] == report.summary()
    assert info["isolation"]["compile"]["launcher"] == launcher
    # the startup line, one a pool, in the log an operator reads
    log = serve_process.log()
    for role in ("eval", "compile"):
        line = next(x for x in log.splitlines() if f"{role} workers' isolation: " in x)
        assert report.summary() in line or role == "compile", line
        if report.fallbacks:
            assert line.startswith("WARNING") and "missing: " in line, line
