"""What each response looks like, as models for the OpenAPI document.

The routes build their bodies as plain JSON (http/views.py: fast, and a stored
result is spliced in as it was stored), so these models are never used to
serialise; they are ``response_model`` for the document only, and the bounded
schemathesis run (tests/hostile/test_openapi_fuzz.py) checks every answer the
app gives against them, so the two cannot drift apart unnoticed.

Every timestamp is a ``date-time`` string: RFC 3339, UTC, microseconds, ``Z``
(http/timestamps.py). Fields are snake_case; statuses, event kinds and failure
classes UPPER_CASE; outcomes, codes and key states lower_case.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, DispatchState, EventKind, JobStatus
from ferryman.ports.control import AuditAction
from ferryman.services.access import KeyState

Timestamp = datetime
# Any JSON value: a task's output, a job's metadata, an event's detail.
JsonObject = dict[str, Any]


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True)


# --- problems -----------------------------------------------------------------------


class ProblemFieldError(_Body):
    """Where a request is wrong, and how (validation errors only)."""

    loc: list[str | int] = Field(
        description="Path to the offending value, e.g. body, input, prompt"
    )
    msg: str


class Problem(_Body):
    """An RFC 9457 problem: the body of every 4xx and 5xx answer."""

    model_config = ConfigDict(
        frozen=True,
        json_schema_extra={
            "example": {
                "type": "https://ferryman.dev/problems/idempotency_key_mismatch",
                "title": "Idempotency-Key reused with a different request",
                "status": 422,
                "detail": "This Idempotency-Key was used with a different request.",
                "code": "idempotency_key_mismatch",
            }
        },
    )

    type: str = Field(description="A URI naming the kind of problem (its code).")
    title: str
    status: int
    detail: str
    code: str = Field(description="Stable, snake_case: what a program should branch on.")
    errors: list[ProblemFieldError] = Field(
        default_factory=list, description="Only on validation errors: each offending field."
    )


# --- jobs ---------------------------------------------------------------------------


class JobErrorBody(_Body):
    code: str
    class_: FailureClass = Field(alias="class")
    message: str


class ResultErrorBody(_Body):
    """Why a finished job's result cannot be served (list items only)."""

    code: str
    message: str


class Submission(_Body):
    """The answer to a submission, new or replayed."""

    job_id: str
    status: JobStatus
    created_at: Timestamp
    correlation_id: str


class BatchSubmission(Submission):
    """One batch item's job: a submission's answer, and whether it was an earlier job."""

    replayed: bool = Field(
        description="true when this item's idempotency_key named an existing job"
    )


class BatchResults(_Body):
    """One entry per submitted item, in order: its job, or the problem it got alone."""

    results: list[BatchSubmission | Problem]
    atomic_chunk_size: int = Field(
        ge=1,
        description=(
            "The items were stored in consecutive chunks of at most this many, each "
            "chunk all-or-nothing (its own transaction); items of different chunks are "
            "not stored together. At most 100; less where the engine's transactions "
            "hold fewer items."
        ),
    )


class JobSummary(_Body):
    job_id: str
    status: JobStatus
    task: str
    model: str
    created_at: Timestamp
    updated_at: Timestamp
    completed_at: Timestamp | None
    attempt_count: int
    correlation_id: str
    metadata: JsonObject | None
    error: JobErrorBody | None
    cancel_requested: bool


class JobWait(_Body):
    """Why a queued job (or one waiting for its retry) is not run now."""

    reason: Literal["provider_paused"]
    provider: str = Field(description="The provider behind the job's model")
    since: Timestamp
    automatic: bool = Field(
        description="true: ferryman paused it when the provider refused its credentials, "
        "and resumes it by itself once a check passes (next_check_at; null: an operator "
        "resumes it); false: an operator paused it"
    )
    next_check_at: Timestamp | None


class Job(JobSummary):
    """A job as its tenant sees it, with its validated output once it succeeded."""

    result: Any = Field(description="The validated output (any JSON), or null.")
    result_error: ResultErrorBody | None
    waiting: JobWait | None = Field(
        description="While it is QUEUED or RETRY_SCHEDULED and the provider behind its "
        "model is paused: which provider, since when and how it resumes; else null."
    )


class JobPage(_Body):
    data: list[Job]
    next_cursor: str | None = Field(
        description="Pass as cursor for the next page; null at the end."
    )


class Event(_Body):
    seq: int
    at: Timestamp
    kind: EventKind
    detail: JsonObject = Field(description="Depends on kind; moments in it are timestamps too.")


class Attempt(_Body):
    attempt_no: int
    attempt_id: str
    worker_id: str
    started_at: Timestamp
    ended_at: Timestamp | None
    outcome: AttemptOutcome | None
    failure_class: FailureClass | None
    error_code: str | None
    latency_ms: int | None
    input_tokens: int | None
    output_tokens: int | None
    model: str | None
    provider_model: str | None
    finish_reason: str | None
    cost_usd: float | None
    provider_request_id: str | None
    raw_output: str | None = Field(description="An answer that broke the output schema.")


class JobHistory(_Body):
    events: list[Event]
    attempts: list[Attempt]


# --- operations ---------------------------------------------------------------------


class AdminJob(JobSummary):
    tenant_id: str


class AdminJobDetail(AdminJob):
    dispatch_state: DispatchState
    fence: int
    attempt_id: str | None
    worker_id: str | None
    lease_until: Timestamp | None
    not_before: Timestamp | None
    failure_count: int
    invalid_output_count: int
    result_ref: str | None


class AdminJobHistory(JobHistory):
    job: AdminJobDetail


class AdminJobPage(_Body):
    data: list[AdminJob]
    next_cursor: str | None
    undecodable_letters: int = Field(
        description="Messages in the dead-letter queue that name no job (no worker can "
        "read them), not among the jobs above: see /v1/admin/dead-letters/undecodable."
    )


class _UndecodableLetterFields(_Body):
    id: str
    sent_at: Timestamp
    dead_lettered_at: Timestamp
    receive_count: int
    body_bytes: int = Field(description="The body's size in UTF-8.")
    truncated: bool = Field(description="The body is longer than shown.")


class UndecodableLetterSummary(_UndecodableLetterFields):
    body_preview: str = Field(description="Its first 200 characters.")


class UndecodableLetterPage(_Body):
    data: list[UndecodableLetterSummary]
    next_cursor: str | None


class UndecodableLetter(_UndecodableLetterFields):
    body: str = Field(description="The body as it was sent, up to 65,536 characters.")


class PurgedLetters(_Body):
    purged: list[str]
    not_found: list[str] = Field(description="Ids that name no undecodable dead letter.")


class SkippedReplay(_Body):
    job_id: str
    reason: str


class ReplayReport(_Body):
    replayed: list[str]
    skipped: list[SkippedReplay]


class PausedState(_Body):
    paused: list[str] = Field(description="intake, workers, provider:NAME: what is paused now")


class AuditEntry(_Body):
    id: int | None
    at: Timestamp
    actor: str
    action: AuditAction
    target: str
    reason: str | None


class AuditPage(_Body):
    data: list[AuditEntry]
    next_before: int | None = Field(description="Pass as before for the next page.")


class ApiKey(_Body):
    key_id: str
    tenant_id: str
    admin: bool
    status: KeyState
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    revoked_by: str | None


class CreatedApiKey(ApiKey):
    key: str = Field(description="The whole key: shown this once, never again.")


class WebhookSecret(_Body):
    secret: str = Field(
        description="The tenant's new signing secret, whsec_ and base64: shown this once."
    )
    previous_valid_for_seconds: int = Field(
        description="How long the secret it replaced keeps signing beside it (86,400)."
    )


class RevokedApiKey(ApiKey):
    already_revoked: bool


class ApiKeyList(_Body):
    data: list[ApiKey]


# --- usage and tasks ----------------------------------------------------------------


class UsageFigures(_Body):
    calls: int
    failed_calls: int
    input_tokens: int
    output_tokens: int
    cost_usd: float
    wasted_cost_usd: float
    unknown_usage_calls: int = Field(
        description="Calls answered without usage: their tokens and cost are unknown and "
        "left out of the sums above (never counted as 0)."
    )


class UsageRow(UsageFigures):
    """One group; the field named by group_by (day, model or task) says which."""

    day: str | None = Field(default=None, description="YYYY-MM-DD (UTC), when grouped by day")
    model: str | None = Field(default=None, description="The model alias, when grouped by model")
    task: str | None = Field(default=None, description="The task, when grouped by task")


class UsageReport(_Body):
    from_: Timestamp = Field(alias="from")
    to: Timestamp
    group_by: Literal["day", "model", "task"]
    data: list[UsageRow]
    total: UsageFigures


class TenantUsageReport(UsageReport):
    tenant_id: str | None = Field(description="null: every tenant")


class TaskDefaults(_Body):
    model: str | None
    max_attempts: int | None
    max_invalid_output_attempts: int | None
    max_tokens: int | None
    temperature: float | None


class TaskInfo(_Body):
    name: str
    description: str | None
    defaults: TaskDefaults = Field(description="null: the deployment's setting applies")
    input_schema: JsonObject
    output_schema: JsonObject


class TaskList(_Body):
    data: list[TaskInfo]


# --- health -------------------------------------------------------------------------


class Health(_Body):
    status: Literal["ok"]


class DependencyState(_Body):
    ok: bool
    detail: str | None = None


class Readiness(_Body):
    status: Literal["ready"]
    checks: dict[str, DependencyState]
