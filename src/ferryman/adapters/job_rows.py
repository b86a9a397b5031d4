"""Rows to domain objects and back: the one place that knows the column layout.

SQLite and PostgreSQL share the layout, so both engines map rows here; a row is
anything read by column name (``sqlite3.Row``, psycopg's dict rows). Booleans are
bound as Python bools (SQLite stores them as 0/1).
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from ferryman.core.cursors import cursor_after
from ferryman.core.errors import FailureClass
from ferryman.core.job import (
    Attempt,
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    Event,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.ports.store import JobPage, JobSummary

if TYPE_CHECKING:
    from collections.abc import Sequence


class Row(Protocol):
    def __getitem__(self, column: str, /) -> Any: ...


def load_json(text: str) -> Any:
    """orjson where it can (faster, and its cached keys make a job in memory smaller: a
    worker holds thousands); the standard parser for what only it reads (NaN, integers
    over 64 bits, which older rows may hold)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def job_params(job: Job) -> dict[str, Any]:
    """Every column of the job's row (an insert)."""
    params = job_update_params(job)
    params.update(
        {
            "tenant_id": job.tenant_id,
            "idempotency_key": job.idempotency_key,
            "request_hash": job.request_hash,
            "task": job.task,
            "model": job.model,
            "input": dump_json(job.input),
            "metadata": None if job.metadata is None else dump_json(job.metadata),
            "payload_version": job.payload_version,
            "traceparent": job.traceparent,
            "correlation_id": job.correlation_id,
            "created_at": job.created_at,
            "webhook_url": job.webhook_url,
        }
    )
    return params


def job_update_params(job: Job) -> dict[str, Any]:
    """The columns a change may move (the update's), keyed by ``job_id``: what a job is
    asked to do (its input, metadata, task, model) never changes after it is stored,
    so an update does not encode it again."""
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "dispatch_state": str(job.dispatch_state),
        "attempt_count": job.attempt_count,
        "failure_count": job.failure_count,
        "invalid_output_count": job.invalid_output_count,
        "fence": job.fence,
        "attempt_id": job.attempt_id,
        "worker_id": job.worker_id,
        "lease_until": job.lease_until,
        "not_before": job.not_before,
        "cancel_requested": job.cancel_requested,
        "result_ref": job.result_ref,
        "error": error_json(job.error),
        "updated_at": job.updated_at,
        "completed_at": job.completed_at,
        "revision": job.revision,
        "event_seq": job.event_seq,
        "deliveries_without_outcome": job.deliveries_without_outcome,
        "fallback_level": job.fallback_level,
        # The webhook outbox (core/changes.py): a finished job's only moving columns.
        "webhook_due_at": job.webhook_due_at,
        "webhook_attempts": job.webhook_attempts,
        "webhook_event_seq": job.webhook_event_seq,
    }


def error_json(error: JobError | None) -> str | None:
    """A job's error as its column holds it."""
    if error is None:
        return None
    return dump_json(
        {"code": error.code, "class": str(error.failure_class), "message": error.message}
    )


def _error_from(text: str | None) -> JobError | None:
    if text is None:
        return None
    data = json.loads(text)
    return JobError(
        code=data["code"], failure_class=FailureClass(data["class"]), message=data["message"]
    )


def _shared(text: str | None) -> str | None:
    return None if text is None else sys.intern(text)


def job_from_row(row: Row) -> Job:
    """The job of a row. Columns that take few values (tenant, task, model, worker)
    share one string across jobs: a worker holds thousands of jobs in flight, and each
    row's own copy of them cost about 60 bytes (docs/benchmarks.md, "Calls in flight").
    Every such value was checked on the way in (a tenant id's pattern, a known task, a
    model of the catalog, the worker's own id); on CPython 3.11 an interned string is
    freed with its last job (3.12.0-3.12.4 kept them for the process's life)."""
    return Job(
        tenant_id=sys.intern(row["tenant_id"]),
        job_id=row["job_id"],
        task=sys.intern(row["task"]),
        model=sys.intern(row["model"]),
        input=load_json(row["input"]),
        request_hash=row["request_hash"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        correlation_id=row["correlation_id"],
        idempotency_key=row["idempotency_key"],
        metadata=None if row["metadata"] is None else load_json(row["metadata"]),
        payload_version=row["payload_version"],
        status=JobStatus(row["status"]),
        dispatch_state=DispatchState(row["dispatch_state"]),
        attempt_count=row["attempt_count"],
        failure_count=row["failure_count"],
        invalid_output_count=row["invalid_output_count"],
        fence=row["fence"],
        attempt_id=row["attempt_id"],
        worker_id=_shared(row["worker_id"]),
        lease_until=row["lease_until"],
        not_before=row["not_before"],
        cancel_requested=bool(row["cancel_requested"]),
        result_ref=row["result_ref"],
        error=_error_from(row["error"]),
        traceparent=row["traceparent"],
        completed_at=row["completed_at"],
        revision=row["revision"],
        event_seq=row["event_seq"],
        deliveries_without_outcome=row["deliveries_without_outcome"],
        fallback_level=row["fallback_level"],
        webhook_url=row["webhook_url"],
        webhook_due_at=row["webhook_due_at"],
        webhook_attempts=row["webhook_attempts"],
        webhook_event_seq=row["webhook_event_seq"],
    )


def summary_from_row(row: Row) -> JobSummary:
    """A list's row as the job's summary: only the columns a summary holds are read
    (the engines' list queries select no others, ``input`` least of all)."""
    return JobSummary(
        tenant_id=sys.intern(row["tenant_id"]),
        job_id=row["job_id"],
        status=JobStatus(row["status"]),
        task=sys.intern(row["task"]),
        model=sys.intern(row["model"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
        completed_at=row["completed_at"],
        attempt_count=row["attempt_count"],
        correlation_id=row["correlation_id"],
        metadata=None if row["metadata"] is None else load_json(row["metadata"]),
        error=_error_from(row["error"]),
        cancel_requested=bool(row["cancel_requested"]),
        attempt_id=row["attempt_id"],
        result_ref=row["result_ref"],
        fallback_level=row["fallback_level"],
    )


# A list without a byte budget: more than any page weighs (bound as a 64-bit integer).
UNLIMITED_BYTES = 2**62


def summary_page(rows: Sequence[Row], *, limit: int, max_bytes: int) -> JobPage:
    """A page of a list query's rows, newest first: at most ``limit`` jobs, and none after
    the one whose running ``through_bytes`` passes ``max_bytes`` (always at least one).
    The query returns one row more than the page when more match."""
    jobs: list[JobSummary] = []
    listed = 0
    for row in rows:
        if len(jobs) == limit or (jobs and row["through_bytes"] > max_bytes):
            return JobPage(
                jobs=jobs, next_cursor=cursor_after(jobs[-1].job_id), listed_bytes=listed
            )
        jobs.append(summary_from_row(row))
        listed = row["through_bytes"]
    return JobPage(jobs=jobs, next_cursor=None, listed_bytes=listed)


def report_params(report: AttemptReport) -> dict[str, Any]:
    return {
        "outcome": str(report.outcome),
        "failure_class": None if report.failure_class is None else str(report.failure_class),
        "error_code": report.error_code,
        "latency_ms": report.latency_ms,
        "input_tokens": report.input_tokens,
        "output_tokens": report.output_tokens,
        "provider_request_id": report.provider_request_id,
        "model": report.model,
        "provider": report.provider,
        "provider_model": report.provider_model,
        "finish_reason": report.finish_reason,
        "cost_nano_usd": report.cost_nano_usd,
        "raw_output": report.raw_output,
    }


def opened_attempt_params(attempt: Attempt) -> dict[str, Any]:
    """The columns of a new attempt row (its job's id apart)."""
    return {
        "attempt_no": attempt.attempt_no,
        "attempt_id": attempt.attempt_id,
        "worker_id": attempt.worker_id,
        "started_at": attempt.started_at,
        "tenant_id": attempt.tenant_id,
        "task": attempt.task,
        "model": attempt.model,
    }


def attempt_from_row(row: Row) -> Attempt:
    return Attempt(
        job_id=row["job_id"],
        attempt_no=row["attempt_no"],
        attempt_id=row["attempt_id"],
        worker_id=row["worker_id"],
        started_at=row["started_at"],
        ended_at=row["ended_at"],
        outcome=None if row["outcome"] is None else AttemptOutcome(row["outcome"]),
        failure_class=None if row["failure_class"] is None else FailureClass(row["failure_class"]),
        error_code=row["error_code"],
        latency_ms=row["latency_ms"],
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        provider_request_id=row["provider_request_id"],
        tenant_id=row["tenant_id"],
        task=row["task"],
        model=row["model"],
        provider=row["provider"],
        provider_model=row["provider_model"],
        finish_reason=row["finish_reason"],
        cost_nano_usd=row["cost_nano_usd"],
        raw_output=row["raw_output"],
    )


def event_from_row(row: Row) -> Event:
    return Event(
        job_id=row["job_id"],
        seq=row["seq"],
        at=row["at"],
        kind=EventKind(row["kind"]),
        detail=json.loads(row["detail"]),
    )
