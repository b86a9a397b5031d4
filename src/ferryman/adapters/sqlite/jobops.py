"""Job transitions as plain functions on the write connection.

Each runs inside the writer's ``BEGIN IMMEDIATE`` transaction, which excludes every
other writer process: loading the row, applying the rule from ``ferryman.core.job``
and writing it back is therefore one atomic conditional write, and the state rules
stay in core instead of being restated in SQL.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ferryman.adapters.sqlite import messages
from ferryman.adapters.sqlite.rows import dump_json, job_from_row, job_params, report_params
from ferryman.adapters.sqlite.sql import JOBS
from ferryman.core import job as rules
from ferryman.core.errors import (
    AlreadyTerminalError,
    IdempotencyKeyMismatchError,
    IllegalTransitionError,
    JobNotFoundError,
    StateConflictError,
)
from ferryman.core.job import (
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import Accepted, ClaimResult

if TYPE_CHECKING:
    import sqlite3


def load(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(JOBS["get_job"], {"job_id": job_id}).fetchone()
    return None if row is None else job_from_row(row)


def load_required(conn: sqlite3.Connection, job_id: str) -> Job:
    job = load(conn, job_id)
    if job is None:
        raise JobNotFoundError()
    return job


def save(conn: sqlite3.Connection, job: Job) -> None:
    conn.execute(JOBS["update_job"], job_params(job))


def add_event(
    conn: sqlite3.Connection,
    job_id: str,
    kind: EventKind,
    *,
    now: float,
    detail: dict[str, Any] | None = None,
) -> None:
    conn.execute(
        JOBS["insert_event"],
        {"job_id": job_id, "at": now, "kind": str(kind), "detail": dump_json(detail or {})},
    )


def close_attempt(
    conn: sqlite3.Connection,
    job_id: str,
    attempt_id: str,
    *,
    now: float,
    report: AttemptReport,
    over_abandoned: bool = False,
) -> bool:
    cursor = conn.execute(
        JOBS["close_attempt"],
        {
            "job_id": job_id,
            "attempt_id": attempt_id,
            "ended_at": now,
            "over_abandoned": over_abandoned,
            **report_params(report),
        },
    )
    return cursor.rowcount == 1


def enqueue(conn: sqlite3.Connection, job: Job, *, now: float) -> None:
    messages.insert_message(conn, QueueMessage.for_job(job), now=now)


# --- create ---------------------------------------------------------------------


def create(
    conn: sqlite3.Connection, job: Job, *, idempotency_expires_at: float | None, now: float
) -> Accepted:
    """Idempotency check, job, ACCEPTED, message and DISPATCHED: one transaction."""
    if job.idempotency_key is not None:
        existing = _live_duplicate(conn, job, now=now)
        if existing is not None:
            return Accepted(job=existing, created=False)
    if load(conn, job.job_id) is not None:
        raise StateConflictError("a job with this id already exists")
    stored = dataclasses.replace(
        job, status=JobStatus.QUEUED, dispatch_state=DispatchState.DISPATCHED
    )
    conn.execute(JOBS["insert_job"], job_params(stored))
    if job.idempotency_key is not None:
        conn.execute(
            JOBS["put_idempotency"],
            {
                "tenant_id": job.tenant_id,
                "key": job.idempotency_key,
                "job_id": job.job_id,
                "request_hash": job.request_hash,
                "expires_at": idempotency_expires_at,
            },
        )
    add_event(conn, job.job_id, EventKind.ACCEPTED, now=now)
    enqueue(conn, stored, now=now)
    add_event(conn, job.job_id, EventKind.DISPATCHED, now=now)
    return Accepted(job=stored, created=True)


def _live_duplicate(conn: sqlite3.Connection, job: Job, *, now: float) -> Job | None:
    """The job a live entry for (tenant, key) names; raise on a different request."""
    entry = conn.execute(
        JOBS["get_idempotency"], {"tenant_id": job.tenant_id, "key": job.idempotency_key}
    ).fetchone()
    if entry is None or (entry["expires_at"] is not None and now >= entry["expires_at"]):
        return None
    if entry["request_hash"] != job.request_hash:
        raise IdempotencyKeyMismatchError()
    return load(conn, entry["job_id"])


def mark_dispatched(conn: sqlite3.Connection, job_id: str, *, now: float) -> None:
    """The message was (re)sent now. updated_at moves even when already DISPATCHED,
    so the stalled scan waits for the job to stall anew before offering it again."""
    job = load(conn, job_id)
    if job is None:
        return
    save(conn, dataclasses.replace(job, dispatch_state=DispatchState.DISPATCHED, updated_at=now))
    if job.dispatch_state is DispatchState.PENDING:
        add_event(conn, job_id, EventKind.DISPATCHED, now=now)


# --- the owning attempt -----------------------------------------------------------


def claim(
    conn: sqlite3.Connection,
    job_id: str,
    *,
    attempt_id: str,
    worker_id: str,
    now: float,
    lease_until: float,
) -> ClaimResult:
    job = load_required(conn, job_id)
    if not rules.is_claimable(job, now=now):
        return ClaimResult(job=job, claimed=False)
    abandoned = rules.abandoned_attempt_id(job, now=now)
    claimed = rules.claim(
        job, attempt_id=attempt_id, worker_id=worker_id, now=now, lease_until=lease_until
    )
    save(conn, claimed)
    if abandoned is not None:
        report = AttemptReport(outcome=AttemptOutcome.ABANDONED)
        close_attempt(conn, job_id, abandoned, now=now, report=report)
        add_event(
            conn, job_id, EventKind.ATTEMPT_ABANDONED, now=now, detail={"attempt_id": abandoned}
        )
    conn.execute(
        JOBS["insert_attempt"],
        {
            "job_id": job_id,
            "attempt_no": claimed.fence,
            "attempt_id": attempt_id,
            "worker_id": worker_id,
            "started_at": now,
        },
    )
    add_event(
        conn,
        job_id,
        EventKind.CLAIMED,
        now=now,
        detail={"attempt_id": attempt_id, "attempt_no": claimed.fence, "worker_id": worker_id},
    )
    return ClaimResult(job=claimed, claimed=True, abandoned_attempt_id=abandoned)


def owned(conn: sqlite3.Connection, job_id: str, attempt_id: str, *, now: float) -> Job | None:
    """The job if ``attempt_id`` still owns it (core.job.is_owned_by), else None."""
    job = load(conn, job_id)
    if job is None or not rules.is_owned_by(job, attempt_id, now=now):
        return None
    return job


def finish(
    conn: sqlite3.Connection,
    after: Job,
    attempt_id: str,
    *,
    now: float,
    report: AttemptReport,
    kind: EventKind,
    detail: dict[str, Any],
) -> bool:
    """Write the owning attempt's last transition, close its row, record the event."""
    save(conn, after)
    close_attempt(conn, after.job_id, attempt_id, now=now, report=report)
    add_event(conn, after.job_id, kind, now=now, detail={"attempt_id": attempt_id, **detail})
    return True


def end_attempt(
    conn: sqlite3.Connection, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
) -> None:
    closed = close_attempt(conn, job_id, attempt_id, now=now, report=report, over_abandoned=True)
    if closed and report.outcome is AttemptOutcome.LEASE_LOST:
        add_event(conn, job_id, EventKind.LEASE_LOST, now=now, detail={"attempt_id": attempt_id})


# --- callers and operators ------------------------------------------------------


def request_cancel(conn: sqlite3.Connection, job_id: str, *, tenant_id: str, now: float) -> Job:
    job = load(conn, job_id)
    if job is None or job.tenant_id != tenant_id:
        raise JobNotFoundError()
    if job.status.terminal:
        raise AlreadyTerminalError()
    after = rules.request_cancel(job, now=now)
    save(conn, after)
    kind = (
        EventKind.CANCELLED if after.status is JobStatus.CANCELLED else EventKind.CANCEL_REQUESTED
    )
    add_event(conn, job_id, kind, now=now)
    return after


def fail_unowned(
    conn: sqlite3.Connection,
    job_id: str,
    *,
    now: float,
    error: JobError,
    kind: EventKind,
    detail: dict[str, Any],
) -> Job | None:
    job = load(conn, job_id)
    if job is None:
        return None
    try:
        after = rules.fail_unowned(job, now=now, error=error)
    except IllegalTransitionError:
        return None
    save(conn, after)
    conn.execute(JOBS["abandon_open_attempts"], {"job_id": job_id, "ended_at": now})
    add_event(conn, job_id, kind, now=now, detail=detail)
    return after


def replay(conn: sqlite3.Connection, job_id: str, *, now: float, actor: str, reason: str) -> Job:
    """Reset the job for a new attempt series and enqueue it, in one transaction."""
    after = dataclasses.replace(
        rules.replay(load_required(conn, job_id), now=now),
        dispatch_state=DispatchState.DISPATCHED,
    )
    save(conn, after)
    add_event(conn, job_id, EventKind.REPLAYED, now=now, detail={"actor": actor, "reason": reason})
    enqueue(conn, after, now=now)
    add_event(conn, job_id, EventKind.DISPATCHED, now=now)
    return after


def record_event(
    conn: sqlite3.Connection,
    job_id: str,
    kind: EventKind,
    *,
    now: float,
    detail: dict[str, Any] | None,
) -> None:
    # An event about a job that does not exist is dropped, as the memory engine does.
    if load(conn, job_id) is not None:
        add_event(conn, job_id, kind, now=now, detail=detail)


def error_detail(error: JobError) -> dict[str, Any]:
    return {"error_code": error.code, "failure_class": str(error.failure_class)}
