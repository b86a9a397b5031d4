"""The job, its attempts and events, and the only legal ways a job's fields change.

Every transition is a pure function from a job (and the facts of the moment) to the
fields it changes (a ``JobUpdate``), raising when the transition is not allowed. It
makes no job: ``core/changes.py`` wraps these functions into the Change an engine
persists, and makes the job after it with one ``dataclasses.replace`` that sets the
rule's fields and the change's revision and event number together.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, TypedDict

from ferryman.core.errors import FailureClass, IllegalTransitionError, StaleFenceError

PAYLOAD_VERSION = 1
"""The message/payload layout this code writes and understands."""

SUPPORTED_PAYLOAD_VERSIONS = frozenset({1})


class JobStatus(enum.StrEnum):
    QUEUED = "QUEUED"
    PROCESSING = "PROCESSING"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATUSES


TERMINAL_STATUSES = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED})
WAITING_STATUSES = frozenset({JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED})


class DispatchState(enum.StrEnum):
    """Whether the job's queue message is known to exist (the outbox flag)."""

    PENDING = "PENDING"
    DISPATCHED = "DISPATCHED"


class AttemptOutcome(enum.StrEnum):
    SUCCEEDED = "succeeded"
    RETRY = "retry"
    FAILED = "failed"
    LEASE_LOST = "lease_lost"
    ABANDONED = "abandoned"
    CANCELLED = "cancelled"


class EventKind(enum.StrEnum):
    ACCEPTED = "ACCEPTED"
    DISPATCHED = "DISPATCHED"
    REDISPATCHED = "REDISPATCHED"
    CLAIMED = "CLAIMED"
    ATTEMPT_ABANDONED = "ATTEMPT_ABANDONED"
    RETRY_SCHEDULED = "RETRY_SCHEDULED"
    LEASE_LOST = "LEASE_LOST"
    RELEASED = "RELEASED"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCEL_REQUESTED = "CANCEL_REQUESTED"
    CANCELLED = "CANCELLED"
    DEAD_LETTERED = "DEAD_LETTERED"
    REPLAYED = "REPLAYED"
    DUPLICATE_DELIVERY = "DUPLICATE_DELIVERY"
    # A delivery attempt of the job's completion webhook: the only events a finished
    # job's history takes after its terminal one (core/changes.py).
    WEBHOOK_DELIVERED = "WEBHOOK_DELIVERED"
    WEBHOOK_FAILED = "WEBHOOK_FAILED"


@dataclass(frozen=True, slots=True)
class JobError:
    code: str
    failure_class: FailureClass
    message: str


@dataclass(frozen=True, slots=True)
class Job:
    tenant_id: str
    job_id: str
    task: str
    model: str
    input: dict[str, Any]
    request_hash: str
    created_at: float
    updated_at: float
    correlation_id: str
    idempotency_key: str | None = None
    metadata: dict[str, Any] | None = None
    payload_version: int = PAYLOAD_VERSION
    status: JobStatus = JobStatus.QUEUED
    dispatch_state: DispatchState = DispatchState.PENDING
    # Attempts started, across an operator's replays too: the number of the latest
    # attempt, as the job's attempt list shows it (the budgets below are per series).
    attempt_count: int = 0
    # Attempts of the current series that ended in a retryable model failure,
    # and how many of those were INVALID_OUTPUT: the two retry budgets.
    failure_count: int = 0
    invalid_output_count: int = 0
    # +1 per claim, never reset: an attempt's number and its fencing token.
    fence: int = 0
    # Claims that took over an attempt which never recorded an outcome (a crash, a lost
    # lease), across re-sent messages; reset only by an operator's replay. Bounded by
    # max_receives whatever the queue's own receive counts do.
    deliveries_without_outcome: int = 0
    # 0 while the job runs on its own model alias; n once it moved to its n-th fallback.
    fallback_level: int = 0
    # +1 on every change: an engine applies a change only if the revision it was computed
    # from is still current (its one conditional-write primitive).
    revision: int = 0
    # The seq of the job's latest event, so a change numbers its events without a query.
    event_seq: int = 0
    attempt_id: str | None = None
    worker_id: str | None = None
    lease_until: float | None = None
    not_before: float | None = None
    cancel_requested: bool = False
    result_ref: str | None = None
    error: JobError | None = None
    traceparent: str | None = None
    completed_at: float | None = None
    # Where the client asked to be told of the outcome (fixed at intake), and the
    # webhook outbox, kept on the job so that the change that finishes the job writes
    # it in the same transaction on every engine (core/changes.py): when the owed
    # notification is next due (None: nothing owed), how many delivery attempts it has
    # had, and the seq of the job's terminal event it announces (its webhook-id).
    webhook_url: str | None = None
    webhook_due_at: float | None = None
    webhook_attempts: int = 0
    webhook_event_seq: int = 0


class JobUpdate(TypedDict, total=False):
    """The fields of a ``Job`` a transition may change, each typed as on ``Job``.

    What a job was asked to do (tenant, task, model, input, ...) is fixed at intake
    and absent here; so are ``revision`` and ``event_seq``, which only a change sets
    (core/changes.py). Called with keywords, mypy checks every name and value type.
    """

    status: JobStatus
    dispatch_state: DispatchState
    attempt_count: int
    failure_count: int
    invalid_output_count: int
    fence: int
    deliveries_without_outcome: int
    fallback_level: int
    attempt_id: str | None
    worker_id: str | None
    lease_until: float | None
    not_before: float | None
    cancel_requested: bool
    result_ref: str | None
    error: JobError | None
    updated_at: float
    completed_at: float | None
    webhook_due_at: float | None
    webhook_attempts: int
    webhook_event_seq: int


@dataclass(frozen=True, slots=True)
class Attempt:
    job_id: str
    attempt_no: int
    attempt_id: str
    worker_id: str
    started_at: float
    ended_at: float | None = None
    outcome: AttemptOutcome | None = None
    failure_class: FailureClass | None = None
    error_code: str | None = None
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    provider_request_id: str | None = None
    # Whose, what and on which model alias (the job's, or the fallback it moved to):
    # what usage reports count by.
    tenant_id: str = ""
    task: str = ""
    model: str = ""
    provider: str | None = None
    provider_model: str | None = None
    finish_reason: str | None = None
    cost_nano_usd: int | None = None
    raw_output: str | None = None


@dataclass(frozen=True, slots=True)
class AttemptReport:
    """What a worker knows about its attempt when it ends."""

    outcome: AttemptOutcome
    failure_class: FailureClass | None = None
    error_code: str | None = None
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    provider_request_id: str | None = None
    # The model alias the call used (None: the attempt never got as far as a call).
    model: str | None = None
    provider: str | None = None
    provider_model: str | None = None
    finish_reason: str | None = None
    cost_nano_usd: int | None = None
    # An answer that broke the output schema, cut to RAW_OUTPUT_MAX_CHARS.
    raw_output: str | None = None


# How much of a schema-breaking answer is kept with its attempt (for debugging a prompt).
RAW_OUTPUT_MAX_CHARS = 8192


@dataclass(frozen=True, slots=True)
class Event:
    job_id: str
    seq: int
    at: float
    kind: EventKind
    detail: dict[str, Any] = field(default_factory=dict)


# --- conditions -----------------------------------------------------------------


def is_claimable(job: Job, *, now: float) -> bool:
    """A job may be claimed when it waits and is due, or its owner's lease has expired."""
    if job.status in WAITING_STATUSES:
        return job.not_before is None or job.not_before <= now
    if job.status is JobStatus.PROCESSING:
        return job.lease_until is not None and job.lease_until < now
    return False


def is_owned_by(job: Job, attempt_id: str, *, now: float) -> bool:
    """The attempt still owns the job: same attempt, still processing, lease live."""
    return (
        job.status is JobStatus.PROCESSING
        and job.attempt_id == attempt_id
        and job.lease_until is not None
        and job.lease_until >= now
    )


def abandoned_attempt_id(job: Job, *, now: float) -> str | None:
    """The attempt a claim takes over from, if the job is PROCESSING with an expired lease."""
    if job.status is JobStatus.PROCESSING and is_claimable(job, now=now):
        return job.attempt_id
    return None


def _require_owner(job: Job, attempt_id: str, now: float) -> None:
    if not is_owned_by(job, attempt_id, now=now):
        raise StaleFenceError()


# --- transitions ----------------------------------------------------------------


def claim(
    job: Job, *, attempt_id: str, worker_id: str, now: float, lease_until: float
) -> JobUpdate:
    if not is_claimable(job, now=now):
        raise IllegalTransitionError(f"job in {job.status} cannot be claimed now")
    takeover = abandoned_attempt_id(job, now=now) is not None
    return JobUpdate(
        status=JobStatus.PROCESSING,
        fence=job.fence + 1,
        attempt_count=job.attempt_count + 1,
        deliveries_without_outcome=job.deliveries_without_outcome + (1 if takeover else 0),
        attempt_id=attempt_id,
        worker_id=worker_id,
        lease_until=lease_until,
        not_before=None,
        updated_at=now,
    )


def renew_lease(job: Job, *, attempt_id: str, now: float, lease_until: float) -> JobUpdate:
    _require_owner(job, attempt_id, now)
    return JobUpdate(lease_until=max(lease_until, job.lease_until or 0.0))


def release(job: Job, *, attempt_id: str, now: float) -> JobUpdate:
    """The owner gives the job back (graceful shutdown): it waits again, so the next
    delivery claims it at once, and nothing is left for a takeover to abandon (the
    owner already said how its attempt ended)."""
    _require_owner(job, attempt_id, now)
    return JobUpdate(
        status=JobStatus.QUEUED,
        attempt_id=None,
        worker_id=None,
        lease_until=None,
        updated_at=now,
    )


def wait_for_provider(job: Job, *, attempt_id: str, now: float, error: JobError) -> JobUpdate:
    """The owner's call found the job's provider refusing our credentials, and the
    provider is paused for every job: the job waits in the queue again, as that
    provider's other jobs do, with the refusal as its error and its budgets untouched
    (the failure is the deployment's, not the job's)."""
    _require_owner(job, attempt_id, now)
    return JobUpdate(
        status=JobStatus.QUEUED,
        error=error,
        attempt_id=None,
        worker_id=None,
        lease_until=None,
        not_before=None,
        updated_at=now,
    )


def succeed(job: Job, *, attempt_id: str, now: float, result_ref: str) -> JobUpdate:
    _require_owner(job, attempt_id, now)
    return JobUpdate(
        status=JobStatus.SUCCEEDED,
        result_ref=result_ref,
        error=None,
        lease_until=None,
        updated_at=now,
        completed_at=now,
    )


def schedule_retry(
    job: Job,
    *,
    attempt_id: str,
    now: float,
    not_before: float,
    error: JobError,
    fall_back: bool = False,
) -> JobUpdate:
    """Wait until not_before, then try again. ``fall_back``: on the next fallback
    model, whose budgets start afresh."""
    _require_owner(job, attempt_id, now)
    invalid = error.failure_class is FailureClass.INVALID_OUTPUT
    if fall_back:
        failures, invalid_outputs = 0, 0
    else:
        failures = job.failure_count + 1
        invalid_outputs = job.invalid_output_count + (1 if invalid else 0)
    return JobUpdate(
        status=JobStatus.RETRY_SCHEDULED,
        not_before=not_before,
        lease_until=None,
        error=error,
        failure_count=failures,
        invalid_output_count=invalid_outputs,
        fallback_level=job.fallback_level + (1 if fall_back else 0),
        updated_at=now,
    )


def fail(
    job: Job, *, attempt_id: str, now: float, error: JobError, counts: bool = True
) -> JobUpdate:
    """The owning attempt gives up on the job. ``counts``: the failure was a model failure."""
    _require_owner(job, attempt_id, now)
    invalid = error.failure_class is FailureClass.INVALID_OUTPUT
    return JobUpdate(
        status=JobStatus.FAILED,
        error=error,
        lease_until=None,
        failure_count=job.failure_count + (1 if counts else 0),
        invalid_output_count=job.invalid_output_count + (1 if invalid and counts else 0),
        updated_at=now,
        completed_at=now,
    )


def fail_unowned(job: Job, *, now: float, error: JobError) -> JobUpdate:
    """Fail a job no live attempt owns (dead-lettered, exhausted at claim)."""
    if job.status.terminal:
        raise IllegalTransitionError(f"job is already {job.status}")
    if (
        job.status is JobStatus.PROCESSING
        and job.lease_until is not None
        and job.lease_until >= now
    ):
        raise IllegalTransitionError("a live attempt owns the job")
    return JobUpdate(
        status=JobStatus.FAILED,
        error=error,
        lease_until=None,
        updated_at=now,
        completed_at=now,
    )


def request_cancel(job: Job, *, now: float) -> JobUpdate:
    """Cancel a waiting job at once; ask the owner of a processing job to stop.

    Asking again changes nothing: no field at all."""
    if job.status.terminal:
        raise IllegalTransitionError(f"job is already {job.status}")
    if job.status is JobStatus.PROCESSING:
        if job.cancel_requested:
            return JobUpdate()
        return JobUpdate(cancel_requested=True, updated_at=now)
    return cancelled(job, now=now)


def cancelled(job: Job, *, now: float) -> JobUpdate:
    if job.status.terminal:
        raise IllegalTransitionError(f"job is already {job.status}")
    return JobUpdate(
        status=JobStatus.CANCELLED,
        cancel_requested=True,
        lease_until=None,
        updated_at=now,
        completed_at=now,
    )


DEAD_LETTERED_CODE = "dead_lettered"
# Why a RELEASED event gave a job back: its provider refuses our credentials (paused).
PROVIDER_PAUSED = "provider_paused"


def is_dead_lettered(job: Job) -> bool:
    """FAILED because its deliveries kept ending without an outcome (crash loop, poison)."""
    return (
        job.status is JobStatus.FAILED
        and job.error is not None
        and job.error.failure_class is FailureClass.DELIVERY
    )


def replay(job: Job, *, now: float, include_failed: bool = False) -> JobUpdate:
    """An operator restarts a dead-lettered job (or, with ``include_failed``, any FAILED
    job) as a new attempt series. A job its client cancelled is never replayed: the
    client said it does not want the result."""
    if job.status is JobStatus.CANCELLED:
        raise IllegalTransitionError("a job its client cancelled is not replayed")
    if job.status is not JobStatus.FAILED:
        raise IllegalTransitionError(f"only FAILED jobs are replayed, not {job.status}")
    if not (include_failed or is_dead_lettered(job)):
        raise IllegalTransitionError(
            "only dead-lettered jobs are replayed unless other FAILED jobs are included"
        )
    return JobUpdate(
        status=JobStatus.QUEUED,
        # A replay needs a new message; until one is known to exist, the outbox owns it.
        dispatch_state=DispatchState.PENDING,
        failure_count=0,
        invalid_output_count=0,
        deliveries_without_outcome=0,
        fallback_level=0,
        attempt_id=None,
        worker_id=None,
        lease_until=None,
        not_before=None,
        cancel_requested=False,
        error=None,
        result_ref=None,
        updated_at=now,
        completed_at=None,
    )
