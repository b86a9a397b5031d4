"""ModelProvider: one foundation-model API behind a single verb.

A provider is one configured account at one API (``[providers.NAME]``: an OpenAI-
compatible server, Anthropic, Bedrock, the simulated model). Jobs name a model
*alias* (``[models.ALIAS]``); the catalog resolves it to a provider and the
provider's own model id, which is what ``ModelRequest.model`` carries.

A provider maps every failure of its API to one of ferryman's ProviderError classes
(core/errors.py), so the failure class, and with it whether to retry, is decided
the same way for every provider.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Protocol


class FinishReason(enum.StrEnum):
    """Why the model stopped, in ferryman's terms (each provider maps its own)."""

    COMPLETE = "complete"  # it said all it had to say (or called the output tool)
    LENGTH = "length"  # it ran into max_tokens: a structured answer is cut off
    OTHER = "other"  # anything else the provider reports (kept as given)


@dataclass(frozen=True, slots=True)
class ModelRequest:
    # The provider's own model id (the alias already resolved).
    model: str
    task: str
    prompt: str
    # JSON schema the answer must follow: every task asks for JSON output.
    output_schema: dict[str, Any]
    system: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    # The attempt's number as the job's attempt list shows it (attempt_no, the fence):
    # 1 for the first try; it keeps counting across an operator's replay.
    attempt_no: int = 1
    job_id: str = ""
    # Provider-specific knobs from the task input (the sim's ``simulate`` block).
    extras: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ModelResponse:
    # The answer: for every task, JSON text meant to match output_schema.
    text: str
    # What the provider reported the call used; None when it reported nothing (a
    # server without usage support): unknown, never 0, so it is never billed as free.
    input_tokens: int | None
    output_tokens: int | None
    provider_request_id: str | None = None
    # The model that actually answered (a provider may serve a dated snapshot).
    model: str | None = None
    finish_reason: FinishReason = FinishReason.COMPLETE
    # The provider's own word for why it stopped, when it is not plainly COMPLETE.
    finish_detail: str | None = None


class ModelProvider(Protocol):
    @property
    def name(self) -> str:
        """The configured provider name (``[providers.NAME]``)."""
        ...

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        """Call the model. Raises a ProviderError subclass (core/errors.py) on failure;
        never waits longer than timeout_seconds without the provider showing progress
        (ProviderTimeoutError)."""
        ...

    async def check(self) -> None:
        """A cheap call that proves the provider is reachable and takes our key (the
        models endpoint, say). Raises the ProviderError that a real call would."""
        ...

    async def aclose(self) -> None:
        """Let go of connections and threads (the process is stopping)."""
        ...
