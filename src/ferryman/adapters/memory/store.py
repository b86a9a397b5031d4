"""InMemoryJobStore: the JobStore port over dicts, applying core.job's transitions directly.

Every method runs under one asyncio.Lock, which is this engine's "conditional
write": the check and the change cannot interleave with another call. With a
queue, create() and replay() send the message under the same lock, standing in
for the SQL engines' single transaction.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
from typing import TYPE_CHECKING, Any

from ferryman.adapters.memory.history import JobHistory
from ferryman.adapters.memory.listing import page_of
from ferryman.core import job as rules
from ferryman.core.errors import (
    AlreadyTerminalError,
    FailureClass,
    IdempotencyKeyMismatchError,
    IllegalTransitionError,
    JobNotFoundError,
    StateConflictError,
)
from ferryman.core.idempotency import IdempotencyEntry
from ferryman.core.job import (
    WAITING_STATUSES,
    AttemptOutcome,
    DispatchState,
    EventKind,
    JobStatus,
)
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import Accepted, ClaimResult, LeaseStatus

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.job import Attempt, AttemptReport, Event, Job, JobError
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.store import JobPage


class InMemoryJobStore:
    """Jobs, idempotency entries, attempts and events in memory (tests and demos)."""

    def __init__(self, *, queue: JobQueue | None = None) -> None:
        self._queue = queue
        self._jobs: dict[str, Job] = {}
        self._keys: dict[tuple[str, str], IdempotencyEntry] = {}
        self._history = JobHistory()
        self._lock = asyncio.Lock()

    @property
    def enqueues_with_job(self) -> bool:
        return self._queue is not None

    # --- intake ---------------------------------------------------------------

    async def create(
        self, job: Job, *, idempotency_expires_at: float | None, now: float
    ) -> Accepted:
        async with self._lock:
            existing = self._live_entry(job, now)
            if existing is not None:
                if existing.request_hash != job.request_hash:
                    raise IdempotencyKeyMismatchError()
                return Accepted(job=self._jobs[existing.job_id], created=False)
            if job.job_id in self._jobs:
                raise StateConflictError("a job with this id already exists")
            stored = dataclasses.replace(
                job,
                input=copy.deepcopy(job.input),
                metadata=copy.deepcopy(job.metadata),
                status=JobStatus.QUEUED,
                dispatch_state=DispatchState.PENDING,
            )
            if job.idempotency_key is not None:
                self._keys[(job.tenant_id, job.idempotency_key)] = IdempotencyEntry(
                    tenant_id=job.tenant_id,
                    key=job.idempotency_key,
                    job_id=job.job_id,
                    request_hash=job.request_hash,
                    # None: the entry never expires.
                    expires_at=math.inf
                    if idempotency_expires_at is None
                    else idempotency_expires_at,
                )
            self._jobs[job.job_id] = stored
            self._history.event(job.job_id, EventKind.ACCEPTED, now)
            stored = await self._enqueue_if_owned(stored, now)
            return Accepted(job=stored, created=True)

    def _live_entry(self, job: Job, now: float) -> IdempotencyEntry | None:
        if job.idempotency_key is None:
            return None
        entry = self._keys.get((job.tenant_id, job.idempotency_key))
        return entry if entry is not None and entry.live(now) else None

    async def _enqueue_if_owned(self, job: Job, now: float) -> Job:
        """With our own queue, send the message under the lock and mark the job DISPATCHED."""
        if self._queue is None:
            return job
        await self._queue.send(QueueMessage.for_job(job))
        dispatched = dataclasses.replace(job, dispatch_state=DispatchState.DISPATCHED)
        self._jobs[job.job_id] = dispatched
        self._history.event(job.job_id, EventKind.DISPATCHED, now)
        return dispatched

    async def mark_dispatched(self, job_id: str, *, now: float) -> None:
        async with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return
            # updated_at moves even when already DISPATCHED (a re-send), so the stalled
            # scan waits for the job to stall anew before offering it again.
            self._jobs[job_id] = dataclasses.replace(
                job, dispatch_state=DispatchState.DISPATCHED, updated_at=now
            )
            if job.dispatch_state is DispatchState.PENDING:
                self._history.event(job_id, EventKind.DISPATCHED, now)

    # --- reads ----------------------------------------------------------------

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        job = self._jobs.get(job_id)
        if job is None or (tenant_id is not None and job.tenant_id != tenant_id):
            return None
        return job

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
        def matches(job: Job) -> bool:
            return (
                (tenant_id is None or job.tenant_id == tenant_id)
                and (status is None or job.status is status)
                and (task is None or job.task == task)
                and (error_code is None or (job.error is not None and job.error.code == error_code))
            )

        return page_of([j for j in self._jobs.values() if matches(j)], limit=limit, cursor=cursor)

    async def events(self, job_id: str) -> list[Event]:
        return self._history.events(job_id)

    async def attempts(self, job_id: str) -> list[Attempt]:
        return self._history.attempts(job_id)

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        cutoff = now - older_than_seconds

        def before_cutoff(at: float | None) -> bool:
            return at is not None and at < cutoff

        def stalled(job: Job) -> bool:
            if job.status.terminal or not before_cutoff(job.updated_at):
                return False
            return (
                (job.dispatch_state is DispatchState.PENDING and job.status in WAITING_STATUSES)
                or (job.status is JobStatus.PROCESSING and before_cutoff(job.lease_until))
                or (job.status is JobStatus.RETRY_SCHEDULED and before_cutoff(job.not_before))
            )

        found = sorted(
            (j for j in self._jobs.values() if stalled(j)), key=lambda j: (j.updated_at, j.job_id)
        )
        return found[:limit]

    async def ping(self) -> None:
        return None

    # --- the worker's conditional writes -------------------------------------

    async def claim(
        self, job_id: str, *, attempt_id: str, worker_id: str, now: float, lease_until: float
    ) -> ClaimResult:
        async with self._lock:
            job = self._require(job_id)
            if not rules.is_claimable(job, now=now):
                return ClaimResult(job=job, claimed=False)
            abandoned = rules.abandoned_attempt_id(job, now=now)
            if abandoned is not None:
                self._history.abandon(job_id, abandoned, now)
            claimed = rules.claim(
                job, attempt_id=attempt_id, worker_id=worker_id, now=now, lease_until=lease_until
            )
            self._jobs[job_id] = claimed
            self._history.start(claimed, now)
            return ClaimResult(job=claimed, claimed=True, abandoned_attempt_id=abandoned)

    async def renew_lease(
        self, job_id: str, *, attempt_id: str, now: float, lease_until: float
    ) -> LeaseStatus:
        async with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return LeaseStatus(held=False)
            if not rules.is_owned_by(job, attempt_id, now=now):
                return LeaseStatus(held=False, cancel_requested=job.cancel_requested)
            renewed = rules.renew_lease(
                job, attempt_id=attempt_id, now=now, lease_until=lease_until
            )
            self._jobs[job_id] = renewed
            return LeaseStatus(held=True, cancel_requested=renewed.cancel_requested)

    async def succeed(
        self, job_id: str, *, attempt_id: str, now: float, result_ref: str, report: AttemptReport
    ) -> bool:
        def change(job: Job) -> Job:
            return rules.succeed(job, attempt_id=attempt_id, now=now, result_ref=result_ref)

        detail = {"attempt_id": attempt_id, "result_ref": result_ref}
        return await self._finish(
            job_id, attempt_id, now, report, change, EventKind.SUCCEEDED, detail
        )

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
        def change(job: Job) -> Job:
            return rules.schedule_retry(
                job, attempt_id=attempt_id, now=now, not_before=not_before, error=error
            )

        detail = {"attempt_id": attempt_id, "not_before": not_before, **_error_detail(error)}
        return await self._finish(
            job_id, attempt_id, now, report, change, EventKind.RETRY_SCHEDULED, detail
        )

    async def fail(
        self, job_id: str, *, attempt_id: str, now: float, error: JobError, report: AttemptReport
    ) -> bool:
        # A delivery-level failure spends no model-failure budget.
        counts = error.failure_class is not FailureClass.DELIVERY

        def change(job: Job) -> Job:
            return rules.fail(job, attempt_id=attempt_id, now=now, error=error, counts=counts)

        detail = {"attempt_id": attempt_id, **_error_detail(error)}
        return await self._finish(job_id, attempt_id, now, report, change, EventKind.FAILED, detail)

    async def finish_cancelled(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        def change(job: Job) -> Job:
            return rules.cancelled(job, now=now)

        detail = {"attempt_id": attempt_id}
        return await self._finish(
            job_id, attempt_id, now, report, change, EventKind.CANCELLED, detail
        )

    async def release(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        def change(job: Job) -> Job:
            return rules.release(job, attempt_id=attempt_id, now=now)

        detail = {"attempt_id": attempt_id}
        return await self._finish(
            job_id, attempt_id, now, report, change, EventKind.RELEASED, detail
        )

    async def _finish(
        self,
        job_id: str,
        attempt_id: str,
        now: float,
        report: AttemptReport,
        change: Callable[[Job], Job],
        kind: EventKind,
        detail: dict[str, Any],
    ) -> bool:
        """Apply an owner-only transition; close the attempt and record the event."""
        async with self._lock:
            job = self._jobs.get(job_id)
            if job is None or not rules.is_owned_by(job, attempt_id, now=now):
                return False
            self._jobs[job_id] = change(job)
            self._history.close(job_id, attempt_id, now, report)
            self._history.event(job_id, kind, now, detail)
            return True

    async def end_attempt(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> None:
        async with self._lock:
            closed = self._history.close(job_id, attempt_id, now, report)
            if closed and report.outcome is AttemptOutcome.LEASE_LOST:
                self._history.event(job_id, EventKind.LEASE_LOST, now, {"attempt_id": attempt_id})

    # --- operators and the sweeper -------------------------------------------

    async def request_cancel(self, job_id: str, *, tenant_id: str, now: float) -> Job:
        async with self._lock:
            job = self._jobs.get(job_id)
            if job is None or job.tenant_id != tenant_id:
                raise JobNotFoundError()
            if job.status.terminal:
                raise AlreadyTerminalError()
            changed = rules.request_cancel(job, now=now)
            self._jobs[job_id] = changed
            kind = EventKind.CANCELLED if changed.status.terminal else EventKind.CANCEL_REQUESTED
            self._history.event(job_id, kind, now)
            return changed

    async def fail_unowned(
        self, job_id: str, *, now: float, error: JobError, kind: EventKind, detail: dict[str, Any]
    ) -> Job | None:
        async with self._lock:
            job = self._jobs.get(job_id)
            if job is None:
                return None
            try:
                failed = rules.fail_unowned(job, now=now, error=error)
            except IllegalTransitionError:
                return None
            self._jobs[job_id] = failed
            self._history.abandon_open(job_id, now)
            self._history.event(job_id, kind, now, dict(detail))
            return failed

    async def replay(self, job_id: str, *, now: float, actor: str, reason: str) -> Job:
        async with self._lock:
            job = self._require(job_id)
            replayed = dataclasses.replace(
                rules.replay(job, now=now), dispatch_state=DispatchState.PENDING
            )
            self._jobs[job_id] = replayed
            self._history.event(job_id, EventKind.REPLAYED, now, {"actor": actor, "reason": reason})
            return await self._enqueue_if_owned(replayed, now)

    async def record_event(
        self, job_id: str, kind: EventKind, *, now: float, detail: dict[str, Any] | None = None
    ) -> None:
        async with self._lock:
            if job_id in self._jobs:
                self._history.event(job_id, kind, now, dict(detail or {}))

    def _require(self, job_id: str) -> Job:
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFoundError()
        return job


def _error_detail(error: JobError) -> dict[str, Any]:
    return {"error_code": error.code, "failure_class": str(error.failure_class)}
