"""The ``simulate`` block a task input may carry, read only by the simulated model.

It is validated at intake like the rest of the input, so a typo in a script entry
is a 422 before anything is stored, never a surprise inside a worker.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SimulatedOutcome = Literal[
    "ok",
    "throttle",
    "timeout",
    "server_error",
    "malformed",
    "invalid_schema",
    "refuse",
    "bad_request",
]


class SimulateOptions(BaseModel):
    """How the ``sim`` model behaves for this job: latency and a per-attempt script."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    latency_ms: int = Field(default=0, ge=0, le=600_000)
    # Attempt n follows entry n; the last entry repeats. None means always "ok".
    script: list[SimulatedOutcome] | None = Field(default=None, min_length=1, max_length=100)
    retry_after_seconds: float = Field(default=1.0, ge=0, le=3600)
