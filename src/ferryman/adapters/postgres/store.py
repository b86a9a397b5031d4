"""PostgresJobStore: jobs, attempts and events in PostgreSQL, the queue beside them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.adapters.job_rows import (
    UNLIMITED_BYTES,
    attempt_from_row,
    event_from_row,
    job_from_row,
    summary_page,
)
from ferryman.adapters.postgres import jobops
from ferryman.adapters.postgres.messages import split_receipt
from ferryman.adapters.postgres.sharedread import SharedRead
from ferryman.adapters.postgres.sql import JOBS
from ferryman.core.cursors import position_of
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
    from collections.abc import Collection, Sequence

    from ferryman.adapters.postgres.database import PostgresDatabase
    from ferryman.adapters.wakeup import Wakeup
    from ferryman.core.changes import Change
    from ferryman.core.clock import Clock
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.results import StagedResult
    from ferryman.ports.store import CreateOutcome, UsageGroup

# Above every job_id ("gen_" + ULID, ASCII) in byte order: the first page's bound.
_FIRST_PAGE = "\U0010ffff"
# /readyz waits no longer than this for a connection: a load balancer asks again.
PING_TIMEOUT_SECONDS = 2.0


STORE_CAPABILITIES = StoreCapabilities(max_atomic_batch=None, usage_exact=True)


class PostgresJobStore:
    """Every write is one transaction; a change is one conditional UPDATE plus its rows."""

    def __init__(self, db: PostgresDatabase, *, clock: Clock | None = None) -> None:
        self._db = db
        self._clock = clock
        # Every accept asks: concurrent asks share a read that started after each asked.
        self._usage: SharedRead[str, TenantUsage] = SharedRead(self._read_usage)

    @property
    def capabilities(self) -> StoreCapabilities:
        # One transaction takes any number of rows: a batch is all-or-nothing whatever
        # its size, and the usage counters move in the transaction of each change.
        return STORE_CAPABILITIES

    @property
    def enqueues_with_job(self) -> bool:
        return True

    async def create(self, change: Change, *, idempotency_expires_at: float | None) -> Accepted:
        accepted: Accepted | None = None
        if jobops.one_statement(change):
            if change.after.idempotency_key is None:
                accepted = await self._db.group.run(jobops.create_statement(change))
            else:
                accepted = await self._db.group.run(
                    jobops.keyed_create_statement(
                        change, idempotency_expires_at=idempotency_expires_at
                    )
                )
        if accepted is None:  # the key was taken (a replay, a mismatch, an expired entry)
            accepted = await self._db.group.run(
                lambda conn: jobops.create(
                    conn, change, idempotency_expires_at=idempotency_expires_at
                )
            )
        if accepted.created and change.enqueue:
            self._db.wakeup.notify()
        return accepted

    async def create_many(
        self, changes: Sequence[Change], *, idempotency_expires_at: float | None
    ) -> list[CreateOutcome]:
        async with self._db.transaction() as conn:
            outcomes = await jobops.create_many(
                conn, changes, idempotency_expires_at=idempotency_expires_at
            )
        if any(isinstance(o, Accepted) and o.created for o in outcomes) and any(
            change.enqueue for change in changes
        ):
            self._db.wakeup.notify()
        return outcomes

    async def apply(self, change: Change) -> bool:
        return await self._write(change)

    async def _write(
        self,
        change: Change,
        *,
        result: StagedResult | None = None,
        ack: tuple[str, str] | None = None,
    ) -> bool:
        """The change, and with it the result it publishes and the ack of its message, in
        one statement where it fits one, in one group-commit transaction in any case."""
        if jobops.one_statement(change):
            statement = jobops.apply_statement(change, result=result, ack=ack)
            applied = await self._db.group.run(statement)
        else:
            applied = await self._db.group.run(
                lambda conn: jobops.apply_with(conn, change, result=result, ack=ack)
            )
        self._after_apply(change, applied)
        return applied

    def _after_apply(self, change: Change, applied: bool) -> None:
        if applied and change.enqueue:
            self._db.wakeup.notify()
        if applied and change.stops_running_attempt:
            # This process's watchers at once (other processes' through the NOTIFY).
            self._db.cancel_wakeup.notify()
        if applied and change.changes_status:
            self._db.status_wakeup.notify()

    async def apply_many(self, changes: Sequence[Change]) -> list[bool]:
        """Several jobs' changes in one statement (a worker's claims for one receive
        batch): one statement's work instead of one each, in one group commit as
        before."""
        if not changes:
            return []
        if jobops.many_in_one_statement(changes):
            applied = await self._db.group.run(jobops.apply_many_statement(changes))
        else:
            applied = await self._db.group.run(lambda conn: jobops.apply_many(conn, changes))
        for change, written in zip(changes, applied, strict=True):
            self._after_apply(change, written)
        return applied

    @property
    def acks_with_outcome(self) -> bool:
        return True

    async def apply_and_ack(self, change: Change, *, receipt: str) -> bool:
        """``apply``, and the delivery's message deleted in the same transaction if the
        change was written (the queue is a table of this database): one group-commit
        wait per job fewer than the outcome followed by ``JobQueue.delete``."""
        # Not one of this queue's receipts (None): nothing it could delete.
        return await self._write(change, ack=split_receipt(receipt))

    def takes_result(self, result: StagedResult) -> bool:
        """A result staged by this database's own result store (PostgresResultStore)."""
        return result.home is self._db

    async def apply_with_result(
        self, change: Change, *, result: StagedResult, receipt: str | None
    ) -> bool:
        """``apply`` (``apply_and_ack`` with a receipt) whose statement also writes the
        result it publishes: one group-commit wait per job fewer than ``put`` first."""
        if not self.takes_result(result):
            raise ValueError("a result staged for another database")
        return await self._write(
            change, result=result, ack=None if receipt is None else split_receipt(receipt)
        )

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        row = await self._db.fetch_one(JOBS["get_job"], {"job_id": job_id})
        if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
            return None
        return job_from_row(row)

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
            "job_ids": None if job_ids is None else list(job_ids),
            "before": before,
            "status": None if status is None else str(status),
            "task": task,
            "error_code": error_code,
            # One more than asked tells whether another page exists.
            "limit": limit + 1,
            "item_bytes": LIST_ITEM_BYTES,
            "max_bytes": budget,
        }
        query = JOBS[_listing(tenant_id=tenant_id, by_status=status is not None, by_ids=job_ids)]
        rows = await self._db.fetch_all(query, params)
        return summary_page(rows, limit=limit, max_bytes=budget)

    async def events(self, job_id: str) -> list[Event]:
        rows = await self._db.fetch_all(JOBS["list_events"], {"job_id": job_id})
        return [event_from_row(row) for row in rows]

    async def attempts(self, job_id: str) -> list[Attempt]:
        rows = await self._db.fetch_all(JOBS["list_attempts"], {"job_id": job_id})
        return [attempt_from_row(row) for row in rows]

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        params = {"cutoff": now - older_than_seconds, "limit": max(0, limit)}
        return [job_from_row(row) for row in await self._db.fetch_all(JOBS["stalled_jobs"], params)]

    async def webhooks_due(
        self, *, now: float, limit: int, skip_tenants: Collection[str] = ()
    ) -> list[Job]:
        params = {"now": now, "limit": max(0, limit), "skip": sorted(skip_tenants)}
        return [job_from_row(row) for row in await self._db.fetch_all(JOBS["webhooks_due"], params)]

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        return await self._job_ids("cancel_requested", job_ids)

    @property
    def cancel_hints(self) -> Wakeup:
        return self._db.cancel_wakeup

    @property
    def status_hints(self) -> Wakeup:
        return self._db.status_wakeup

    async def existing(self, job_ids: Collection[str]) -> set[str]:
        return await self._job_ids("existing_jobs", job_ids)

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        if not job_ids:
            return {}
        rows = await self._db.fetch_all(JOBS["get_jobs"], {"job_ids": list(job_ids)})
        jobs = (job_from_row(row) for row in rows)
        return {job.job_id: job for job in jobs}

    async def statuses(self, job_ids: Collection[str]) -> dict[str, JobStatus]:
        if not job_ids:
            return {}
        rows = await self._db.fetch_all(JOBS["job_statuses"], {"job_ids": list(job_ids)})
        return {row["job_id"]: JobStatus(row["status"]) for row in rows}

    async def _job_ids(self, block: str, job_ids: Collection[str]) -> set[str]:
        if not job_ids:
            return set()
        rows = await self._db.fetch_all(JOBS[block], {"job_ids": list(job_ids)})
        return {row["job_id"] for row in rows}

    async def usage(self, tenant_id: str) -> TenantUsage:
        return await self._usage.get(tenant_id)

    async def _read_usage(self, tenant_id: str) -> TenantUsage:
        row = await self._db.fetch_one(JOBS["tenant_usage"], {"tenant_id": tenant_id})
        if row is None:
            return TenantUsage(unfinished=0, stored=0)
        return TenantUsage(unfinished=row["unfinished"], stored=row["stored"])

    async def usage_report(
        self, *, tenant_id: str | None, start: float, end: float, group_by: UsageGroup
    ) -> list[UsageRow]:
        params = {"tenant_id": tenant_id, "start": start, "end": end, "group_by": str(group_by)}
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
            for row in await self._db.fetch_all(JOBS["usage_report"], params)
        ]

    async def purge_finished(self, *, completed_before: float, limit: int) -> list[str]:
        async with self._db.transaction() as conn:
            return await jobops.purge_finished(conn, completed_before=completed_before, limit=limit)

    async def purge_expired_keys(self, *, now: float, limit: int) -> int:
        return await self._db.execute(
            JOBS["delete_expired_keys"], {"now": now, "limit": max(0, limit)}
        )

    async def ping(self, *, write: bool = False) -> None:
        """One round trip (and with ``write`` one durable write) on a pooled connection,
        waiting at most PING_TIMEOUT_SECONDS for one: while the server is away this
        raises StoreUnavailableError, and /readyz says not ready."""
        async with self._db.connection(timeout_seconds=PING_TIMEOUT_SECONDS) as conn:
            await conn.execute(JOBS["ping"])
            if write:
                at = self._clock.now() if self._clock is not None else 0.0
                await conn.execute(JOBS["write_probe"], {"at": at})


def _listing(*, tenant_id: str | None, by_status: bool, by_ids: Collection[str] | None) -> str:
    """The listing statement whose index fits the filters (a status has its own; named
    jobs are found by key)."""
    if by_ids is not None:
        return "list_jobs_by_ids"
    whose = "all" if tenant_id is None else "tenant"
    return f"list_jobs_of_{whose}" + ("_by_status" if by_status else "")
