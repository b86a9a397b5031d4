"""Queue operations on the messages table, as plain functions run by the writer thread."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import QUEUE
from ferryman.core.fairness import fair_pick
from ferryman.ports.queue import DeadLetterReason, Delivery, QueueMessage

if TYPE_CHECKING:
    import sqlite3

    from ferryman.ports.queue import TenantBudget

# A receive looks at this many tenants at most (each one indexed lookup), resuming
# after the last one it looked at, so every tenant gets its turn at bounded cost.
TENANTS_PER_RECEIVE = 64


def new_message_id(job_id: str) -> str:
    """``msg_<job_id>_<random>``: a job's messages share a prefix, so the stalled scan
    asks whether a job still has one with a seek in the primary key (jobs.sql,
    stalled_jobs), and no second index is kept up on the queue's hot path."""
    return f"msg_{job_id}_{secrets.token_hex(8)}"


def insert_message(
    conn: sqlite3.Connection, message: QueueMessage, *, now: float, delay_seconds: float = 0.0
) -> str:
    message_id = new_message_id(message.job_id)
    conn.execute(
        QUEUE["insert_message"],
        {
            "id": message_id,
            "body": message.to_body(),
            "tenant_id": message.tenant_id,
            "sent_at": now,
            "visible_at": now + max(0.0, delay_seconds),
        },
    )
    return message_id


def split_receipt(receipt: str) -> tuple[str, str] | None:
    message_id, dot, token = receipt.partition(".")
    if not dot or not message_id or not token:
        return None
    return message_id, token


@dataclass(slots=True)
class TenantCursor:
    """Where the last receive stopped looking through tenants (per queue object)."""

    after: str | None = None


def receive(
    conn: sqlite3.Connection,
    *,
    now: float,
    max_messages: int,
    visibility_timeout_seconds: float,
    max_receives: int,
    budget: TenantBudget | None,
    cursor: TenantCursor,
) -> list[Delivery]:
    """Deliver up to max_messages visible messages, fairly across tenants.

    A message already received max_receives times moves to the dead letters instead
    (redrive), as does one whose body no worker can read; neither is delivered, and
    the messages behind them still are.
    """
    delivered: list[Delivery] = []
    moved = True
    # Look again only after moving some away: a 0 s visibility leaves delivered
    # messages visible, and they must not be delivered twice by one receive.
    while moved and len(delivered) < max_messages:
        moved = False
        for row in _fair_candidates(conn, now, max_messages - len(delivered), budget, cursor):
            try:
                message = QueueMessage.from_body(row["body"])
            except ValueError:
                dead_letter(conn, row["id"], now=now, reason=DeadLetterReason.UNDECODABLE)
                moved = True
                continue
            if row["receive_count"] >= max_receives:
                dead_letter(conn, row["id"], now=now, job_id=message.job_id)
                moved = True
            else:
                delivered.append(_deliver(conn, row, message, now, visibility_timeout_seconds))
    return delivered


def _fair_candidates(
    conn: sqlite3.Connection,
    now: float,
    limit: int,
    budget: TenantBudget | None,
    cursor: TenantCursor,
) -> list[sqlite3.Row]:
    tenants = _tenants_to_look_at(conn, cursor)
    waiting: dict[str, list[sqlite3.Row]] = {}
    for tenant in tenants:
        allowance = limit if budget is None else min(limit, budget.allowance(tenant))
        if allowance > 0:
            waiting[tenant] = conn.execute(
                QUEUE["visible_of_tenant"], {"tenant_id": tenant, "now": now, "limit": allowance}
            ).fetchall()
    return fair_pick(
        waiting,
        held=(lambda _tenant: 0) if budget is None else budget.held,
        waited_since=lambda row: float(row["visible_at"]),
        limit=limit,
    )


def _tenants_to_look_at(conn: sqlite3.Connection, cursor: TenantCursor) -> list[str]:
    found = [
        row["tenant_id"]
        for row in conn.execute(
            QUEUE["next_tenants"], {"after": cursor.after, "limit": TENANTS_PER_RECEIVE}
        )
    ]
    if len(found) < TENANTS_PER_RECEIVE and cursor.after is not None:
        # Wrap around to the tenants before where the last receive stopped.
        wrapped = conn.execute(
            QUEUE["next_tenants"], {"after": None, "limit": TENANTS_PER_RECEIVE - len(found)}
        )
        found += [row["tenant_id"] for row in wrapped if row["tenant_id"] not in found]
    cursor.after = found[-1] if len(found) >= TENANTS_PER_RECEIVE else None
    return found


def _deliver(
    conn: sqlite3.Connection,
    row: sqlite3.Row,
    message: QueueMessage,
    now: float,
    visibility_timeout_seconds: float,
) -> Delivery:
    token = secrets.token_hex(8)
    conn.execute(
        QUEUE["mark_received"],
        {
            "id": row["id"],
            "visible_at": now + max(0.0, visibility_timeout_seconds),
            "token": token,
            "now": now,
        },
    )
    return Delivery(
        message=message,
        receipt=f"{row['id']}.{token}",
        receive_count=row["receive_count"] + 1,
        sent_at=row["sent_at"],
    )


def dead_letter(
    conn: sqlite3.Connection,
    message_id: str,
    *,
    now: float,
    reason: DeadLetterReason = DeadLetterReason.MAX_RECEIVES,
    job_id: str | None = None,
) -> None:
    conn.execute(
        QUEUE["copy_to_dead_letters"],
        {
            "dead_letter_id": f"dl_{secrets.token_hex(12)}",
            "id": message_id,
            "now": now,
            "reason": str(reason),
            "job_id": job_id,
        },
    )
    conn.execute(QUEUE["delete_message_by_id"], {"id": message_id})


def change_visibility(
    conn: sqlite3.Connection, receipt: str, *, now: float, timeout_seconds: float
) -> bool:
    parts = split_receipt(receipt)
    if parts is None:
        return False
    cursor = conn.execute(
        QUEUE["change_visibility"],
        {"id": parts[0], "token": parts[1], "visible_at": now + max(0.0, timeout_seconds)},
    )
    return cursor.rowcount == 1


def delete(conn: sqlite3.Connection, receipt: str) -> None:
    parts = split_receipt(receipt)
    if parts is not None:
        conn.execute(QUEUE["delete_message"], {"id": parts[0], "token": parts[1]})
