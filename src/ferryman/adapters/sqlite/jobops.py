"""Persisting a Change, and the other job writes, as plain functions on the write connection.

Each runs inside the group-commit writer's ``BEGIN IMMEDIATE`` transaction. A change
is written as given (core.changes decides what it contains): the job row only if its
revision is still the one the change expects, then its events, attempt rows, queue
message and the tenant's usage counters, all in that one transaction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.adapters.job_rows import (
    dump_json,
    job_from_row,
    job_params,
    job_update_params,
    opened_attempt_params,
    report_params,
)
from ferryman.adapters.sqlite import messages
from ferryman.adapters.sqlite.sql import JOBS
from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import Accepted, CreateOutcome

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Sequence

    from ferryman.core.changes import Change
    from ferryman.core.job import Job


def load(conn: sqlite3.Connection, job_id: str) -> Job | None:
    row = conn.execute(JOBS["get_job"], {"job_id": job_id}).fetchone()
    return None if row is None else job_from_row(row)


def create(
    conn: sqlite3.Connection, change: Change, *, idempotency_expires_at: float | None
) -> Accepted:
    """Idempotency check, then the new job and everything its change carries."""
    job = change.after
    if job.idempotency_key is not None:
        existing = _live_duplicate(conn, job, now=change.at)
        if existing is not None:
            return Accepted(job=existing, created=False)
    if load(conn, job.job_id) is not None:
        raise StateConflictError("a job with this id already exists")
    conn.execute(JOBS["insert_job"], job_params(job))
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
    _write_consequences(conn, change, stored=1)
    return Accepted(job=job, created=True)


def create_many(
    conn: sqlite3.Connection, changes: Sequence[Change], *, idempotency_expires_at: float | None
) -> list[CreateOutcome]:
    """``create`` for each change in order, all in the caller's transaction. A key
    mismatch is found before its item writes anything, so it is that item's outcome;
    any other error leaves the op, and the writer's savepoint undoes the whole batch."""
    outcomes: list[CreateOutcome] = []
    for change in changes:
        try:
            outcomes.append(create(conn, change, idempotency_expires_at=idempotency_expires_at))
        except IdempotencyKeyMismatchError as exc:
            outcomes.append(exc)
    return outcomes


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


def apply(conn: sqlite3.Connection, change: Change) -> bool:
    """Write the change if the job's revision is still the expected one."""
    params = job_update_params(change.after)
    params["expected_revision"] = change.expected_revision
    if conn.execute(JOBS["update_job"], params).rowcount != 1:
        return False
    _write_consequences(conn, change, stored=0)
    return True


def apply_many(conn: sqlite3.Connection, changes: Sequence[Change]) -> list[bool]:
    """``apply`` for each change, in order, in the caller's transaction."""
    return [apply(conn, change) for change in changes]


def apply_and_ack(conn: sqlite3.Connection, change: Change, *, receipt: str) -> bool:
    """``apply``, and the message acknowledged in the same transaction if it applied."""
    if not apply(conn, change):
        return False
    messages.delete(conn, receipt)
    return True


def _write_consequences(conn: sqlite3.Connection, change: Change, *, stored: int) -> None:
    job_id = change.job_id
    for event in change.events:
        conn.execute(
            JOBS["insert_event"],
            {
                "job_id": job_id,
                "seq": event.seq,
                "at": event.at,
                "kind": str(event.kind),
                "detail": dump_json(event.detail),
            },
        )
    for ending in change.closed:
        conn.execute(
            JOBS["close_attempt"],
            {
                "job_id": job_id,
                "attempt_id": ending.attempt_id,
                "ended_at": ending.ended_at,
                "replaces_abandoned": ending.replaces_abandoned,
                **report_params(ending.report),
            },
        )
    if change.opened is not None:
        attempt = change.opened
        conn.execute(
            JOBS["insert_attempt"],
            {"job_id": job_id, **opened_attempt_params(attempt)},
        )
    if change.enqueue:
        messages.insert_message(conn, QueueMessage.for_job(change.after), now=change.at)
    if stored or change.backlog_delta:
        _add_usage(conn, change.after.tenant_id, unfinished=change.backlog_delta, stored=stored)


def _add_usage(conn: sqlite3.Connection, tenant_id: str, *, unfinished: int, stored: int) -> None:
    conn.execute(
        JOBS["add_usage"], {"tenant_id": tenant_id, "unfinished": unfinished, "stored": stored}
    )


def purge_finished(conn: sqlite3.Connection, *, completed_before: float, limit: int) -> list[str]:
    """Delete finished jobs (and what belongs to them) completed before the time."""
    rows = conn.execute(
        JOBS["finished_before"], {"before": completed_before, "limit": max(0, limit)}
    ).fetchall()
    purged: list[str] = []
    for row in rows:
        params: dict[str, Any] = {"job_id": row["job_id"]}
        for block in ("delete_job_events", "delete_job_attempts", "delete_job_keys", "delete_job"):
            conn.execute(JOBS[block], params)
        _add_usage(conn, row["tenant_id"], unfinished=0, stored=-1)
        purged.append(row["job_id"])
    return purged
