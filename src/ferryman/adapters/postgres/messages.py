"""Queue operations on the messages table, as coroutines on one transaction.

A receive locks the messages it looks at with ``FOR UPDATE SKIP LOCKED``, so
receivers in many processes never wait for each other and never take the same
message; it hides each one it delivers until its visibility deadline (from the
caller's clock) and counts the receive, in the same transaction.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.adapters.postgres.database import Row, execute, fetch_all
from ferryman.adapters.postgres.sql import LIMITS, QUEUE
from ferryman.core.fairness import fair_pick
from ferryman.ports.queue import DeadLetterReason, Delivery, QueueMessage

if TYPE_CHECKING:
    import psycopg

    from ferryman.ports.queue import TenantBudget

# A receive looks at this many tenants at most (each one indexed lookup), resuming
# after the last one it looked at, so every tenant gets its turn at bounded cost.
TENANTS_PER_RECEIVE = 64
# Looks per receive when messages it picked were dead-lettered or taken by another
# receiver: each look passes over those, so a few always suffice to fill the batch.
MAX_ROUNDS = 4


def new_message_id(job_id: str) -> str:
    """``msg_<job_id>_<random>``: a job's messages share a prefix, so the stalled scan
    asks whether a job still has one with a seek in the primary key (jobs.sql,
    stalled_jobs), and no second index is kept up on the queue's hot path."""
    return f"msg_{job_id}_{secrets.token_hex(8)}"


async def insert_message(
    conn: psycopg.AsyncConnection[Any],
    message: QueueMessage,
    *,
    now: float,
    delay_seconds: float = 0.0,
) -> str:
    message_id = new_message_id(message.job_id)
    await execute(
        conn,
        QUEUE["insert_message"],
        {
            "id": message_id,
            "body": message.to_body(),
            "tenant_id": message.tenant_id,
            "sent_at": now,
            "visible_at": now + max(0.0, delay_seconds),
        },
    )
    if delay_seconds <= 0:
        await notify(conn)
    return message_id


async def notify(conn: psycopg.AsyncConnection[Any]) -> None:
    """Wake idle receivers everywhere when this transaction commits."""
    await conn.execute(QUEUE["notify_messages"])


def split_receipt(receipt: str) -> tuple[str, str] | None:
    message_id, dot, token = receipt.partition(".")
    if not dot or not message_id or not token:
        return None
    return message_id, token


@dataclass(slots=True)
class TenantCursor:
    """Where the last receive stopped looking through tenants (per queue object)."""

    after: str | None = None


@dataclass(frozen=True, slots=True)
class ReceiveRequest:
    now: float
    max_messages: int
    visibility_timeout_seconds: float
    max_receives: int
    budget: TenantBudget | None


async def receive(
    conn: psycopg.AsyncConnection[Any], request: ReceiveRequest, cursor: TenantCursor
) -> list[Delivery]:
    """Deliver up to max_messages visible messages, fairly across tenants.

    A message already received max_receives times moves to the dead letters instead
    (redrive), as does one whose body no worker can read; neither is delivered, and
    the messages behind them still are. A picked message another receiver took first
    is passed over, and the next ones looked at.
    """
    delivered: list[Delivery] = []
    taken: list[str] = []
    for _ in range(MAX_ROUNDS):
        limit = request.max_messages - len(delivered)
        picked = await _fair_pick(conn, request, limit, taken, cursor)
        if not picked:
            break
        taken += picked
        before = len(delivered)
        readable: list[tuple[Row, QueueMessage]] = []
        for row in await _lock(conn, picked, request.now):
            message = await _readable_or_dead_letter(conn, row, request)
            if message is not None:
                readable.append((row, message))
        delivered += await _deliver(conn, readable, request)
        if len(delivered) - before == len(picked):
            break  # every pick delivered: the batch is full or nothing else is visible
    return delivered


async def _lock(conn: psycopg.AsyncConnection[Any], ids: list[str], now: float) -> list[Row]:
    """The picked messages this receive now holds, in the order they were picked."""
    rows = await fetch_all(conn, QUEUE["lock_picked"], {"ids": ids, "now": now})
    order = {message_id: index for index, message_id in enumerate(ids)}
    return sorted(rows, key=lambda row: order[row["id"]])


async def _readable_or_dead_letter(
    conn: psycopg.AsyncConnection[Any], row: Row, request: ReceiveRequest
) -> QueueMessage | None:
    """The row's message, or None when it went to the dead letters instead."""
    try:
        message = QueueMessage.from_body(row["body"])
    except ValueError:
        await dead_letter(conn, row["id"], now=request.now, reason=DeadLetterReason.UNDECODABLE)
        return None
    if row["receive_count"] >= request.max_receives:
        await dead_letter(conn, row["id"], now=request.now, job_id=message.job_id)
        return None
    return message


async def _fair_pick(
    conn: psycopg.AsyncConnection[Any],
    request: ReceiveRequest,
    limit: int,
    taken: list[str],
    cursor: TenantCursor,
) -> list[str]:
    """The ids of up to ``limit`` visible messages, fairly across tenants."""
    budget = request.budget
    allowances = {
        tenant: limit if budget is None else min(limit, budget.allowance(tenant))
        for tenant in await _tenants_to_look_at(conn, cursor)
    }
    allowed = {tenant: n for tenant, n in allowances.items() if n > 0}
    if not allowed:
        return []
    rows = await fetch_all(
        conn,
        QUEUE["visible_of_tenants"],
        {
            "tenants": list(allowed),
            "allowances": list(allowed.values()),
            "now": request.now,
            "taken": taken,
        },
    )
    waiting: dict[str, list[Row]] = {}
    for row in rows:
        waiting.setdefault(row["tenant_id"], []).append(row)
    held = await _held_everywhere(conn, waiting, request.now, budget)
    picked = fair_pick(
        waiting,
        held=lambda tenant: held.get(tenant, 0),
        waited_since=lambda row: float(row["visible_at"]),
        limit=limit,
    )
    return [row["id"] for row in picked]


async def _held_everywhere(
    conn: psycopg.AsyncConnection[Any],
    waiting: dict[str, list[Row]],
    now: float,
    budget: TenantBudget | None,
) -> dict[str, int]:
    """How many deliveries each waiting tenant holds across every worker process.

    Free slots go to the tenant holding fewest (core/fairness.py); with many worker
    processes that must count what the others hold too, or each process would hand a
    flooding tenant its "fair" half while the others do the same. Counted in the
    database only when there is a choice to make (two tenants or more), so a
    single-tenant load pays nothing for it. This receiver's own count is the floor:
    it includes deliveries whose messages another receive may already show as due.
    """
    local = {} if budget is None else {tenant: budget.held(tenant) for tenant in waiting}
    if len(waiting) < 2:
        return local
    rows = await fetch_all(
        conn, LIMITS["tenants_in_flight"], {"tenants": list(waiting), "now": now}
    )
    return {row["tenant_id"]: max(int(row["held"]), local.get(row["tenant_id"], 0)) for row in rows}


async def _tenants_to_look_at(
    conn: psycopg.AsyncConnection[Any], cursor: TenantCursor
) -> list[str]:
    found = [
        row["tenant_id"]
        for row in await fetch_all(
            conn, QUEUE["next_tenants"], {"after": cursor.after, "limit": TENANTS_PER_RECEIVE}
        )
    ]
    if len(found) < TENANTS_PER_RECEIVE and cursor.after is not None:
        # Wrap around to the tenants before where the last receive stopped.
        wrapped = await fetch_all(
            conn, QUEUE["next_tenants"], {"after": None, "limit": TENANTS_PER_RECEIVE - len(found)}
        )
        found += [row["tenant_id"] for row in wrapped if row["tenant_id"] not in found]
    cursor.after = found[-1] if len(found) >= TENANTS_PER_RECEIVE else None
    return found


async def _deliver(
    conn: psycopg.AsyncConnection[Any],
    readable: list[tuple[Row, QueueMessage]],
    request: ReceiveRequest,
) -> list[Delivery]:
    """Hide the messages and give each a new receipt, all in one statement."""
    if not readable:
        return []
    tokens = [secrets.token_hex(8) for _ in readable]
    await execute(
        conn,
        QUEUE["mark_received"],
        {
            "ids": [row["id"] for row, _ in readable],
            "tokens": tokens,
            "visible_at": request.now + max(0.0, request.visibility_timeout_seconds),
            "now": request.now,
        },
    )
    return [
        Delivery(
            message=message,
            receipt=f"{row['id']}.{token}",
            receive_count=row["receive_count"] + 1,
            sent_at=row["sent_at"],
        )
        for (row, message), token in zip(readable, tokens, strict=True)
    ]


async def dead_letter(
    conn: psycopg.AsyncConnection[Any],
    message_id: str,
    *,
    now: float,
    reason: DeadLetterReason = DeadLetterReason.MAX_RECEIVES,
    job_id: str | None = None,
) -> None:
    await execute(
        conn,
        QUEUE["dead_letter"],
        {
            "dead_letter_id": f"dl_{secrets.token_hex(12)}",
            "id": message_id,
            "now": now,
            "reason": str(reason),
            "job_id": job_id,
        },
    )
