"""PostgresJobQueue: the job queue as a table in the database (SQS semantics).

An idle receive waits on the process's Wakeup, which LISTEN/NOTIFY nudges when any
process sends a message; between nudges it polls every ``poll_interval_seconds``
(a delayed message, or one whose visibility timeout ran out, becomes visible
without any notification), with a cheap indexed look before taking locks.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ferryman.adapters import dead_letters
from ferryman.adapters.postgres import messages
from ferryman.adapters.postgres.database import execute
from ferryman.adapters.postgres.grouping import Statement
from ferryman.adapters.postgres.sql import QUEUE
from ferryman.ports.queue import (
    DeadLetter,
    DeadLetterReason,
    Delivery,
    QueueCapabilities,
    QueueMessage,
    QueueStats,
    UndecodableLetter,
)

if TYPE_CHECKING:
    from ferryman.adapters.postgres.database import PostgresDatabase
    from ferryman.core.clock import Clock
    from ferryman.ports.queue import TenantBudget


def _rows(rowcount: int, _row: object) -> int:
    return rowcount


# Receives take tenants in turn, fewest in flight first (core.fairness.fair_pick).
QUEUE_CAPABILITIES = QueueCapabilities(fair_receive=True, follows_clock=True)


class PostgresJobQueue:
    def __init__(
        self,
        db: PostgresDatabase,
        *,
        clock: Clock,
        max_receives: int = 10,
        poll_interval_seconds: float = 0.25,
    ) -> None:
        if max_receives < 1:
            raise ValueError("max_receives must be at least 1")
        self._db = db
        self._clock = clock
        self._max_receives = max_receives
        self._poll_interval_seconds = poll_interval_seconds
        self._tenant_cursor = messages.TenantCursor()

    @property
    def capabilities(self) -> QueueCapabilities:
        return QUEUE_CAPABILITIES

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None:
        now = self._clock.now()
        async with self._db.transaction() as conn:
            await messages.insert_message(conn, message, now=now, delay_seconds=delay_seconds)
        if delay_seconds <= 0:
            self._db.wakeup.notify()

    async def receive(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Delivery]:
        if max_messages < 1:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_seconds)
        polling = False
        while True:
            since = self._db.wakeup.generation
            freed = None if budget is None else budget.freed
            if freed is not None:
                freed.clear()  # before the look: a slot freed during it wakes the wait
            deliveries = await self._take(
                max_messages, visibility_timeout_seconds, budget=budget, polling=polling
            )
            remaining = deadline - loop.time()
            if deliveries or remaining <= 0:
                return deliveries
            await self._db.wakeup.wait(
                since=since,
                timeout_seconds=min(remaining, self._poll_interval_seconds),
                also=freed,
            )
            # Woken by a send: go straight for it. Woken by the poll's timer: look first.
            polling = self._db.wakeup.generation == since

    async def _take(
        self,
        max_messages: int,
        visibility_timeout_seconds: float,
        *,
        budget: TenantBudget | None,
        polling: bool,
    ) -> list[Delivery]:
        now = self._clock.now()
        # An idle receiver's look is one indexed read, not a locking transaction.
        if polling and await self._db.fetch_one(QUEUE["any_visible"], {"now": now}) is None:
            return []
        request = messages.ReceiveRequest(
            now=now,
            max_messages=max_messages,
            visibility_timeout_seconds=visibility_timeout_seconds,
            max_receives=self._max_receives,
            budget=budget,
        )
        async with self._db.transaction() as conn:
            return await messages.receive(conn, request, self._tenant_cursor)

    async def any_visible(self) -> bool:
        now = self._clock.now()
        return await self._db.fetch_one(QUEUE["any_visible"], {"now": now}) is not None

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        parts = messages.split_receipt(receipt)
        if parts is None:
            return False
        params = {
            "id": parts[0],
            "token": parts[1],
            "visible_at": self._clock.now() + max(0.0, timeout_seconds),
        }
        async with self._db.transaction() as conn:
            changed = await execute(conn, QUEUE["change_visibility"], params) == 1
            if changed and timeout_seconds <= 0:
                await messages.notify(conn)
        if changed and timeout_seconds <= 0:
            self._db.wakeup.notify()
        return changed

    async def delete(self, receipt: str) -> None:
        parts = messages.split_receipt(receipt)
        if parts is not None:
            params = {"id": parts[0], "token": parts[1]}
            await self._db.group.run(Statement(QUEUE["delete_message"], params, _rows))

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        rows = await self._db.fetch_all(QUEUE["list_dead_letters"], {"limit": max(0, max_messages)})
        letters: list[DeadLetter] = []
        for row in rows:
            try:
                message = QueueMessage.from_body(row["body"])
            except ValueError:
                continue  # it names no job to fail
            letters.append(
                DeadLetter(
                    dead_letter_id=row["id"],
                    message=message,
                    receive_count=row["receive_count"],
                    dead_lettered_at=row["dead_lettered_at"],
                    reason=DeadLetterReason(row["reason"]),
                )
            )
        return letters

    async def delete_dead_letter(self, dead_letter_id: str) -> None:
        await self._db.execute(QUEUE["delete_dead_letter"], {"id": dead_letter_id})

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        params = dead_letters.page_params(limit, after)
        rows = await self._db.fetch_all(QUEUE["undecodable_letters"], params)
        return [dead_letters.letter_from_row(row) for row in rows]

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        row = await self._db.fetch_one(QUEUE["undecodable_letter"], {"id": dead_letter_id})
        return None if row is None else dead_letters.letter_from_row(row)

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        deleted = await self._db.execute(QUEUE["delete_undecodable_letter"], {"id": dead_letter_id})
        return deleted == 1

    async def stats(self) -> QueueStats:
        now = self._clock.now()
        row = await self._db.fetch_one(QUEUE["message_stats"], {"now": now})
        assert row is not None  # an aggregate always returns one row
        oldest = row["oldest_sent_at"]
        return QueueStats(
            visible=row["visible"],
            in_flight=row["in_flight"],
            oldest_age_seconds=0.0 if oldest is None else max(0.0, now - oldest),
            dead_letters=row["dead_letters"],
            undecodable_letters=row["undecodable_letters"],
        )
