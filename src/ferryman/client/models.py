"""The API's objects as typed, immutable models (pydantic).

Every model accepts fields it does not know (the API may add fields; an older client
keeps working) and keeps the JSON it was read from in ``api_json``, so a program can
pass on exactly what the API said. Times are timezone-aware ``datetime`` values in UTC.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Generic, Self, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    model_validator,
)

from ferryman.core.errors import FailureClass
from ferryman.core.job import TERMINAL_STATUSES, JobStatus

T = TypeVar("T")

# A failure class this client knows, as the enum; a newer one the API may add, as text.
KnownOrNewClass = Annotated[FailureClass | str, Field(union_mode="left_to_right")]

__all__ = [
    "Attempt",
    "BatchProblem",
    "Event",
    "FailureClass",
    "Job",
    "JobFailure",
    "JobHistory",
    "JobStatus",
    "JobWait",
    "Page",
    "ResultFailure",
    "SubmitItem",
    "Submitted",
]


class ApiModel(BaseModel):
    """A JSON object of the API: unknown fields kept, the original JSON in ``api_json``."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    _api_json: Any = PrivateAttr(default=None)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_api_json(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        model = handler(data)
        if isinstance(data, dict):
            model._api_json = data
        return model

    @property
    def api_json(self) -> Any:
        """The JSON object exactly as the API sent it."""
        if self._api_json is None:
            return self.model_dump(mode="json", by_alias=True)
        return self._api_json


class JobFailure(ApiModel):
    """Why a job failed (or, while a retry is scheduled, why its last attempt did)."""

    code: str
    failure_class: KnownOrNewClass = Field(alias="class")
    message: str = ""


class ResultFailure(ApiModel):
    """Why a finished job's result cannot be served (list items only)."""

    code: str
    message: str = ""


class JobWait(ApiModel):
    """Why a queued job (or one waiting for its retry) is not run now: the provider
    behind its model is paused."""

    reason: str
    provider: str
    since: datetime | None = None
    # True: paused by ferryman (the provider refused its credentials), resumed by itself
    # once a check passes (next_check_at; None: an operator resumes it). False: by an
    # operator.
    automatic: bool = False
    next_check_at: datetime | None = None


class Submitted(ApiModel):
    """The answer to a submission: the job, new or (``replayed``) the one the key maps to."""

    job_id: str
    status: JobStatus
    created_at: datetime | None = None
    correlation_id: str | None = None
    # From the Idempotent-Replayed header: the key already named this job.
    replayed: bool = False


class WebhookSecret(ApiModel):
    """A tenant's new webhook signing secret (``whsec_...``), shown once; the secret it
    replaced keeps signing beside it for ``previous_valid_for_seconds``."""

    secret: str
    previous_valid_for_seconds: int = 0


class SubmitItem(BaseModel):
    """One job for ``submit_many``: what ``submit`` takes, as one object. A plain dict
    with the same keys does as well."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str
    input: dict[str, Any]
    model: str | None = None
    metadata: dict[str, Any] | None = None
    # Where to POST the outcome, signed (docs/getting-results.md).
    webhook_url: str | None = None
    # A new uuid4 when absent, so a retried batch never makes a second job of it.
    idempotency_key: str | None = None


class ProblemField(ApiModel):
    loc: list[str | int] = Field(default_factory=list)
    msg: str = ""


class BatchProblem(ApiModel):
    """Why one item of a batch was refused: the problem a single submit of it would get
    (``status`` is its HTTP status, ``code`` what to branch on). The others are not
    affected."""

    type: str = ""
    title: str = ""
    status: int
    detail: str = ""
    code: str
    errors: list[ProblemField] = Field(default_factory=list)


class Job(ApiModel):
    job_id: str
    status: JobStatus
    task: str | None = None
    model: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    attempt_count: int = 0
    correlation_id: str | None = None
    metadata: dict[str, Any] | None = None
    result: Any = None
    result_error: ResultFailure | None = None
    error: JobFailure | None = None
    cancel_requested: bool = False
    waiting: JobWait | None = None

    @property
    def terminal(self) -> bool:
        """SUCCEEDED, FAILED or CANCELLED: nothing about it changes any more."""
        return self.status in TERMINAL_STATUSES


class Attempt(ApiModel):
    """One model call of a job (a claim by a worker) and how it ended."""

    attempt_no: int
    attempt_id: str | None = None
    worker_id: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    # succeeded, retry, failed, lease_lost, abandoned, cancelled (None while it runs).
    outcome: str | None = None
    failure_class: KnownOrNewClass | None = None
    error_code: str | None = None
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    model: str | None = None
    provider_model: str | None = None
    finish_reason: str | None = None
    cost_usd: float | None = None
    provider_request_id: str | None = None
    raw_output: str | None = None


class Event(ApiModel):
    """One fact of a job's history: ACCEPTED, CLAIMED, RETRY_SCHEDULED, SUCCEEDED, ..."""

    seq: int
    at: datetime
    kind: str
    detail: dict[str, Any] = Field(default_factory=dict)


class JobHistory(ApiModel):
    events: list[Event] = Field(default_factory=list)
    attempts: list[Attempt] = Field(default_factory=list)


class Page(ApiModel, Generic[T]):
    """One page of a list, newest first; ``next_cursor`` asks for the next one."""

    data: list[T]
    next_cursor: str | None = None
