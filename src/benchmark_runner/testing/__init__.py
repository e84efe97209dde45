"""Test helpers shipped with the library, so generated runners can test against them too.

Names are imported lazily so ``python -m benchmark_runner.testing.fake_llm`` does not import the
module twice (runpy warns when the package already imported it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .fake_llm import FakeLLMServer, FakeToolCall, ScriptEntry, load_script

__all__ = ["FakeLLMServer", "FakeToolCall", "ScriptEntry", "load_script"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import fake_llm

        return getattr(fake_llm, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
