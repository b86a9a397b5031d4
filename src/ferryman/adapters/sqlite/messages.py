"""Queue operations on the messages table, as plain functions run by the writer thread."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import QUEUE
from ferryman.ports.queue import Delivery, QueueMessage

if TYPE_CHECKING:
    import sqlite3


def new_message_id() -> str:
    return f"msg_{secrets.token_hex(12)}"


def insert_message(
    conn: sqlite3.Connection, message: QueueMessage, *, now: float, delay_seconds: float = 0.0
) -> str:
    message_id = new_message_id()
    conn.execute(
        QUEUE["insert_message"],
        {
            "id": message_id,
            "body": message.to_body(),
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


def receive(
    conn: sqlite3.Connection,
    *,
    now: float,
    max_messages: int,
    visibility_timeout_seconds: float,
    max_receives: int,
) -> list[Delivery]:
    """Deliver up to max_messages visible messages, oldest first.

    A message already received max_receives times moves to the dead letters
    instead (redrive), so none is delivered more than max_receives times.
    """
    delivered: list[Delivery] = []
    moved = True
    # Look again only after moving some away: a 0 s visibility leaves delivered
    # messages visible, and they must not be delivered twice by one receive.
    while moved and len(delivered) < max_messages:
        moved = False
        rows = conn.execute(
            QUEUE["visible_messages"], {"now": now, "limit": max_messages - len(delivered)}
        ).fetchall()
        for row in rows:
            if row["receive_count"] >= max_receives:
                dead_letter(conn, row["id"], now=now)
                moved = True
            else:
                delivered.append(_deliver(conn, row, now, visibility_timeout_seconds))
    return delivered


def _deliver(
    conn: sqlite3.Connection, row: sqlite3.Row, now: float, visibility_timeout_seconds: float
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
        message=QueueMessage.from_body(row["body"]),
        receipt=f"{row['id']}.{token}",
        receive_count=row["receive_count"] + 1,
        sent_at=row["sent_at"],
    )


def dead_letter(conn: sqlite3.Connection, message_id: str, *, now: float) -> None:
    conn.execute(
        QUEUE["copy_to_dead_letters"],
        {"dead_letter_id": f"dl_{secrets.token_hex(12)}", "id": message_id, "now": now},
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
