"""A submission cannot reach another submission's builds in the shared build cache.

Every solution builds into a dir of its own under the cache (``build_cache.dir_for``), but the workers may
write the whole cache; a submission's code ran with that right twice: in the compile worker (its import,
its lazy run) and in its eval side processes. It could replace another solution's extension before that
one loads it, or leave files in its dir. Now the compile worker imports it in a child confined to its job's
dirs (``workers.forked``), and a side may write only its own job's build dir. Real pools, a real hostile
solution that tries at import, in ``__init__`` and in ``forward``; a victim's build dir beside its own.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kernel_service.judging import sandbox
from ks_build_jobs import build_job, compile_only, compile_then_judge

pytestmark = pytest.mark.skipif(
    sandbox.landlock_abi() < 1, reason="needs Landlock (DESIGN.md: dev, CI and the GPU hosts have ABI 7)"
)

#: Writes into, and reads from, the build dir beside its own, at import (compile worker and each side),
#: in ``__init__`` and in ``forward`` (sides); prints what happened; answers correctly either way.
HOSTILE = r"""
import json
import os
from pathlib import Path
import torch.nn as nn

VICTIM = Path(os.environ["TORCH_EXTENSIONS_DIR"]).parent / "victim"

def attempt(where):
    got = {}
    for what, act in (
        ("plant", lambda: (VICTIM / f"planted-{where}-{os.getpid()}").write_text("x")),
        ("replace", lambda: (VICTIM / "victim_ext.so").write_bytes(b"trojan")),
        ("read", lambda: (VICTIM / "victim_ext.so").read_bytes()),
    ):
        try:
            act()
            got[what] = "done"
        except OSError as exc:
            got[what] = type(exc).__name__
    print("ATTEMPT", json.dumps({where: got}))

attempt("import")

class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        attempt("init")

    def forward(self, a, b):
        attempt("forward")
        return a + b
"""


def test_a_submission_neither_changes_nor_reads_another_submissions_builds(tmp_path: Path) -> None:
    victim = tmp_path / "build-cache" / "victim"
    victim.mkdir(parents=True)
    (victim / "victim_ext.so").write_bytes(b"the victim's extension")
    compiled, _, judged = compile_then_judge(
        tmp_path, build_job(HOSTILE, tmp_path / "build-cache" / "hostile")
    )
    assert compiled.result is not None and compiled.result["ok"], compiled
    assert judged.result is not None and judged.result["outcome"] == "correct", judged
    assert sorted(p.name for p in victim.iterdir()) == ["victim_ext.so"]
    assert (victim / "victim_ext.so").read_bytes() == b"the victim's extension"
    # it did try, where its code ran: in the compile worker's child and in the eval side
    tries = [
        json.loads(line.split("ATTEMPT", 1)[1])
        for reply in (compiled, judged)
        for line in (reply.result or {}).get("output", "").splitlines()
        if "ATTEMPT" in line
    ]
    seen = {where for t in tries for where in t}
    assert {"import", "init", "forward"} <= seen, tries
    assert all(result != "done" for t in tries for got in t.values() for result in got.values()), tries


def test_an_import_that_ends_its_process_is_answered_by_the_compile_worker(tmp_path: Path) -> None:
    """The import runs in a child: a solution that ends its process ends that child, and the compile
    worker answers for it (before, the worker itself died and the pool reported a crash)."""
    compiled, _ = compile_only(
        tmp_path, build_job("import os\nos._exit(7)\n", tmp_path / "build-cache" / "d")
    )
    assert compiled.result is not None and not compiled.result["ok"], compiled
    assert compiled.result["message"] == "the solution's import ended (7) without an answer", compiled.result
