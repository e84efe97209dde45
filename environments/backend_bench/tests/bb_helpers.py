"""What the scripted model answers for smoke/relu: a wrong kernel, then (having read the verdict) a
correct one."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_service.service import KernelService

TASK = "smoke/relu"
#: Returns its input: wrong on every negative element.
BROKEN = "import torch\n\ndef relu_kernel_impl(x):\n    return x.clone()\n"
#: ReLU without calling relu (which the service would flag): correct.
RIGHT = "import torch\n\ndef relu_kernel_impl(x):\n    return x.clamp(min=0)\n"


def answer(code: str) -> dict[str, Any]:
    return {"content": f"Here is my kernel.\n```python\n{code}```"}


SCRIPT: dict[str, list[dict[str, Any]]] = {TASK: [answer(BROKEN), answer(RIGHT)]}


@dataclass
class RunIds:
    """ASGI middleware: the ``X-Run-Id`` of every POST /v1/evaluate, in arrival order."""

    app: Any
    seen: list[str] = field(default_factory=list)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/v1/evaluate":
            self.seen.append(dict(scope["headers"]).get(b"x-run-id", b"").decode())
        await self.app(scope, receive, send)


@dataclass
class Service:
    url: str
    service: KernelService
    run_ids: RunIds
