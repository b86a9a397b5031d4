"""Jobs, attempts, events and summaries as DynamoDB items, and back: the one place that
knows their attributes.

Items are in the low-level client's form (``{"S": ...}``, ``{"N": ...}``). What each
field holds:

- JSON (a job's input and metadata, its error, an event's detail) is a String of
  compact JSON, written and read as the SQL engines write and read their columns
  (adapters/job_rows.py): exactly what memory holds comes back, unicode, integers past
  2^64 and floats like 1e308 included (a DynamoDB Number could not hold those), and a
  list weighs the same bytes on every engine.
- Times and other floats are Numbers written from ``repr`` (the shortest text that
  reads back as the same float) in fixed-point form; ints are Numbers too. A Number is
  read back by the field's type, since DynamoDB returns ``1700000000`` for
  ``1700000000.0``.
- ``None`` is no attribute at all (an update REMOVEs it), so a sparse index leaves
  the item out.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.job_rows import dump_json, job_params, job_update_params, load_json
from ferryman.core.errors import FailureClass
from ferryman.core.job import (
    DEAD_LETTERED_CODE,
    Attempt,
    AttemptOutcome,
    DispatchState,
    Event,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.ports.store import JobSummary

if TYPE_CHECKING:
    from ferryman.core.changes import AttemptEnding

Item = dict[str, dict[str, Any]]


# --- values -------------------------------------------------------------------------


def number(value: float) -> str:
    """A Number's text: ints as they are, floats from repr in fixed-point form."""
    if isinstance(value, bool):
        raise TypeError("a bool is not a Number")
    if isinstance(value, int):
        return str(value)
    return format(Decimal(repr(value)), "f")


def value_of(value: Any) -> dict[str, Any]:
    """An attribute value for a str, bool, int or float."""
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, int | float):
        return {"N": number(value)}
    raise TypeError(f"no attribute form for {type(value).__name__}")


def _s(item: Item, name: str) -> str | None:
    value = item.get(name)
    return None if value is None else str(value["S"])


def _str(item: Item, name: str) -> str:
    return str(item[name]["S"])


def _int(item: Item, name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value["N"])


def _float(item: Item, name: str) -> float | None:
    value = item.get(name)
    return None if value is None else float(value["N"])


def _bool(item: Item, name: str) -> bool:
    value = item.get(name)
    return bool(value is not None and value["BOOL"])


# A run of 19 digits or more may be an integer past 64 bits, which orjson reads as a
# float (1180591620717411303424 -> 1.1805916207174113e+21): such text is read by the
# standard parser, which keeps it an int, as memory does.
_LONG_DIGITS = re.compile(r"[0-9]{19}")


def load_exact(text: str) -> Any:
    """JSON text as the value it was dumped from: orjson where that is exact (the
    usual case, and faster), the standard parser where a long integer may hide."""
    if _LONG_DIGITS.search(text) is not None:
        return json.loads(text)
    return load_json(text)


def _json(item: Item, name: str) -> Any:
    value = item.get(name)
    return None if value is None else load_exact(value["S"])


def attributes(values: dict[str, Any]) -> Item:
    """The attributes for the values that are not None."""
    return {name: value_of(value) for name, value in values.items() if value is not None}


# --- jobs -----------------------------------------------------------------------------


def job_bytes(job: Job) -> int:
    """What a job's input and metadata weigh as stored (UTF-8 JSON): StoreCapabilities'
    ``max_job_bytes`` bounds it."""
    metadata = 0 if job.metadata is None else len(dump_json(job.metadata).encode())
    return len(dump_json(job.input).encode()) + metadata


def sweep_keys(job: Job) -> tuple[str, str] | None:
    """The job's place in the sweep index (layout.py), or None when nothing looks for
    it: a QUEUED job whose message was sent is driven by that message, and a finished
    job whose webhook is owed is the dispatcher's (retention keeps it until then)."""
    shard = layout.shard_of(job.job_id, layout.SWEEP_SHARDS)
    if job.status.terminal:
        if job.webhook_due_at is not None:
            return None
        done = job.completed_at if job.completed_at is not None else job.updated_at
        partition = layout.sweep_partition("done", shard)
        return partition, f"{layout.sortable_time(done)}#{job.job_id}"
    if job.status is JobStatus.QUEUED and job.dispatch_state is DispatchState.DISPATCHED:
        return None
    partition = layout.sweep_partition("open", shard)
    return partition, f"{layout.sortable_time(job.updated_at)}#{job.job_id}"


# The webhook fields of a job (core/job.py). job_rows may list them among the columns
# or not: the item's form of them is webhook_values', whichever it does.
WEBHOOK_FIELDS = ("webhook_url", "webhook_due_at", "webhook_attempts", "webhook_event_seq")


def job_update_values(job: Job) -> dict[str, Any]:
    """The attributes a change may move, None for those it removes: the SQL engines'
    update columns (adapters/job_rows.py: a job's input, metadata, task and model never
    change after it is stored, so no update writes them again), the error code lists
    filter on, the webhook outbox, and the job's place in the sweep, dead-letter and
    webhook indexes."""
    values = job_update_params(job)
    del values["job_id"]  # the item's key
    for name in WEBHOOK_FIELDS:
        values.pop(name, None)
    values.update(webhook_values(job))
    sweep = sweep_keys(job)
    values["error_code"] = None if job.error is None else job.error.code
    values["spk"] = None if sweep is None else sweep[0]
    values["ssk"] = None if sweep is None else sweep[1]
    dead = is_dead_letter(job.status, values["error_code"])
    shard = layout.shard_of(job.job_id, layout.DEAD_LETTER_SHARDS)
    values["lpk"] = layout.dead_letter_partition(shard) if dead else None
    values["lsk"] = job.job_id if dead else None
    return values


def webhook_values(job: Job) -> dict[str, Any]:
    """The webhook outbox as a change writes it, with the job's place in the webhook
    index while a notification is owed. A job without a ``webhook_url`` never owes one:
    none of it is written, so such a job's item and every write of it weigh what they
    did before webhooks (a write costs a unit per KB). ``webhook_url`` is fixed at
    intake (job_item writes it)."""
    if job.webhook_url is None:
        return {}
    due = job.webhook_due_at
    shard = layout.shard_of(job.job_id, layout.WEBHOOK_SHARDS)
    return {
        "webhook_due_at": due,
        "webhook_attempts": job.webhook_attempts,
        "webhook_event_seq": job.webhook_event_seq,
        "wpk": None if due is None else layout.webhook_partition(shard),
        "wsk": None if due is None else f"{layout.sortable_time(due)}#{job.job_id}",
    }


def is_dead_letter(status: JobStatus | None, error_code: str | None) -> bool:
    """A job failed because its message was dead-lettered (the operators' list)."""
    return status is JobStatus.FAILED and error_code == DEAD_LETTERED_CODE


def job_item(job: Job) -> Item:
    """Every attribute of a new job's item, as the SQL engines' row (adapters/job_rows.py)
    but its input (input_item), with the error code and its index keys."""
    # The input is input_item's: not encoded here too (a prompt may be 350 KB).
    values = job_params(dataclasses.replace(job, input={}))
    del values["input"]
    for name in WEBHOOK_FIELDS:
        values.pop(name, None)
    values.update(job_update_values(job))
    values["webhook_url"] = job.webhook_url
    values.update(
        {
            "pk": layout.job_pk(job.job_id),
            "sk": layout.JOB_SK,
            "tpk": layout.tenant_partition(job.tenant_id),
            "tsk": job.job_id,
            "apk": layout.all_jobs_partition(layout.shard_of(job.job_id, layout.ALL_JOBS_SHARDS)),
            "ask": job.job_id,
        }
    )
    return attributes(values)


def input_item(job: Job) -> Item:
    """A new job's input, in an item of its own beside the job's (layout.py): written
    once, so the job item every change rewrites stays small however long the prompt."""
    return attributes(
        {"pk": layout.job_pk(job.job_id), "sk": layout.INPUT_SK, "input": dump_json(job.input)}
    )


def _error(item: Item) -> JobError | None:
    data = _json(item, "error")
    if data is None:
        return None
    return JobError(
        code=data["code"], failure_class=FailureClass(data["class"]), message=data["message"]
    )


def _shared(text: str | None) -> str | None:
    # Few values, many jobs in a worker's hands: one string for all (job_rows.py).
    return None if text is None else sys.intern(text)


def job_from_items(item: Item, stored_input: Item) -> Job:
    """A job from its item and its input's item (input_item)."""
    return Job(
        tenant_id=sys.intern(_str(item, "tenant_id")),
        job_id=_str(item, "job_id"),
        task=sys.intern(_str(item, "task")),
        model=sys.intern(_str(item, "model")),
        input=_json(stored_input, "input"),
        request_hash=_str(item, "request_hash"),
        created_at=float(item["created_at"]["N"]),
        updated_at=float(item["updated_at"]["N"]),
        correlation_id=_str(item, "correlation_id"),
        idempotency_key=_s(item, "idempotency_key"),
        metadata=_json(item, "metadata"),
        payload_version=int(item["payload_version"]["N"]),
        status=JobStatus(_str(item, "status")),
        dispatch_state=DispatchState(_str(item, "dispatch_state")),
        attempt_count=int(item["attempt_count"]["N"]),
        failure_count=int(item["failure_count"]["N"]),
        invalid_output_count=int(item["invalid_output_count"]["N"]),
        fence=int(item["fence"]["N"]),
        deliveries_without_outcome=int(item["deliveries_without_outcome"]["N"]),
        fallback_level=int(item["fallback_level"]["N"]),
        revision=int(item["revision"]["N"]),
        event_seq=int(item["event_seq"]["N"]),
        attempt_id=_s(item, "attempt_id"),
        worker_id=_shared(_s(item, "worker_id")),
        lease_until=_float(item, "lease_until"),
        not_before=_float(item, "not_before"),
        cancel_requested=_bool(item, "cancel_requested"),
        result_ref=_s(item, "result_ref"),
        error=_error(item),
        traceparent=_s(item, "traceparent"),
        completed_at=_float(item, "completed_at"),
        webhook_url=_s(item, "webhook_url"),
        webhook_due_at=_float(item, "webhook_due_at"),
        webhook_attempts=_int(item, "webhook_attempts") or 0,
        webhook_event_seq=_int(item, "webhook_event_seq") or 0,
    )


def summary_from_item(item: Item) -> JobSummary:
    """A list's item (an index's projection: layout.SUMMARY_ATTRIBUTES) as a summary."""
    return JobSummary(
        tenant_id=sys.intern(_str(item, "tenant_id")),
        job_id=_str(item, "job_id"),
        status=JobStatus(_str(item, "status")),
        task=sys.intern(_str(item, "task")),
        model=sys.intern(_str(item, "model")),
        created_at=float(item["created_at"]["N"]),
        updated_at=float(item["updated_at"]["N"]),
        completed_at=_float(item, "completed_at"),
        attempt_count=int(item["attempt_count"]["N"]),
        correlation_id=_str(item, "correlation_id"),
        metadata=_json(item, "metadata"),
        error=_error(item),
        cancel_requested=_bool(item, "cancel_requested"),
        attempt_id=_s(item, "attempt_id"),
        result_ref=_s(item, "result_ref"),
        fallback_level=int(item["fallback_level"]["N"]),
    )


def listed_bytes(item: Item) -> int:
    """What a listed job weighs against a page's byte budget (ports/store.py): the
    bytes of its metadata and error as stored, the same text the SQL engines weigh."""
    metadata = item.get("metadata")
    error = item.get("error")
    return (0 if metadata is None else len(metadata["S"].encode())) + (
        0 if error is None else len(error["S"].encode())
    )


# --- events -----------------------------------------------------------------------------


def event_item(event: Event) -> Item:
    return attributes(
        {
            "pk": layout.job_pk(event.job_id),
            "sk": layout.event_sk(event.seq),
            "job_id": event.job_id,
            "seq": event.seq,
            "at": event.at,
            "kind": str(event.kind),
            "detail": dump_json(event.detail),
        }
    )


def event_from_item(item: Item) -> Event:
    return Event(
        job_id=_str(item, "job_id"),
        seq=int(item["seq"]["N"]),
        at=float(item["at"]["N"]),
        kind=EventKind(_str(item, "kind")),
        detail=_json(item, "detail"),
    )


# --- attempts -------------------------------------------------------------------------


def attempt_item(attempt: Attempt) -> Item:
    """A new attempt's item, in the usage report's index by the day it started."""
    shard = layout.shard_of(attempt.attempt_id, layout.ATTEMPT_DAY_SHARDS)
    return attributes(
        {
            "pk": layout.job_pk(attempt.job_id),
            "sk": layout.attempt_sk(attempt.attempt_id),
            "job_id": attempt.job_id,
            "attempt_no": attempt.attempt_no,
            "attempt_id": attempt.attempt_id,
            "worker_id": attempt.worker_id,
            "started_at": attempt.started_at,
            "tenant_id": attempt.tenant_id,
            "task": attempt.task,
            "model": attempt.model,
            "dpk": layout.day_partition(layout.utc_day(attempt.started_at), shard),
            "dsk": f"{attempt.tenant_id}#{attempt.attempt_id}",
        }
    )


def ending_values(ending: AttemptEnding) -> dict[str, Any]:
    """What an ending writes onto its attempt, None for what it clears. The model is
    kept when the report names none (the attempt never got as far as a call)."""
    report = ending.report
    values: dict[str, Any] = {
        "ended_at": ending.ended_at,
        "outcome": str(report.outcome),
        "failure_class": None if report.failure_class is None else str(report.failure_class),
        "error_code": report.error_code,
        "latency_ms": report.latency_ms,
        "input_tokens": report.input_tokens,
        "output_tokens": report.output_tokens,
        "provider_request_id": report.provider_request_id,
        "provider": report.provider,
        "provider_model": report.provider_model,
        "finish_reason": report.finish_reason,
        "cost_nano_usd": report.cost_nano_usd,
        "raw_output": report.raw_output,
    }
    if report.model is not None:
        values["model"] = report.model
    return values


def attempt_from_item(item: Item) -> Attempt:
    outcome = _s(item, "outcome")
    failure_class = _s(item, "failure_class")
    return Attempt(
        job_id=_str(item, "job_id"),
        attempt_no=int(item["attempt_no"]["N"]),
        attempt_id=_str(item, "attempt_id"),
        worker_id=_str(item, "worker_id"),
        started_at=float(item["started_at"]["N"]),
        ended_at=_float(item, "ended_at"),
        outcome=None if outcome is None else AttemptOutcome(outcome),
        failure_class=None if failure_class is None else FailureClass(failure_class),
        error_code=_s(item, "error_code"),
        latency_ms=_int(item, "latency_ms"),
        input_tokens=_int(item, "input_tokens"),
        output_tokens=_int(item, "output_tokens"),
        provider_request_id=_s(item, "provider_request_id"),
        tenant_id=_str(item, "tenant_id"),
        task=_str(item, "task"),
        model=_str(item, "model"),
        provider=_s(item, "provider"),
        provider_model=_s(item, "provider_model"),
        finish_reason=_s(item, "finish_reason"),
        cost_nano_usd=_int(item, "cost_nano_usd"),
        raw_output=_s(item, "raw_output"),
    )
