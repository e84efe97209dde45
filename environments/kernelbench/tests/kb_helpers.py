"""What the scripted model submits for L1_2_ReLU: a broken kernel, then (having read the compiler's
error) a correct one, then ``finish``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kernel_service.service import KernelService

TASK = "L1_2_ReLU"
#: Does not compile (a Python syntax error): the service answers compilation_failure with the log.
BROKEN = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x)\n        return x\n"
#: ReLU without calling relu: correct.
RIGHT = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.clamp_min(x, 0.0)\n"


def run_kernel(python: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_kernel", "arguments": {"python": python}}]}


FINISH: dict[str, Any] = {"tool_calls": [{"name": "finish", "arguments": {}}]}
SCRIPT: dict[str, list[dict[str, Any]]] = {TASK: [run_kernel(BROKEN), run_kernel(RIGHT), FINISH]}


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
