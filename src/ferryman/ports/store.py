"""JobStore: the durable record of jobs, their attempts and events.

Every method that changes a job is one conditional write in the engine (a
transaction, a ``WHERE`` clause, a ``ConditionExpression``). The conditions are
the ones in ``ferryman.core.job``; the contract suite holds every engine to them.
Times are epoch seconds passed in by the caller, so the caller's clock decides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ferryman.core.job import Attempt, AttemptReport, Event, EventKind, Job, JobError, JobStatus


@dataclass(frozen=True, slots=True)
class Accepted:
    """The outcome of create: the job, and whether this call created it."""

    job: Job
    created: bool


@dataclass(frozen=True, slots=True)
class ClaimResult:
    """The job after a claim that succeeded, or as found when the claim's condition failed."""

    job: Job
    claimed: bool
    # The attempt whose expired lease this claim took over (recorded as abandoned).
    abandoned_attempt_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    held: bool
    cancel_requested: bool = False


@dataclass(frozen=True, slots=True)
class JobPage:
    jobs: list[Job]
    next_cursor: str | None


class JobStore(Protocol):
    # True when create() and replay() write the job's queue message in the same
    # transaction as the job (the SQL engines); intake then skips the outbox path.
    @property
    def enqueues_with_job(self) -> bool: ...

    async def create(
        self, job: Job, *, idempotency_expires_at: float | None, now: float
    ) -> Accepted:
        """Store a new job (status QUEUED) and its ACCEPTED event, atomically with its
        idempotency entry. With a live entry for (tenant, key): same request_hash
        returns the existing job (created=False); another hash raises
        IdempotencyKeyMismatchError and stores nothing. An expired entry is replaced.
        When ``enqueues_with_job``, also writes the queue message and stores the job
        DISPATCHED (with a DISPATCHED event) in the same transaction."""
        ...

    async def mark_dispatched(self, job_id: str, *, now: float) -> None:
        """The job's message was (re)sent now: dispatch_state DISPATCHED, updated_at = now
        (so stalled() does not offer the job again until it has stalled anew)."""
        ...

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        """The job, or None. With tenant_id, a job of another tenant is None too."""
        ...

    async def list_jobs(
        self,
        *,
        tenant_id: str | None,
        status: JobStatus | None = None,
        task: str | None = None,
        error_code: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        """Newest first (by job_id, a ULID). tenant_id None lists every tenant (operators)."""
        ...

    async def claim(
        self, job_id: str, *, attempt_id: str, worker_id: str, now: float, lease_until: float
    ) -> ClaimResult:
        """Claim when core.job.is_claimable holds: PROCESSING, fence+1, attempt_count+1,
        the new attempt row and a CLAIMED event; a taken-over attempt is closed as
        abandoned (with an ATTEMPT_ABANDONED event)."""
        ...

    async def renew_lease(
        self, job_id: str, *, attempt_id: str, now: float, lease_until: float
    ) -> LeaseStatus:
        """Extend the lease if the attempt still owns the job (core.job.is_owned_by)."""
        ...

    async def succeed(
        self, job_id: str, *, attempt_id: str, now: float, result_ref: str, report: AttemptReport
    ) -> bool:
        """Publish: SUCCEEDED + result_ref only if the attempt owns the job. False: not published."""
        ...

    async def schedule_retry(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        not_before: float,
        error: JobError,
        report: AttemptReport,
    ) -> bool:
        """RETRY_SCHEDULED until not_before, only if the attempt owns the job."""
        ...

    async def fail(
        self, job_id: str, *, attempt_id: str, now: float, error: JobError, report: AttemptReport
    ) -> bool:
        """FAILED with error, only if the attempt owns the job."""
        ...

    async def finish_cancelled(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        """The owning attempt honours a cancel request: CANCELLED."""
        ...

    async def release(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        """core.job.release: the owner gives the job back (graceful shutdown). The
        attempt is closed with the report (outcome abandoned) and a RELEASED event is
        appended. False when the attempt no longer owns the job."""
        ...

    async def end_attempt(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> None:
        """Record how an attempt ended without changing the job (lease lost: its result
        is discarded). Only an attempt with no outcome yet, or one a takeover marked
        abandoned (the worker survived and knows better), is updated."""
        ...

    async def request_cancel(self, job_id: str, *, tenant_id: str, now: float) -> Job:
        """core.job.request_cancel. Raises JobNotFoundError, AlreadyTerminalError."""
        ...

    async def fail_unowned(
        self, job_id: str, *, now: float, error: JobError, kind: EventKind, detail: dict[str, Any]
    ) -> Job | None:
        """core.job.fail_unowned, closing any open attempt as abandoned; records an
        event of ``kind``. None when the condition failed (terminal, or live owner)."""
        ...

    async def replay(self, job_id: str, *, now: float, actor: str, reason: str) -> Job:
        """core.job.replay plus a REPLAYED event {actor, reason}; the job comes back
        with dispatch_state PENDING (the caller sends its message and marks it
        dispatched) or, with ``enqueues_with_job``, DISPATCHED with its message
        enqueued in the same transaction.
        Raises JobNotFoundError, IllegalTransitionError."""
        ...

    async def record_event(
        self, job_id: str, kind: EventKind, *, now: float, detail: dict[str, Any] | None = None
    ) -> None: ...

    async def events(self, job_id: str) -> list[Event]:
        """In seq order (1, 2, ...)."""
        ...

    async def attempts(self, job_id: str) -> list[Attempt]:
        """In attempt_no order."""
        ...

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        """Non-terminal jobs nothing seems to drive, oldest updated_at first. All have
        updated_at before now - older_than, and one of: dispatch PENDING (QUEUED or
        RETRY_SCHEDULED); PROCESSING with lease_until before now - older_than;
        RETRY_SCHEDULED with not_before before now - older_than."""
        ...

    async def ping(self) -> None:
        """Raise StoreUnavailableError when the store cannot be reached."""
        ...
