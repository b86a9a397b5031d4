"""SqliteJobStore: jobs, attempts and events in the SQLite file, the queue beside them."""

from __future__ import annotations

import json
from functools import partial
from typing import TYPE_CHECKING, Any

from ferryman.adapters.job_rows import (
    UNLIMITED_BYTES,
    attempt_from_row,
    event_from_row,
    job_from_row,
    summary_page,
)
from ferryman.adapters.sqlite import jobops
from ferryman.adapters.sqlite.sql import JOBS
from ferryman.core.cursors import position_of
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import JobStatus
from ferryman.ports.store import (
    LIST_ITEM_BYTES,
    Accepted,
    JobPage,
    StoreCapabilities,
    TenantUsage,
    UsageRow,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Collection, Sequence

    from ferryman.adapters.sqlite.database import SqliteDatabase
    from ferryman.adapters.wakeup import Wakeup
    from ferryman.core.changes import Change
    from ferryman.core.clock import Clock
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.store import CreateOutcome, UsageGroup

# A refused write keeps the store not ready, even if the probe's own small write got
# through (a nearly full disk takes some writes and not others), until work is written
# again or, in a process with no work to write, for this long.
WRITE_FAILURE_MEMORY_SECONDS = 10.0

# Above every job_id ("gen_" + ULID, ASCII): the first page's upper bound.
_FIRST_PAGE = "\U0010ffff"


STORE_CAPABILITIES = StoreCapabilities(max_atomic_batch=None, usage_exact=True)


class SqliteJobStore:
    """Every write is one op of the group-commit writer (one BEGIN IMMEDIATE)."""

    def __init__(self, db: SqliteDatabase, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock

    @property
    def capabilities(self) -> StoreCapabilities:
        # One write transaction takes any number of rows: a batch is all-or-nothing
        # whatever its size, and usage is counted in the transaction of each change.
        return STORE_CAPABILITIES

    @property
    def enqueues_with_job(self) -> bool:
        return True

    async def create(self, change: Change, *, idempotency_expires_at: float | None) -> Accepted:
        accepted = await self._db.write(
            partial(jobops.create, change=change, idempotency_expires_at=idempotency_expires_at)
        )
        if accepted.created and change.enqueue:
            self._db.wakeup.notify()
        return accepted

    async def create_many(
        self, changes: Sequence[Change], *, idempotency_expires_at: float | None
    ) -> list[CreateOutcome]:
        # One op of the group-commit writer, in a transaction of its own (a slice of a
        # tenant's batch: the small writes queued beside it commit first, never after
        # it), so the slice commits whole or not at all.
        outcomes = await self._db.write(
            partial(
                jobops.create_many, changes=changes, idempotency_expires_at=idempotency_expires_at
            ),
            alone=True,
        )
        if any(isinstance(o, Accepted) and o.created for o in outcomes) and any(
            change.enqueue for change in changes
        ):
            self._db.wakeup.notify()
        return outcomes

    @property
    def acks_with_outcome(self) -> bool:
        return True

    async def apply(self, change: Change) -> bool:
        return self._applied(change, await self._db.write(partial(jobops.apply, change=change)))

    async def apply_and_ack(self, change: Change, *, receipt: str) -> bool:
        # The queue is a table of this file: the ack shares the outcome's transaction.
        applied = await self._db.write(
            partial(jobops.apply_and_ack, change=change, receipt=receipt)
        )
        return self._applied(change, applied)

    async def apply_many(self, changes: Sequence[Change]) -> list[bool]:
        # One op of the group-commit writer: the claims of a worker's receive batch
        # share one transaction; each is still conditional on its own revision.
        applied = await self._db.write(partial(jobops.apply_many, changes=changes))
        return [self._applied(c, a) for c, a in zip(changes, applied, strict=True)]

    def _applied(self, change: Change, applied: bool) -> bool:
        if applied and change.enqueue:
            self._db.wakeup.notify()
        if applied and change.stops_running_attempt:
            # Committed: the worker holding the job (here or in another process) may
            # look now instead of at its next periodic cancel check.
            self._db.cancel_wakeup.notify()
        if applied and change.changes_status:
            self._db.status_wakeup.notify()
        return applied

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        job = await self._db.read(partial(jobops.load, job_id=job_id))
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
        limit = max(1, limit)
        before = _FIRST_PAGE if cursor is None else position_of(cursor)
        if job_ids is not None and not job_ids:
            return JobPage(jobs=[], next_cursor=None)
        budget = UNLIMITED_BYTES if max_bytes is None else max_bytes
        params: dict[str, Any] = {
            "tenant_id": tenant_id,
            "job_ids": None if job_ids is None else json.dumps(list(job_ids)),
            "before": before,
            "status": None if status is None else str(status),
            "task": task,
            "error_code": error_code,
            # One more than asked tells whether another page exists.
            "limit": limit + 1,
            "item_bytes": LIST_ITEM_BYTES,
            "max_bytes": budget,
        }
        if job_ids is not None:
            query = JOBS["list_jobs_by_ids"]
        else:
            query = JOBS["list_jobs_of_all" if tenant_id is None else "list_jobs_of_tenant"]
        rows = await self._db.read(lambda conn: conn.execute(query, params).fetchall())
        return summary_page(rows, limit=limit, max_bytes=budget)

    async def events(self, job_id: str) -> list[Event]:
        def op(conn: sqlite3.Connection) -> list[Event]:
            rows = conn.execute(JOBS["list_events"], {"job_id": job_id}).fetchall()
            return [event_from_row(row) for row in rows]

        return await self._db.read(op)

    async def attempts(self, job_id: str) -> list[Attempt]:
        def op(conn: sqlite3.Connection) -> list[Attempt]:
            rows = conn.execute(JOBS["list_attempts"], {"job_id": job_id}).fetchall()
            return [attempt_from_row(row) for row in rows]

        return await self._db.read(op)

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        params = {"cutoff": now - older_than_seconds, "limit": max(0, limit)}
        return await self._db.read(partial(_select_jobs, query=JOBS["stalled_jobs"], params=params))

    async def webhooks_due(
        self, *, now: float, limit: int, skip_tenants: Collection[str] = ()
    ) -> list[Job]:
        # The tenants to leave out travel as one JSON array (SQLite binds no lists).
        params = {"now": now, "limit": max(0, limit), "skip": json.dumps(sorted(skip_tenants))}
        return await self._db.read(partial(_select_jobs, query=JOBS["webhooks_due"], params=params))

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        return await self._db.read(partial(_job_ids, block="cancel_requested", job_ids=job_ids))

    @property
    def cancel_hints(self) -> Wakeup:
        return self._db.cancel_wakeup

    @property
    def status_hints(self) -> Wakeup:
        return self._db.status_wakeup

    async def existing(self, job_ids: Collection[str]) -> set[str]:
        return await self._db.read(partial(_job_ids, block="existing_jobs", job_ids=job_ids))

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        if not job_ids:
            return {}
        return await self._db.read(partial(_jobs, job_ids=job_ids))

    async def statuses(self, job_ids: Collection[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        return await self._db.read(partial(_statuses, job_ids=job_ids))

    async def usage(self, tenant_id: str) -> TenantUsage:
        def op(conn: sqlite3.Connection) -> TenantUsage:
            row = conn.execute(JOBS["tenant_usage"], {"tenant_id": tenant_id}).fetchone()
            if row is None:
                return TenantUsage(unfinished=0, stored=0)
            return TenantUsage(unfinished=row["unfinished"], stored=row["stored"])

        return await self._db.read(op)

    async def usage_report(
        self, *, tenant_id: str | None, start: float, end: float, group_by: UsageGroup
    ) -> list[UsageRow]:
        params = {"tenant_id": tenant_id, "start": start, "end": end, "group_by": str(group_by)}

        def op(conn: sqlite3.Connection) -> list[UsageRow]:
            rows = conn.execute(JOBS["usage_report"], params).fetchall()
            return [
                UsageRow(
                    key=str(row["key"]),
                    calls=row["calls"],
                    failed_calls=row["failed_calls"],
                    input_tokens=row["input_tokens"],
                    output_tokens=row["output_tokens"],
                    cost_nano_usd=row["cost_nano_usd"],
                    wasted_nano_usd=row["wasted_nano_usd"],
                    unknown_usage_calls=row["unknown_usage_calls"],
                )
                for row in rows
            ]

        return await self._db.read(op)

    async def purge_finished(self, *, completed_before: float, limit: int) -> list[str]:
        return await self._db.write(
            partial(jobops.purge_finished, completed_before=completed_before, limit=limit)
        )

    async def purge_expired_keys(self, *, now: float, limit: int) -> int:
        def op(conn: sqlite3.Connection) -> int:
            cursor = conn.execute(JOBS["delete_expired_keys"], {"now": now, "limit": max(0, limit)})
            return cursor.rowcount

        return await self._db.write(op)

    async def ping(self, *, write: bool = False) -> None:
        await self._db.read(lambda conn: conn.execute(JOBS["ping"]).fetchone())
        if write:
            # Goes through the group-commit writer like every other write, so it fails
            # exactly when they do (a locked file, a full disk).
            at = self._clock.now() if self._clock is not None else 0.0
            await self._db.probe_write(lambda conn: conn.execute(JOBS["write_probe"], {"at": at}))
            failure = self._db.recent_write_failure(WRITE_FAILURE_MEMORY_SECONDS)
            if failure is not None:
                raise StoreUnavailableError(f"a write failed in the last seconds: {failure}")


def _select_jobs(conn: sqlite3.Connection, *, query: str, params: dict[str, Any]) -> list[Job]:
    return [job_from_row(row) for row in conn.execute(query, params).fetchall()]


def _jobs(conn: sqlite3.Connection, *, job_ids: Collection[str]) -> dict[str, Job]:
    rows = conn.execute(JOBS["get_jobs"], {"job_ids": json.dumps(list(job_ids))}).fetchall()
    jobs = (job_from_row(row) for row in rows)
    return {job.job_id: job for job in jobs}


def _statuses(conn: sqlite3.Connection, *, job_ids: Collection[str]) -> dict[str, JobStatus]:
    rows = conn.execute(JOBS["job_statuses"], {"job_ids": json.dumps(list(job_ids))})
    return {job_id: JobStatus(status) for job_id, status in rows}


def _job_ids(conn: sqlite3.Connection, *, block: str, job_ids: Collection[str]) -> set[str]:
    rows = conn.execute(JOBS[block], {"job_ids": json.dumps(list(job_ids))}).fetchall()
    return {row["job_id"] for row in rows}
