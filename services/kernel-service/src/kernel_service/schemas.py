"""The kernel service's one ``POST /v1/evaluate`` for both benchmarks: a KernelBench or a BackendBench
request, chosen by ``kind``, and either answer."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import Discriminator, RootModel, Tag

from benchmark_runner.schemas import EvalResultData

from .backendbench.schemas import BackendBenchEvalRequest
from .kernelbench.schemas import KernelEvalRequest, KernelEvalResponse

REQUEST_KINDS = ("kernelbench", "backendbench")


def _request_kind(value: Any) -> str:
    """The union's tag: ``kind``, defaulting to KernelBench so clients that never sent it keep working."""
    kind = value.get("kind", "kernelbench") if isinstance(value, dict) else getattr(value, "kind", None)
    return kind if isinstance(kind, str) else "kernelbench"


class EvaluateAnyRequest(
    RootModel[
        Annotated[
            Annotated[KernelEvalRequest, Tag("kernelbench")]
            | Annotated[BackendBenchEvalRequest, Tag("backendbench")],
            Discriminator(
                _request_kind,
                custom_error_type="invalid_kind",
                custom_error_message=f"kind must be one of {list(REQUEST_KINDS)} (absent: 'kernelbench')",
            ),
        ]
    ]
):
    """Body of ``POST /v1/evaluate``: a KernelBench or a BackendBench request, chosen by ``kind``."""

    @property
    def dataset(self) -> str:
        """What the tenant allowlist is checked against (the framework reads ``body.dataset``)."""
        return self.root.dataset


class EvaluateAnyResponse(RootModel[KernelEvalResponse | EvalResultData]):
    """Answer of ``POST /v1/evaluate``: a :class:`KernelEvalResponse`, or for BackendBench the generic
    :class:`EvalResultData` (score = overall, the full BackendBench verdict under ``details``)."""
