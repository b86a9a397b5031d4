"""SqliteJobStore: jobs, attempts and events in the SQLite file, the queue beside them."""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from ferryman.adapters.sqlite import jobops
from ferryman.adapters.sqlite.rows import attempt_from_row, event_from_row, job_from_row
from ferryman.adapters.sqlite.sql import JOBS
from ferryman.core import job as rules
from ferryman.core.errors import FailureClass
from ferryman.core.job import EventKind
from ferryman.ports.store import JobPage, LeaseStatus

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    from ferryman.adapters.sqlite.database import SqliteDatabase
    from ferryman.core.job import Attempt, AttemptReport, Event, Job, JobError, JobStatus
    from ferryman.ports.store import Accepted, ClaimResult

# Above every job_id ("gen_" + ULID, ASCII): the first page's upper bound.
_FIRST_PAGE = "\U0010ffff"


class SqliteJobStore:
    """Every change is one write op of the group-commit writer (one BEGIN IMMEDIATE)."""

    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    @property
    def enqueues_with_job(self) -> bool:
        return True

    async def create(
        self, job: Job, *, idempotency_expires_at: float | None, now: float
    ) -> Accepted:
        accepted = await self._db.write(
            partial(jobops.create, job=job, idempotency_expires_at=idempotency_expires_at, now=now)
        )
        if accepted.created:
            self._db.wakeup.notify()
        return accepted

    async def mark_dispatched(self, job_id: str, *, now: float) -> None:
        await self._db.write(partial(jobops.mark_dispatched, job_id=job_id, now=now))

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
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobPage:
        limit = max(1, limit)
        params: dict[str, Any] = {
            "tenant_id": tenant_id,
            "before": cursor or _FIRST_PAGE,
            "status": None if status is None else str(status),
            "task": task,
            "error_code": error_code,
            # One more than asked tells whether another page exists.
            "limit": limit + 1,
        }
        query = JOBS["list_jobs_of_all" if tenant_id is None else "list_jobs_of_tenant"]
        jobs = await self._db.read(partial(_select_jobs, query=query, params=params))
        if len(jobs) > limit:
            jobs = jobs[:limit]
            return JobPage(jobs=jobs, next_cursor=jobs[-1].job_id)
        return JobPage(jobs=jobs, next_cursor=None)

    async def claim(
        self, job_id: str, *, attempt_id: str, worker_id: str, now: float, lease_until: float
    ) -> ClaimResult:
        return await self._db.write(
            partial(
                jobops.claim,
                job_id=job_id,
                attempt_id=attempt_id,
                worker_id=worker_id,
                now=now,
                lease_until=lease_until,
            )
        )

    async def renew_lease(
        self, job_id: str, *, attempt_id: str, now: float, lease_until: float
    ) -> LeaseStatus:
        def op(conn: sqlite3.Connection) -> LeaseStatus:
            job = jobops.owned(conn, job_id, attempt_id, now=now)
            if job is None:
                current = jobops.load(conn, job_id)
                return LeaseStatus(
                    held=False, cancel_requested=bool(current and current.cancel_requested)
                )
            renewed = rules.renew_lease(
                job, attempt_id=attempt_id, now=now, lease_until=lease_until
            )
            jobops.save(conn, renewed)
            return LeaseStatus(held=True, cancel_requested=renewed.cancel_requested)

        return await self._db.write(op)

    async def succeed(
        self, job_id: str, *, attempt_id: str, now: float, result_ref: str, report: AttemptReport
    ) -> bool:
        return await self._owner_ends_attempt(
            job_id,
            attempt_id,
            now=now,
            report=report,
            transition=partial(
                rules.succeed, attempt_id=attempt_id, now=now, result_ref=result_ref
            ),
            kind=EventKind.SUCCEEDED,
            detail={"result_ref": result_ref},
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
        return await self._owner_ends_attempt(
            job_id,
            attempt_id,
            now=now,
            report=report,
            transition=partial(
                rules.schedule_retry,
                attempt_id=attempt_id,
                now=now,
                not_before=not_before,
                error=error,
            ),
            kind=EventKind.RETRY_SCHEDULED,
            detail={"not_before": not_before, **jobops.error_detail(error)},
        )

    async def fail(
        self, job_id: str, *, attempt_id: str, now: float, error: JobError, report: AttemptReport
    ) -> bool:
        # A delivery-level failure spends no model-failure budget.
        counts = error.failure_class is not FailureClass.DELIVERY
        return await self._owner_ends_attempt(
            job_id,
            attempt_id,
            now=now,
            report=report,
            transition=partial(
                rules.fail, attempt_id=attempt_id, now=now, error=error, counts=counts
            ),
            kind=EventKind.FAILED,
            detail=jobops.error_detail(error),
        )

    async def finish_cancelled(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        return await self._owner_ends_attempt(
            job_id,
            attempt_id,
            now=now,
            report=report,
            transition=partial(rules.cancelled, now=now),
            kind=EventKind.CANCELLED,
        )

    async def release(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> bool:
        return await self._owner_ends_attempt(
            job_id,
            attempt_id,
            now=now,
            report=report,
            transition=partial(rules.release, attempt_id=attempt_id, now=now),
            kind=EventKind.RELEASED,
        )

    async def _owner_ends_attempt(
        self,
        job_id: str,
        attempt_id: str,
        *,
        now: float,
        report: AttemptReport,
        transition: Callable[[Job], Job],
        kind: EventKind,
        detail: dict[str, Any] | None = None,
    ) -> bool:
        """One write: if the attempt still owns the job, apply the core transition,
        close the attempt with its report and record the event. False otherwise."""

        def op(conn: sqlite3.Connection) -> bool:
            job = jobops.owned(conn, job_id, attempt_id, now=now)
            if job is None:
                return False
            return jobops.finish(
                conn,
                transition(job),
                attempt_id,
                now=now,
                report=report,
                kind=kind,
                detail=detail or {},
            )

        return await self._db.write(op)

    async def end_attempt(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> None:
        await self._db.write(
            partial(
                jobops.end_attempt, job_id=job_id, attempt_id=attempt_id, now=now, report=report
            )
        )

    async def request_cancel(self, job_id: str, *, tenant_id: str, now: float) -> Job:
        return await self._db.write(
            partial(jobops.request_cancel, job_id=job_id, tenant_id=tenant_id, now=now)
        )

    async def fail_unowned(
        self, job_id: str, *, now: float, error: JobError, kind: EventKind, detail: dict[str, Any]
    ) -> Job | None:
        return await self._db.write(
            partial(
                jobops.fail_unowned, job_id=job_id, now=now, error=error, kind=kind, detail=detail
            )
        )

    async def replay(self, job_id: str, *, now: float, actor: str, reason: str) -> Job:
        job = await self._db.write(
            partial(jobops.replay, job_id=job_id, now=now, actor=actor, reason=reason)
        )
        self._db.wakeup.notify()
        return job

    async def record_event(
        self, job_id: str, kind: EventKind, *, now: float, detail: dict[str, Any] | None = None
    ) -> None:
        await self._db.write(
            partial(jobops.record_event, job_id=job_id, kind=kind, now=now, detail=detail)
        )

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

    async def ping(self) -> None:
        await self._db.read(lambda conn: conn.execute(JOBS["ping"]).fetchone())


def _select_jobs(conn: sqlite3.Connection, *, query: str, params: dict[str, Any]) -> list[Job]:
    return [job_from_row(row) for row in conn.execute(query, params).fetchall()]
