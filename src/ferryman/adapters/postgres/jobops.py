"""Persisting a Change, and the other job writes, as coroutines on one transaction.

A change is written as given (core.changes decides what it contains), as one
statement (jobs.sql's change blocks): the job row only if its revision is still the
one the change expects (``UPDATE ... WHERE revision = r``; a concurrent writer of the
same row makes this one wait, then re-check the revision), and, only if that row was
written, its events, attempt rows, queue message, the tenant's usage counters and the
wake-ups. Every write path (a change, an accept, a batch of accepts) uses that one
form, so what goes with a change is written in one place.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ferryman.adapters.job_rows import (
    dump_json,
    job_from_row,
    job_params,
    job_update_params,
    opened_attempt_params,
)
from ferryman.adapters.postgres import messages
from ferryman.adapters.postgres.database import execute, fetch_all, fetch_one
from ferryman.adapters.postgres.grouping import Answer, Statement, pipelined
from ferryman.adapters.postgres.rows import report_params
from ferryman.adapters.postgres.sql import JOBS, MISC, QUEUE
from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError
from ferryman.ports.queue import QueueMessage
from ferryman.ports.store import Accepted, CreateOutcome

if TYPE_CHECKING:
    from collections.abc import Sequence

    import psycopg

    from ferryman.core.changes import Change
    from ferryman.core.job import Job
    from ferryman.ports.results import StagedResult


# One statement each (jobs.sql): the job row, then everything the change brings.
def _statement(*blocks: str) -> str:
    """The blocks as one statement, without comment lines, runs of blank, or blanks
    beside a comma, an equals sign or a parenthesis: psycopg caches its parse of a
    statement only up to 4,096 characters (none of these blocks holds a string literal
    that blanks, those signs or "--" could be part of)."""
    lines = (line for b in blocks for line in JOBS[b].splitlines())
    text = " ".join(ln for ln in lines if not ln.lstrip().startswith("--"))
    return _AROUND_SIGNS.sub(r"\1", re.sub(r"\s+", " ", text)).strip()


_AROUND_SIGNS = re.compile(r" ?([,=()]) ?")


_UPDATE_CHANGE = _statement("written_by_update", "change_consequences", "change_outcome")
_UPDATE_ACK_CHANGE = _statement(
    "written_by_update", "change_consequences", "change_ack", "change_outcome"
)
_UPDATE_RESULT_CHANGE = _statement(
    "written_by_update", "change_consequences", "change_result", "change_outcome"
)
_UPDATE_RESULT_ACK_CHANGE = _statement(
    "written_by_update", "change_consequences", "change_result", "change_ack", "change_outcome"
)
_INSERT_CHANGE = _statement("written_by_insert", "change_consequences", "change_outcome")
_KEYED_INSERT_CHANGE = _statement(
    "written_by_keyed_insert", "change_consequences", "keyed_change_outcome"
)


def one_statement(change: Change) -> bool:
    """Whether the change fits the one-statement form: at most one attempt ended (every
    rule ends at most one; a takeover of several would take the general path)."""
    return len(change.closed) <= 1


def apply_statement(
    change: Change, *, result: StagedResult | None = None, ack: tuple[str, str] | None = None
) -> Statement[bool]:
    """``apply`` as one statement: True if the job's revision was the expected one.
    Only if the change was written, the same statement also writes ``result`` (when the
    change references it) and deletes the delivery's message ``ack`` (its id and
    receipt token)."""
    return _change_statement(_Item(change, result, ack))


@dataclass(frozen=True, slots=True)
class _Item:
    """One change to write, with the result it publishes and the message it acks."""

    change: Change
    result: StagedResult | None
    ack: tuple[str, str] | None


_QUERIES = {
    (False, False): _UPDATE_CHANGE,
    (False, True): _UPDATE_ACK_CHANGE,
    (True, False): _UPDATE_RESULT_CHANGE,
    (True, True): _UPDATE_RESULT_ACK_CHANGE,
}


def _change_statement(item: _Item) -> Statement[bool]:
    """The change as its own statement, or, with the other changes of its group-commit
    batch, part of one many_changes statement (grouping.py's Merger)."""

    def params() -> dict[str, Any]:
        change = item.change
        values = _change_params(change, job_update_params(change.after), stored=0)
        values["expected_revision"] = change.expected_revision
        if item.result is not None:
            values.update(_result_params(change, item.result))
        if item.ack is not None:
            values["ack_id"], values["ack_token"] = item.ack
        return values

    query = _QUERIES[(item.result is not None, item.ack is not None)]
    return Statement(query, {}, _written, returns_row=True, merge=CHANGES, item=item, lazy=params)


def _result_params(change: Change, result: StagedResult) -> dict[str, Any]:
    """The result's row, or NULLs when the change does not publish it (a cancel that
    won over the publish): nothing would ever reference it."""
    if change.after.result_ref != result.ref:
        return {"r_key": None, "r_data": None}
    return {"r_key": result.key, "r_data": result.data}


async def apply_with(
    conn: psycopg.AsyncConnection[Any],
    change: Change,
    *,
    result: StagedResult | None = None,
    ack: tuple[str, str] | None = None,
) -> bool:
    """``apply_statement`` for a change that does not fit one statement: the change,
    the result and the ack, in the caller's transaction."""
    if not await apply(conn, change):
        return False
    row = None if result is None else _result_params(change, result)
    if row is not None and row["r_key"] is not None:
        await execute(conn, MISC["put_result"], {"key": row["r_key"], "data": row["r_data"]})
    if ack is not None:
        await execute(conn, QUEUE["delete_message"], {"id": ack[0], "token": ack[1]})
    return True


_MANY_CHANGES = _statement("many_written_by_update", "many_consequences")
_MANY_CREATES = _statement("many_written_by_insert", "many_consequences")


def many_in_one_statement(changes: Sequence[Change]) -> bool:
    """Whether these changes fit ``apply_many_statement``: each fits one statement, and
    no two are of one job (in order, the second would be conditional on the first)."""
    return all(one_statement(c) for c in changes) and len({c.job_id for c in changes}) == len(
        changes
    )


def apply_many_statement(changes: Sequence[Change]) -> Statement[list[bool]]:
    """``apply`` for each change, as one statement (jobs.sql's many_changes): per change,
    whether its job still had its expected revision and it was written."""
    params = _many_params([_Item(change, None, None) for change in changes])
    ids = params["ids"]

    def written(_rowcount: int, row: tuple[Any, ...] | None) -> list[bool]:
        done = set(row[0] or ()) if row is not None else set()
        return [job_id in done for job_id in ids]

    return Statement(_MANY_CHANGES, params, written, returns_row=True)


class _Changes:
    """Merges the change statements of one group-commit batch into one many_changes
    statement (with ``query``: the accepts of new jobs without a key, into one
    many_creates)."""

    def __init__(self, query: str) -> None:
        self._query = query

    def identity(self, item: _Item) -> str:
        # Two changes of one job: the second is conditional on the first's revision.
        return item.change.job_id

    def combine(self, items: Sequence[_Item]) -> Statement[list[Answer]]:
        params = _many_params(items)
        ids = params["ids"]

        def answers(_rowcount: int, row: tuple[Any, ...] | None) -> list[Answer]:
            done = set(row[0] or ()) if row is not None else set()
            # As each one's own statement would have answered: its written count.
            return [(1, (1,)) if job_id in done else (0, (0,)) for job_id in ids]

        return Statement(self._query, params, answers, returns_row=True)


CHANGES = _Changes(_MANY_CHANGES)
CREATES = _Changes(_MANY_CREATES)


def _many_params(items: Sequence[_Item]) -> dict[str, Any]:
    """many_changes' parameters: each part of every change as JSON rows keyed by job."""
    jobs: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    closed: list[dict[str, Any]] = []
    opened: list[dict[str, Any]] = []
    queued: list[dict[str, Any]] = []
    usage: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    acks: list[dict[str, Any]] = []
    stops: list[str] = []
    for item in items:
        change = item.change
        job_id = change.job_id
        if change.before is None:
            row = job_params(change.after)
        else:
            row = job_update_params(change.after)
            row["expected_revision"] = change.expected_revision
        jobs.append(row)
        events.extend(
            {
                "job_id": job_id,
                "seq": event.seq,
                "at": event.at,
                "kind": str(event.kind),
                "detail": dump_json(event.detail),
            }
            for event in change.events
        )
        for ending in change.closed:
            ended = report_params(ending.report)
            ended["job_id"] = job_id
            ended["attempt_id"] = ending.attempt_id
            ended["ended_at"] = ending.ended_at
            ended["replaces_abandoned"] = ending.replaces_abandoned
            closed.append(ended)
        if change.opened is not None:
            attempt = opened_attempt_params(change.opened)
            attempt["job_id"] = job_id
            opened.append(attempt)
        if change.enqueue:
            queued.append(
                {
                    "job_id": job_id,
                    "id": messages.new_message_id(job_id),
                    "body": QueueMessage.for_job(change.after).to_body(),
                    "at": change.at,
                }
            )
        stored = 1 if change.before is None else 0
        if change.backlog_delta or stored:
            usage.append({"job_id": job_id, "unfinished": change.backlog_delta, "stored": stored})
        if change.stops_running_attempt:
            stops.append(job_id)
        if item.result is not None and change.after.result_ref == item.result.ref:
            # Hex in the JSON text (bytes have no JSON form); decoded by the statement.
            results.append(
                {"job_id": job_id, "key": item.result.key, "data": item.result.data.hex()}
            )
        if item.ack is not None:
            acks.append({"job_id": job_id, "id": item.ack[0], "token": item.ack[1]})
    return {
        "jobs": json.dumps(jobs),
        "events": json.dumps(events),
        "closed": json.dumps(closed),
        "opened": json.dumps(opened),
        "messages": json.dumps(queued),
        "usage": json.dumps(usage),
        "results": json.dumps(results),
        "acks": json.dumps(acks),
        "stops": stops,
        "statuses": [item.change.job_id for item in items if item.change.changes_status],
        "ids": [item.change.job_id for item in items],
        "closed_ids": [ended["attempt_id"] for ended in closed],
        "ack_ids": [ack["id"] for ack in acks],
    }


async def apply_many(conn: psycopg.AsyncConnection[Any], changes: Sequence[Change]) -> list[bool]:
    """``apply`` for each change, in order, in the caller's transaction."""
    return [await apply(conn, change) for change in changes]


def create_statement(change: Change) -> Statement[Accepted]:
    """``create`` of a job without an idempotency key, as one statement."""
    job = change.after

    def accepted(_rowcount: int, row: tuple[Any, ...] | None) -> Accepted:
        if not _written(_rowcount, row):
            raise StateConflictError("a job with this id already exists")
        return Accepted(job=job, created=True)

    return Statement(
        _INSERT_CHANGE,
        {},
        accepted,
        returns_row=True,
        merge=CREATES,
        item=_Item(change, None, None),
        lazy=lambda: _change_params(change, job_params(job), stored=1),
    )


def keyed_create_statement(
    change: Change, *, idempotency_expires_at: float | None
) -> Statement[Accepted | None]:
    """``create`` of a job with an idempotency key, as one statement when the key is
    free; None when the key was taken (nothing written: the caller runs ``create``).
    Should the statement be refused, its batch runs ``create`` in its place."""
    job = change.after
    params = _change_params(change, job_params(job), stored=1)
    params["key_expires_at"] = idempotency_expires_at

    def accepted(_rowcount: int, row: tuple[Any, ...] | None) -> Accepted | None:
        if row is None or row[1] == 0:
            return None
        return Accepted(job=job, created=True)

    async def general(conn: psycopg.AsyncConnection[Any]) -> Accepted:
        return await create(conn, change, idempotency_expires_at=idempotency_expires_at)

    return Statement(_KEYED_INSERT_CHANGE, params, accepted, returns_row=True, general=general)


def _written(_rowcount: int, row: tuple[Any, ...] | None) -> bool:
    return row is not None and row[0] == 1


def _change_params(change: Change, params: dict[str, Any], *, stored: int) -> dict[str, Any]:
    job = change.after
    params["events"] = json.dumps(
        [
            {
                "seq": event.seq,
                "at": event.at,
                "kind": str(event.kind),
                "detail": dump_json(event.detail),
            }
            for event in change.events
        ]
    )
    params["closed"] = None
    params["replaces_abandoned"] = False
    if change.closed:
        [ending] = change.closed
        closed = report_params(ending.report)
        closed["attempt_id"] = ending.attempt_id
        closed["ended_at"] = ending.ended_at
        params["closed"] = json.dumps(closed)
        params["replaces_abandoned"] = ending.replaces_abandoned
    attempt = change.opened
    params["opened"] = None
    if attempt is not None:
        params["opened"] = json.dumps(opened_attempt_params(attempt))
    params["m_id"] = params["m_body"] = params["m_at"] = None
    if change.enqueue:
        params["m_id"] = messages.new_message_id(job.job_id)
        params["m_body"] = QueueMessage.for_job(job).to_body()
        params["m_at"] = change.at
    params["stops_running"] = change.stops_running_attempt
    params["changes_status"] = change.changes_status
    params["u_unfinished"] = change.backlog_delta
    params["u_stored"] = stored
    return params


async def load(conn: psycopg.AsyncConnection[Any], job_id: str) -> Job | None:
    row = await fetch_one(conn, JOBS["get_job"], {"job_id": job_id})
    return None if row is None else job_from_row(row)


async def create(
    conn: psycopg.AsyncConnection[Any], change: Change, *, idempotency_expires_at: float | None
) -> Accepted:
    """The idempotency entry first (it serializes requests with one key), then the new
    job and everything its change carries."""
    job = change.after
    if job.idempotency_key is not None:
        existing = await _claim_key(conn, job, now=change.at, expires_at=idempotency_expires_at)
        if existing is not None:
            return Accepted(job=existing, created=False)
    return await create_statement(change)(conn)


async def create_many(
    conn: psycopg.AsyncConnection[Any],
    changes: Sequence[Change],
    *,
    idempotency_expires_at: float | None,
) -> list[CreateOutcome]:
    """``create`` for each change, all in the caller's transaction. A key mismatch is
    found by a plain read before its item writes anything, so it is that item's
    outcome and the transaction goes on; any other error rolls the whole batch back.

    Keys are claimed in (tenant, key) order, whatever the items' order: two batches
    that share keys then wait for each other instead of deadlocking. Items with the
    same key keep their own order among themselves (a stable sort)."""
    order = sorted(
        range(len(changes)),
        key=lambda i: (
            changes[i].after.idempotency_key is None,
            changes[i].after.tenant_id,
            changes[i].after.idempotency_key or "",
        ),
    )
    outcomes: dict[int, CreateOutcome] = {}
    keys = [
        (c.after.tenant_id, c.after.idempotency_key) for c in changes if c.after.idempotency_key
    ]
    if len(set(keys)) < len(keys) or not all(one_statement(c) for c in changes):
        # A later item may replay an earlier one's new job: each must see the last written.
        for i in order:
            try:
                outcomes[i] = await create(
                    conn, changes[i], idempotency_expires_at=idempotency_expires_at
                )
            except IdempotencyKeyMismatchError as exc:
                outcomes[i] = exc
        return [outcomes[i] for i in range(len(changes))]
    # Keys first (each needs its answer), then every new job in one pipelined round trip.
    new: list[int] = []
    for i in order:
        job = changes[i].after
        if job.idempotency_key is not None:
            try:
                existing = await _claim_key(
                    conn, job, now=changes[i].at, expires_at=idempotency_expires_at
                )
            except IdempotencyKeyMismatchError as exc:
                outcomes[i] = exc
                continue
            if existing is not None:
                outcomes[i] = Accepted(job=existing, created=False)
                continue
        new.append(i)
    outcomes.update(await pipelined(conn, [(i, create_statement(changes[i])) for i in new]))
    return [outcomes[i] for i in range(len(changes))]


async def _claim_key(
    conn: psycopg.AsyncConnection[Any], job: Job, *, now: float, expires_at: float | None
) -> Job | None:
    """Take (tenant, key) for this job; the job a live entry already names, or None.
    Raises on a live entry for a different request."""
    params = {
        "tenant_id": job.tenant_id,
        "key": job.idempotency_key,
        "job_id": job.job_id,
        "request_hash": job.request_hash,
        "expires_at": expires_at,
    }
    if await execute(conn, JOBS["claim_idempotency"], params) == 1:
        return None
    entry = await fetch_one(conn, JOBS["lock_idempotency"], params)
    if entry is None:  # purged between the two statements: nobody holds the key now
        await execute(conn, JOBS["claim_idempotency"], params)
        return None
    if entry["expires_at"] is not None and now >= entry["expires_at"]:
        await execute(conn, JOBS["replace_idempotency"], params)
        return None
    if entry["request_hash"] != job.request_hash:
        raise IdempotencyKeyMismatchError()
    return await load(conn, entry["job_id"])


async def apply(conn: psycopg.AsyncConnection[Any], change: Change) -> bool:
    """Write the change if the job's revision is still the expected one: the
    one-statement form with the change's first ended attempt, then the others it ends
    (a takeover of several), in the caller's transaction."""
    head, rest = change.closed[:1], change.closed[1:]
    if not await apply_statement(replace(change, closed=head))(conn):
        return False
    for ending in rest:
        await execute(
            conn,
            JOBS["close_attempt"],
            {
                "job_id": change.job_id,
                "attempt_id": ending.attempt_id,
                "ended_at": ending.ended_at,
                "replaces_abandoned": ending.replaces_abandoned,
                **report_params(ending.report),
            },
        )
    return True


async def _add_usage(
    conn: psycopg.AsyncConnection[Any], tenant_id: str, *, unfinished: int, stored: int
) -> None:
    await execute(
        conn,
        JOBS["add_usage"],
        {"tenant_id": tenant_id, "unfinished": unfinished, "stored": stored},
    )


async def purge_finished(
    conn: psycopg.AsyncConnection[Any], *, completed_before: float, limit: int
) -> list[str]:
    """Delete finished jobs (and what belongs to them) completed before the time."""
    rows = await fetch_all(
        conn, JOBS["finished_before"], {"before": completed_before, "limit": max(0, limit)}
    )
    if not rows:
        return []
    purged = [row["job_id"] for row in rows]
    params: dict[str, Any] = {"job_ids": purged}
    for block in ("delete_jobs_events", "delete_jobs_attempts", "delete_jobs_keys", "delete_jobs"):
        await execute(conn, JOBS[block], params)
    for tenant_id, count in sorted(Counter(row["tenant_id"] for row in rows).items()):
        await _add_usage(conn, tenant_id, unfinished=0, stored=-count)
    return purged
