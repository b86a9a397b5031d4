"""InMemoryJobStore: the JobStore port over dicts.

``apply`` runs under one asyncio.Lock, which is this engine's conditional write:
the revision check and the writes cannot interleave with another call. With a
queue, a change that enqueues sends its message under the same lock, standing in
for the SQL engines' single transaction.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import math
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ferryman.adapters.memory.history import JobHistory
from ferryman.adapters.memory.listing import page_of
from ferryman.adapters.wakeup import Wakeup
from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError
from ferryman.core.idempotency import IdempotencyEntry
from ferryman.core.job import WAITING_STATUSES, AttemptOutcome, DispatchState, JobStatus
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import Accepted, StoreCapabilities, TenantUsage, UsageGroup, UsageRow

if TYPE_CHECKING:
    from collections.abc import Collection, Iterable, Sequence

    from ferryman.adapters.memory.queue import InMemoryJobQueue
    from ferryman.core.changes import Change
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.store import CreateOutcome, JobPage


class InMemoryJobStore:
    """Jobs, idempotency entries, attempts and events in memory (tests and demos)."""

    def __init__(
        self, *, queue: InMemoryJobQueue | None = None, max_atomic_batch: int | None = None
    ) -> None:
        """``max_atomic_batch``: refuse a ``create_many`` of more jobs than this, as an
        engine whose transactions hold a bounded number of items does (DynamoDB: 100),
        so tests can hold the services to a limit; None, as this engine is: no limit."""
        self._queue = queue
        self._capabilities = StoreCapabilities(max_atomic_batch=max_atomic_batch)
        self._jobs: dict[str, Job] = {}
        self._keys: dict[tuple[str, str], IdempotencyEntry] = {}
        # The webhook outbox's index: job id -> when its owed notification is due, so
        # the dispatcher's scan reads the owed jobs, not every job.
        self._webhooks_due: dict[str, float] = {}
        self._history = JobHistory()
        self._lock = asyncio.Lock()
        self._cancel_hints = Wakeup()
        self._status_hints = Wakeup()

    @property
    def capabilities(self) -> StoreCapabilities:
        # One lock over dicts: any batch is all-or-nothing, and usage counts the dicts.
        return self._capabilities

    @property
    def enqueues_with_job(self) -> bool:
        return self._queue is not None

    @property
    def cancel_hints(self) -> Wakeup:
        return self._cancel_hints

    @property
    def status_hints(self) -> Wakeup:
        return self._status_hints

    # --- writes ---------------------------------------------------------------

    async def create(self, change: Change, *, idempotency_expires_at: float | None) -> Accepted:
        async with self._lock:
            self._check_new(change)
            return await self._create(change, idempotency_expires_at)

    async def create_many(
        self, changes: Sequence[Change], *, idempotency_expires_at: float | None
    ) -> list[CreateOutcome]:
        limit = self._capabilities.max_atomic_batch
        if limit is not None and len(changes) > limit:
            raise ValueError(f"a transaction of this store holds at most {limit} new jobs")
        async with self._lock:
            # Checked before anything is written, so a refused batch leaves nothing.
            ids = [change.job_id for change in changes]
            if len(set(ids)) != len(ids):
                raise StateConflictError("two jobs of the batch have the same id")
            for change in changes:
                self._check_new(change)
            outcomes: list[CreateOutcome] = []
            for change in changes:
                try:
                    outcomes.append(await self._create(change, idempotency_expires_at))
                except IdempotencyKeyMismatchError as exc:
                    outcomes.append(exc)
            return outcomes

    def _check_new(self, change: Change) -> None:
        if change.job_id in self._jobs:
            raise StateConflictError("a job with this id already exists")

    async def _create(self, change: Change, idempotency_expires_at: float | None) -> Accepted:
        job = change.after
        existing = self._live_entry(job, change.at)
        if existing is not None:
            if existing.request_hash != job.request_hash:
                raise IdempotencyKeyMismatchError()
            return Accepted(job=self._jobs[existing.job_id], created=False)
        if job.idempotency_key is not None:
            self._keys[(job.tenant_id, job.idempotency_key)] = IdempotencyEntry(
                tenant_id=job.tenant_id,
                key=job.idempotency_key,
                job_id=job.job_id,
                request_hash=job.request_hash,
                expires_at=math.inf if idempotency_expires_at is None else idempotency_expires_at,
            )
        stored = dataclasses.replace(
            job, input=copy.deepcopy(job.input), metadata=copy.deepcopy(job.metadata)
        )
        await self._write(dataclasses.replace(change, after=stored))
        return Accepted(job=stored, created=True)

    def _live_entry(self, job: Job, now: float) -> IdempotencyEntry | None:
        if job.idempotency_key is None:
            return None
        entry = self._keys.get((job.tenant_id, job.idempotency_key))
        return entry if entry is not None and entry.live(now) else None

    async def apply(self, change: Change) -> bool:
        return await self._apply(change, ack=None)

    async def apply_many(self, changes: Sequence[Change]) -> list[bool]:
        return [await self._apply(change, ack=None) for change in changes]

    @property
    def acks_with_outcome(self) -> bool:
        return self._queue is not None

    async def apply_and_ack(self, change: Change, *, receipt: str) -> bool:
        return await self._apply(change, ack=receipt)

    async def _apply(self, change: Change, *, ack: str | None) -> bool:
        async with self._lock:
            current = self._jobs.get(change.job_id)
            if current is None or current.revision != change.expected_revision:
                return False
            await self._write(change)
            if ack is not None and self._queue is not None:
                await self._queue.delete(ack)
            return True

    async def _write(self, change: Change) -> None:
        if change.enqueue and self._queue is not None:
            await self._queue.send(QueueMessage.for_job(change.after))
        self._jobs[change.job_id] = change.after
        if change.after.webhook_due_at is None:
            self._webhooks_due.pop(change.job_id, None)
        else:
            self._webhooks_due[change.job_id] = change.after.webhook_due_at
        self._history.record(change)
        if change.stops_running_attempt:
            self._cancel_hints.notify()
        if change.changes_status:
            self._status_hints.notify()

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
        job_ids: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        max_bytes: int | None = None,
    ) -> JobPage:
        def matches(job: Job) -> bool:
            return (
                (tenant_id is None or job.tenant_id == tenant_id)
                and (status is None or job.status is status)
                and (task is None or job.task == task)
                and (error_code is None or (job.error is not None and job.error.code == error_code))
            )

        if job_ids is None:
            candidates: Iterable[Job] = self._jobs.values()
        else:
            candidates = (job for i in set(job_ids) if (job := self._jobs.get(i)) is not None)
        return page_of(filter(matches, candidates), limit=limit, cursor=cursor, max_bytes=max_bytes)

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
            undriven = (
                (job.dispatch_state is DispatchState.PENDING and job.status in WAITING_STATUSES)
                or (job.status is JobStatus.PROCESSING and before_cutoff(job.lease_until))
                or (job.status is JobStatus.RETRY_SCHEDULED and before_cutoff(job.not_before))
            )
            # A message still queued drives the job; without the queue we cannot tell.
            return undriven and not (
                self._queue is not None and self._queue.holds_message_for(job.job_id)
            )

        found = sorted(
            (j for j in self._jobs.values() if stalled(j)), key=lambda j: (j.updated_at, j.job_id)
        )
        return found[:limit]

    async def webhooks_due(
        self, *, now: float, limit: int, skip_tenants: Collection[str] = ()
    ) -> list[Job]:
        skip = set(skip_tenants)
        due = sorted(
            (at, job_id)
            for job_id, at in self._webhooks_due.items()
            if at <= now and self._jobs[job_id].tenant_id not in skip
        )
        return [self._jobs[job_id] for _, job_id in due[: max(0, limit)]]

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        return {
            job_id
            for job_id in job_ids
            if (job := self._jobs.get(job_id)) is not None and job.cancel_requested
        }

    async def usage(self, tenant_id: str) -> TenantUsage:
        mine = [job for job in self._jobs.values() if job.tenant_id == tenant_id]
        unfinished = sum(1 for job in mine if not job.status.terminal)
        return TenantUsage(unfinished=unfinished, stored=len(mine))

    async def usage_report(
        self, *, tenant_id: str | None, start: float, end: float, group_by: UsageGroup
    ) -> list[UsageRow]:
        groups: dict[str, list[Attempt]] = {}
        for attempt in self._history.all_attempts():
            if not start <= attempt.started_at < end:
                continue
            if tenant_id is not None and attempt.tenant_id != tenant_id:
                continue
            groups.setdefault(_usage_key(attempt, group_by), []).append(attempt)
        return [_usage_row(key, attempts) for key, attempts in sorted(groups.items())]

    async def statuses(self, job_ids: Collection[str]) -> dict[str, JobStatus]:
        jobs = self._jobs
        return {job_id: jobs[job_id].status for job_id in job_ids if job_id in jobs}

    async def existing(self, job_ids: Collection[str]) -> set[str]:
        return {job_id for job_id in job_ids if job_id in self._jobs}

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        return {job_id: self._jobs[job_id] for job_id in job_ids if job_id in self._jobs}

    async def ping(self, *, write: bool = False) -> None:
        return None

    # --- retention ------------------------------------------------------------

    async def purge_finished(self, *, completed_before: float, limit: int) -> list[str]:
        async with self._lock:
            old = sorted(
                (
                    job
                    for job in self._jobs.values()
                    if job.status.terminal
                    and job.completed_at is not None
                    and job.completed_at < completed_before
                    # Kept while its webhook is owed (ports/store.py).
                    and job.webhook_due_at is None
                ),
                key=lambda job: (job.completed_at or 0.0, job.job_id),
            )[: max(0, limit)]
            purged = [job.job_id for job in old]
            for job_id in purged:
                del self._jobs[job_id]
                self._history.forget(job_id)
            gone = set(purged)
            for key, entry in list(self._keys.items()):
                if entry.job_id in gone:
                    del self._keys[key]
            return purged

    async def purge_expired_keys(self, *, now: float, limit: int) -> int:
        async with self._lock:
            expired = [key for key, entry in self._keys.items() if not entry.live(now)]
            for key in expired[: max(0, limit)]:
                del self._keys[key]
            return min(len(expired), max(0, limit))


def _usage_key(attempt: Attempt, group_by: UsageGroup) -> str:
    if group_by is UsageGroup.DAY:
        return datetime.fromtimestamp(attempt.started_at, UTC).strftime("%Y-%m-%d")
    return attempt.model if group_by is UsageGroup.MODEL else attempt.task


def _usage_row(key: str, attempts: list[Attempt]) -> UsageRow:
    return UsageRow(
        key=key,
        calls=len(attempts),
        failed_calls=sum(1 for a in attempts if a.failure_class is not None),
        input_tokens=sum(a.input_tokens or 0 for a in attempts),
        output_tokens=sum(a.output_tokens or 0 for a in attempts),
        cost_nano_usd=sum(a.cost_nano_usd or 0 for a in attempts),
        wasted_nano_usd=sum(
            a.cost_nano_usd or 0 for a in attempts if a.outcome is not AttemptOutcome.SUCCEEDED
        ),
        unknown_usage_calls=sum(
            1
            for a in attempts
            if a.finish_reason is not None and (a.input_tokens is None or a.output_tokens is None)
        ),
    )
