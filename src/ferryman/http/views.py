"""How jobs, events and attempts look on the wire (API.md): plain JSON, times in UTC.

Times are ISO-8601 with millisecond precision and a ``Z``; absent values are null.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ferryman.core.job import Attempt, Event, Job, JobError


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    moment = datetime.fromtimestamp(ts, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def error_body(error: JobError | None) -> dict[str, str] | None:
    if error is None:
        return None
    return {"code": error.code, "class": str(error.failure_class), "message": error.message}


def submission_body(job: Job) -> dict[str, Any]:
    """The answer to POST /v1/generations, new or replayed."""
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "created_at": iso(job.created_at),
        "correlation_id": job.correlation_id,
    }


def job_summary(job: Job) -> dict[str, Any]:
    """A job without its result (the admin listing); job_body adds ``result``."""
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "task": job.task,
        "model": job.model,
        "created_at": iso(job.created_at),
        "updated_at": iso(job.updated_at),
        "completed_at": iso(job.completed_at),
        "attempt_count": job.attempt_count,
        "correlation_id": job.correlation_id,
        "metadata": job.metadata,
        "error": error_body(job.error),
        "cancel_requested": job.cancel_requested,
    }


def job_body(job: Job, *, result: dict[str, Any] | None) -> dict[str, Any]:
    return {**job_summary(job), "result": result}


def admin_job_body(job: Job) -> dict[str, Any]:
    """Operators see jobs across tenants, so each row says whose it is."""
    return {"tenant_id": job.tenant_id, **job_summary(job)}


def event_body(event: Event) -> dict[str, Any]:
    return {"seq": event.seq, "at": iso(event.at), "kind": str(event.kind), "detail": event.detail}


def attempt_body(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempt_no": attempt.attempt_no,
        "attempt_id": attempt.attempt_id,
        "worker_id": attempt.worker_id,
        "started_at": iso(attempt.started_at),
        "ended_at": iso(attempt.ended_at),
        "outcome": None if attempt.outcome is None else str(attempt.outcome),
        "failure_class": None if attempt.failure_class is None else str(attempt.failure_class),
        "error_code": attempt.error_code,
        "latency_ms": attempt.latency_ms,
        "input_tokens": attempt.input_tokens,
        "output_tokens": attempt.output_tokens,
    }
