"""``create-benchmark-runner``: generate a runner repo from the template and keep it updatable."""

from .generator import (
    NAME_PATTERN,
    PAYLOAD_TYPES,
    TEMPLATE_DIR,
    GenerateResult,
    RunnerSpec,
    ScaffoldError,
    TemplateRef,
    generate,
    sync_template_repo,
    template_drift,
    update,
)

__all__ = [
    "NAME_PATTERN",
    "PAYLOAD_TYPES",
    "TEMPLATE_DIR",
    "GenerateResult",
    "RunnerSpec",
    "ScaffoldError",
    "TemplateRef",
    "generate",
    "sync_template_repo",
    "template_drift",
    "update",
]
