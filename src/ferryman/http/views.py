"""How jobs, events and attempts look on the wire (docs/reference.md): plain JSON, times in UTC.

Times are RFC 3339 in UTC with microseconds and a ``Z`` (http/timestamps.py), in
event details too; absent values are null.

Tenants see what their jobs did, never where or how it ran: a worker is named by an
opaque pseudonym (``worker_id`` keeps its place in the documented attempt, and two attempts
on one worker still show the same name, but no host or pid), and no storage
reference is shown (``result_ref`` is left out of event details). Operators see the
real values, and which tenant a job is, but never a job's input or output.

Bodies are encoded with orjson, and a stored result is spliced in as the JSON bytes
it was stored as (``orjson.Fragment``) instead of being decoded and encoded again.
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Annotated, Any

import orjson
from fastapi import Query
from fastapi.responses import JSONResponse
from pydantic import StringConstraints

from ferryman.core.cursors import CURSOR_PATTERN
from ferryman.core.models import usd
from ferryman.http.timestamps import rfc3339
from ferryman.services.jobs import MAX_LIST_JOB_IDS

if TYPE_CHECKING:
    from ferryman.core.errors import FerrymanError
    from ferryman.core.job import Attempt, Event, Job, JobError
    from ferryman.ports.control import AuditRecord, ProviderPause
    from ferryman.ports.queue import UndecodableLetter
    from ferryman.ports.store import JobSummary
    from ferryman.services.jobs import JobView, ListedJob

# Where data lives: for operators, not for tenants.
STORAGE_FIELDS = frozenset({"result_ref"})
WORKER_FIELD = "worker_id"
# Event details that are moments (epoch seconds in the store), written like every time.
TIME_DETAIL_FIELDS = frozenset({"not_before"})

# A job id as ferryman makes them (core/ids.py): ``gen_`` and a ULID.
JOB_ID_PATTERN = r"^gen_[0-9A-HJKMNP-TV-Z]{26}$"
# A page cursor is the next_cursor of an earlier page (core/cursors.py writes and reads
# it). Anything else is refused with 422, never read as "from the start" or passed to
# the store.
Cursor = Annotated[
    str | None,
    Query(pattern=CURSOR_PATTERN, description="The next_cursor of the previous page."),
]
# Jobs a list is limited to (``?job_id=a&job_id=b``): a client waiting for many polls
# them in one request. A malformed id, or too many, is a 422; an unknown one is absent.
JobIds = Annotated[
    list[Annotated[str, StringConstraints(pattern=JOB_ID_PATTERN)]] | None,
    Query(
        max_length=MAX_LIST_JOB_IDS,
        description=f"Only these jobs (repeat the parameter, at most {MAX_LIST_JOB_IDS}); "
        "one that is unknown or another tenant's is simply not listed.",
    ),
]


class JsonBody(JSONResponse):
    """A JSON response encoded by orjson (fast, and it splices stored results as they are)."""

    def render(self, content: Any) -> bytes:
        return json_bytes(content)


def json_bytes(content: Any) -> bytes:
    """``content`` as JsonBody encodes it: orjson, stored results spliced as they are."""
    try:
        return orjson.dumps(content)
    except TypeError:  # rare: a value orjson cannot take (see _encodable)
        return orjson.dumps(_encodable(content))


class SubmittedBody(JsonBody):
    """The 202 of POST /v1/generations, its headers written straight into their raw
    form: what ``JsonBody(submission_body(job), status_code=202, headers=...)`` makes
    (the given headers, then Content-Length and Content-Type, in that order), without
    Starlette's general-purpose header assembly on every submit."""

    def __init__(self, job: Job, *, replayed: bool) -> None:
        self.status_code = 202
        self.background = None
        body = self.body = self.render(submission_body(job))
        raw = [(b"location", f"/v1/generations/{job.job_id}".encode("latin-1"))]
        if replayed:
            raw.append((b"idempotent-replayed", b"true"))
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
        raw.append((b"content-type", b"application/json"))
        self.raw_headers = raw


def error_body(error: JobError | None) -> dict[str, str] | None:
    if error is None:
        return None
    return {"code": error.code, "class": str(error.failure_class), "message": error.message}


def submission_body(job: Job) -> dict[str, Any]:
    """The answer to POST /v1/generations, new or replayed."""
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "created_at": rfc3339(job.created_at),
        "correlation_id": job.correlation_id,
    }


def job_summary(job: Job | JobSummary) -> dict[str, Any]:
    """A job without its result (the admin listing); job_body adds ``result``. Only what
    a JobSummary holds: what a list reads of a job is what it shows."""
    return {
        "job_id": job.job_id,
        "status": str(job.status),
        "task": job.task,
        "model": job.model,
        "created_at": rfc3339(job.created_at),
        "updated_at": rfc3339(job.updated_at),
        "completed_at": rfc3339(job.completed_at),
        "attempt_count": job.attempt_count,
        "correlation_id": job.correlation_id,
        "metadata": job.metadata,
        "error": error_body(job.error),
        "cancel_requested": job.cancel_requested,
    }


def job_body(
    job: Job | JobSummary,
    *,
    result_json: bytes | None = None,
    result_error: FerrymanError | None = None,
) -> dict[str, Any]:
    """A job as its tenant sees it, with its result (stored JSON bytes) if it has one.
    ``result_error`` says why a finished job's result is not there (list items only:
    a single GET answers with the error itself)."""
    result = None if result_json is None else orjson.Fragment(result_json)
    return {**job_summary(job), "result": result, "result_error": result_error_body(result_error)}


def list_item_body(item: ListedJob) -> dict[str, Any]:
    """A job in a list, the fields of a single GET made from its summary: a result that
    cannot be served is an error on this item alone."""
    return {
        **job_body(item.summary, result_json=item.result_json, result_error=item.result_error),
        "waiting": waiting_body(item.waiting),
    }


def job_detail_body(view: JobView) -> dict[str, Any]:
    """One job as GET /v1/generations/{id} answers: with its result, and while it waits
    for a paused provider, why (``waiting``)."""
    return {
        **job_body(view.job, result_json=view.result_json),
        "waiting": waiting_body(view.waiting),
    }


def webhook_event_body(event_type: str, timestamp: float, view: JobView) -> bytes:
    """A completion webhook's body: the event's type and time, and the job exactly as
    GET /v1/generations/{id} answers (with its result when it succeeded)."""
    return orjson.dumps(
        {"type": event_type, "timestamp": rfc3339(timestamp), "data": job_detail_body(view)}
    )


def waiting_body(pause: ProviderPause | None) -> dict[str, Any] | None:
    """Which provider's pause holds a waiting job, since when, and whether ferryman made
    it (and probes the provider, next at ``next_check_at``) or an operator did. Never
    the pause's reason or who made it: an operator's words are not for tenants."""
    if pause is None:
        return None
    return {
        "reason": "provider_paused",
        "provider": pause.provider,
        "since": rfc3339(pause.since),
        "automatic": pause.automatic,
        "next_check_at": rfc3339(pause.next_probe_at),
    }


def result_error_body(error: FerrymanError | None) -> dict[str, str] | None:
    return None if error is None else {"code": error.code, "message": error.message}


def admin_job_body(job: Job | JobSummary) -> dict[str, Any]:
    """Operators see jobs across tenants, so each row says whose it is."""
    return {"tenant_id": job.tenant_id, **job_summary(job)}


def admin_job_detail(job: Job) -> dict[str, Any]:
    """One job as an operator inspects it: whose it is, where it runs, where its result is."""
    return {
        **admin_job_body(job),
        "dispatch_state": str(job.dispatch_state),
        "fence": job.fence,
        "attempt_id": job.attempt_id,
        "worker_id": job.worker_id,
        "lease_until": rfc3339(job.lease_until),
        "not_before": rfc3339(job.not_before),
        "failure_count": job.failure_count,
        "invalid_output_count": job.invalid_output_count,
        "result_ref": job.result_ref,
    }


def worker_pseudonym(worker_id: str) -> str:
    """A stable name for a worker that says nothing about where it runs."""
    return "wkr_" + hashlib.sha256(worker_id.encode("utf-8")).hexdigest()[:12]


def event_body(event: Event, *, internals: bool = False) -> dict[str, Any]:
    detail: dict[str, Any] = {
        key: rfc3339(value) if key in TIME_DETAIL_FIELDS and _is_number(value) else value
        for key, value in event.detail.items()
        if internals or key not in STORAGE_FIELDS
    }
    if not internals and isinstance(detail.get(WORKER_FIELD), str):
        detail[WORKER_FIELD] = worker_pseudonym(detail[WORKER_FIELD])
    return {"seq": event.seq, "at": rfc3339(event.at), "kind": str(event.kind), "detail": detail}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def attempt_body(attempt: Attempt, *, internals: bool = False) -> dict[str, Any]:
    body = _attempt_fields(attempt)
    if not internals:
        body[WORKER_FIELD] = worker_pseudonym(attempt.worker_id)
    return body


def _attempt_fields(attempt: Attempt) -> dict[str, Any]:
    return {
        "attempt_no": attempt.attempt_no,
        "attempt_id": attempt.attempt_id,
        "worker_id": attempt.worker_id,
        "started_at": rfc3339(attempt.started_at),
        "ended_at": rfc3339(attempt.ended_at),
        "outcome": None if attempt.outcome is None else str(attempt.outcome),
        "failure_class": None if attempt.failure_class is None else str(attempt.failure_class),
        "error_code": attempt.error_code,
        "latency_ms": attempt.latency_ms,
        "input_tokens": attempt.input_tokens,
        "output_tokens": attempt.output_tokens,
        # Which model alias the call ran under, which model answered, why it stopped,
        # what it cost, and the provider's id for it (for a support ticket).
        "model": attempt.model or None,
        "provider_model": attempt.provider_model,
        "finish_reason": attempt.finish_reason,
        "cost_usd": None if attempt.cost_nano_usd is None else usd(attempt.cost_nano_usd),
        "provider_request_id": attempt.provider_request_id,
        # The tenant's own data: an answer that broke the output schema, to debug with.
        "raw_output": attempt.raw_output,
    }


def _encodable(value: Any) -> Any:
    """``value`` with what orjson refuses replaced by its stdlib encoding: integers
    beyond 64 bits are valid JSON a client may have put in its metadata."""
    if isinstance(value, dict):
        return {key: _encodable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_encodable(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool):
        return orjson.Fragment(json.dumps(value))
    return value


def audit_body(record: AuditRecord) -> dict[str, Any]:
    return {
        "id": record.record_id,
        "at": rfc3339(record.at),
        "actor": record.actor,
        "action": str(record.action),
        "target": record.target,
        "reason": record.reason,
    }


# An undecodable dead letter's body: anything a sender wrote. A list shows its start,
# one letter at most this much of it (with its full size in bytes).
LETTER_PREVIEW_CHARS = 200
LETTER_BODY_MAX_CHARS = 65_536


def undecodable_letter_body(letter: UndecodableLetter, *, whole: bool = False) -> dict[str, Any]:
    """One dead letter no worker can read, as an operator inspects it (``whole``: with
    its body, up to LETTER_BODY_MAX_CHARS; else a preview)."""
    # A body is text from anywhere: a lone surrogate would not encode as JSON.
    body = letter.body.encode("utf-8", "replace").decode("utf-8")
    limit = LETTER_BODY_MAX_CHARS if whole else LETTER_PREVIEW_CHARS
    shown = {"body": body[:limit]} if whole else {"body_preview": body[:limit]}
    return {
        "id": letter.dead_letter_id,
        "sent_at": rfc3339(letter.sent_at),
        "dead_lettered_at": rfc3339(letter.dead_lettered_at),
        "receive_count": letter.receive_count,
        "body_bytes": len(body.encode("utf-8")),
        **shown,
        "truncated": len(body) > limit,
    }
