"""ModelProvider: one foundation-model API behind a single verb."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True, slots=True)
class ModelRequest:
    model: str
    task: str
    prompt: str
    # JSON schema the answer must follow: every task asks for JSON output.
    output_schema: dict[str, Any]
    system: str | None = None
    max_tokens: int | None = None
    # The attempt's number as the job's attempt list shows it (attempt_no, the fence):
    # 1 for the first try; it keeps counting across an operator's replay.
    attempt_no: int = 1
    job_id: str = ""
    # Provider-specific knobs from the task input (the sim's ``simulate`` block).
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    text: str
    input_tokens: int
    output_tokens: int
    provider_request_id: str | None = None


class ModelProvider(Protocol):
    @property
    def name(self) -> str: ...

    def serves(self, model: str) -> bool:
        """Whether this provider answers for ``model``."""
        ...

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        """Call the model. Raises a ProviderError subclass (core/errors.py) on failure;
        never waits longer than timeout_seconds (ProviderTimeoutError)."""
        ...
