"""LLM settings from CLI flags, and an async OpenAI-compatible chat client."""

from __future__ import annotations

import os
from typing import Any

from pydantic import Field

from .schemas import StrictModel


class LLMConfig(StrictModel):
    """What a runner needs to call a model. Built from the ``run`` command's flags."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_tokens: int = Field(default=4096, gt=0)
    max_turns: int = Field(default=5, gt=0)
    timeout: float = Field(default=300.0, gt=0, description="seconds per model request")
    extra: dict[str, Any] = Field(default_factory=dict, description="benchmark-specific options")

    @property
    def api_key(self) -> str | None:
        return os.environ.get(self.api_key_env)
