"""The ops a BackendBench suite holds: what the service's ``list_tasks`` serves and a runner lists.

Read without importing torch where the suite's data is enough (smoke, facto, and opinfo under the torch
its index was built with); the torchbench trace and an opinfo index from another torch need torch, and
the modules that import it are imported only then. It sits above ``catalog`` (the data) and the modules
that build inputs, so ``catalog`` imports none of them.
"""

from __future__ import annotations

from pathlib import Path

from .catalog import FACTO_OPS, SMOKE_OPS, UnknownOpError, built_for_this_torch, opinfo_index


def opinfo_ops() -> list[str]:
    """The opinfo suite's overloads that can be checked here."""
    if built_for_this_torch():
        return list(opinfo_index())
    from .opinfo import checkable_here  # imports torch

    return [op for op in opinfo_index() if checkable_here(op)]


def suite_ops(suite: str, trace_file: str | None = None) -> list[str]:
    """The ops a suite holds, in a stable order (what ``list_tasks`` serves)."""
    if suite == "smoke":
        return list(SMOKE_OPS)
    if suite == "facto":
        return list(FACTO_OPS)
    if suite == "torchbench":
        from .traces import trace_ops  # imports torch

        return trace_ops(Path(trace_file) if trace_file else None)
    if suite == "opinfo":
        return opinfo_ops()
    raise UnknownOpError(f"unknown suite {suite!r}; expected smoke, opinfo, torchbench or facto")
