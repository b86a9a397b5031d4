"""SqliteJobQueue: the job queue as a table in the database file (SQS semantics)."""

from __future__ import annotations

import asyncio
from functools import partial
from typing import TYPE_CHECKING

from ferryman.adapters import dead_letters
from ferryman.adapters.sqlite import jobops, messages
from ferryman.adapters.sqlite.sql import QUEUE
from ferryman.core.job import SUPPORTED_PAYLOAD_VERSIONS
from ferryman.ports.queue import (
    DeadLetter,
    DeadLetterReason,
    Delivery,
    QueueCapabilities,
    QueueMessage,
    QueueStats,
    Received,
    UndecodableLetter,
)

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Callable

    from ferryman.adapters.sqlite.database import SqliteDatabase
    from ferryman.core.changes import Change
    from ferryman.core.clock import Clock
    from ferryman.core.job import Job
    from ferryman.ports.queue import TenantBudget

    Decide = Callable[[Delivery, Job | None], Change | None]


# Receives take tenants in turn, fewest in flight first (core.fairness.fair_pick).
QUEUE_CAPABILITIES = QueueCapabilities(fair_receive=True, follows_clock=True)


class SqliteJobQueue:
    """Receives poll the table; this process's own sends wake its waiting receivers at once."""

    def __init__(
        self,
        db: SqliteDatabase,
        *,
        clock: Clock,
        max_receives: int = 10,
        poll_interval_seconds: float = 0.05,
    ) -> None:
        if max_receives < 1:
            raise ValueError("max_receives must be at least 1")
        self._db = db
        self._clock = clock
        self._max_receives = max_receives
        self._poll_interval_seconds = poll_interval_seconds
        self._tenant_cursor = messages.TenantCursor()
        # (wake-up generation when it began, loop time, its budget) of the last look
        # that found fewer messages than it could take; None once one found a full batch.
        self._last_empty: tuple[int, float, TenantBudget | None] | None = None

    @property
    def capabilities(self) -> QueueCapabilities:
        return QUEUE_CAPABILITIES

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None:
        now = self._clock.now()
        await self._db.write(
            lambda conn: messages.insert_message(
                conn, message, now=now, delay_seconds=delay_seconds
            )
        )
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
        received = await self._receive(
            max_messages, visibility_timeout_seconds, wait_seconds, budget, decide=None
        )
        return [r.delivery for r in received]

    @property
    def claims_on_receive(self) -> bool:
        return True

    async def receive_claiming(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        decide: Decide,
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Received]:
        # The jobs table is in this file: the claim shares the receive's transaction.
        received = await self._receive(
            max_messages, visibility_timeout_seconds, wait_seconds, budget, decide=decide
        )
        for r in received:
            if r.claim is not None:
                self._claimed(r.claim)
        return received

    def _claimed(self, change: Change) -> None:
        # As the job store's own apply nudges after a commit (adapters/sqlite/store.py).
        if change.enqueue:
            self._db.wakeup.notify()
        if change.stops_running_attempt:
            self._db.cancel_wakeup.notify()
        if change.changes_status:
            self._db.status_wakeup.notify()

    async def _receive(
        self,
        max_messages: int,
        visibility_timeout_seconds: float,
        wait_seconds: float,
        budget: TenantBudget | None,
        *,
        decide: Decide | None,
    ) -> list[Received]:
        if max_messages < 1:
            return []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_seconds)
        wakeup = self._db.wakeup
        freed = None if budget is None else budget.freed
        # A waiting receive skips a first look that would only repeat the last one
        # (nothing sent or freed since it found fewer than it could take, its poll not
        # yet due): a worker that just started the one job it found waits for the next
        # nudge at once instead of spending a write transaction on an empty queue. A
        # receive that will not wait always looks: it asks what is visible now.
        look = wait_seconds <= 0 or not self._drained(loop.time(), budget)
        polling = False
        while True:
            since, local_since = wakeup.generation, wakeup.local_generation
            if freed is not None:
                freed.clear()  # before the look: a slot freed during it wakes the wait
            deliveries: list[Received] = []
            if look:
                looked_at = loop.time()
                deliveries = await self._take(
                    max_messages,
                    visibility_timeout_seconds,
                    budget=budget,
                    polling=polling,
                    decide=decide,
                )
                self._last_empty = (
                    (since, looked_at, budget) if len(deliveries) < max_messages else None
                )
            remaining = deadline - loop.time()
            if deliveries or remaining <= 0:
                return deliveries
            timeout = min(remaining, self._poll_interval_seconds)
            if not look and self._last_empty is not None:
                # The poll stays due where the last look put it.
                timeout = min(
                    timeout, self._last_empty[1] + self._poll_interval_seconds - loop.time()
                )
            await wakeup.wait(since=since, timeout_seconds=timeout, also=freed)
            look = True
            # Our own process sent it, or a slot of a waiting tenant freed: take it
            # straight away. A poll, or another process's nudge (every worker of the
            # file hears it), looks through the reader first.
            polling = wakeup.local_generation == local_since and not (freed and freed.is_set())

    def _drained(self, now: float, budget: TenantBudget | None) -> bool:
        """Did the last look take every message it could see, with nothing new since?

        Only a look under the same budget (or none) says so: another receiver's
        budget may have held back messages this one may take."""
        last = self._last_empty
        if last is None or last[0] != self._db.wakeup.generation:
            return False
        if now - last[1] >= self._poll_interval_seconds:
            return False
        if last[2] is not None and last[2] is not budget:
            return False
        return not (budget is not None and budget.freed is not None and budget.freed.is_set())

    async def _take(
        self,
        max_messages: int,
        visibility_timeout_seconds: float,
        *,
        budget: TenantBudget | None,
        polling: bool,
        decide: Decide | None,
    ) -> list[Received]:
        now = self._clock.now()
        # Idle workers poll often; looking first through the reader keeps their
        # empty polls from taking the file's write lock from everyone else.
        if polling and not await self._db.read(partial(_any_visible, now=now)):
            return []
        start = self._tenant_cursor.after
        ended: list[str | None] = []

        def receive(conn: sqlite3.Connection) -> list[Received]:
            # The writer may run this twice (its batch undone because another op
            # raised): each run starts from the same place, and only the run that
            # committed moves this queue's cursor.
            cursor = messages.TenantCursor(start)
            deliveries = messages.receive(
                conn,
                now=now,
                max_messages=max_messages,
                visibility_timeout_seconds=visibility_timeout_seconds,
                max_receives=self._max_receives,
                budget=budget,
                cursor=cursor,
            )
            ended.append(cursor.after)
            if decide is None:
                return [Received(delivery=d, job=None, claim=None, read=False) for d in deliveries]
            return [_claim_received(conn, d, decide) for d in deliveries]

        deliveries = await self._db.write(receive)
        self._tenant_cursor.after = ended[-1]
        return deliveries

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        now = self._clock.now()
        changed = await self._db.write(
            partial(
                messages.change_visibility,
                receipt=receipt,
                now=now,
                timeout_seconds=timeout_seconds,
            )
        )
        if changed and timeout_seconds <= 0:
            self._db.wakeup.notify()
        return changed

    async def delete(self, receipt: str) -> None:
        await self._db.write(partial(messages.delete, receipt=receipt))

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        return await self._db.read(partial(_dead_letters, limit=max(0, max_messages)))

    async def delete_dead_letter(self, dead_letter_id: str) -> None:
        await self._db.write(
            lambda conn: conn.execute(QUEUE["delete_dead_letter"], {"id": dead_letter_id})
        )

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        params = dead_letters.page_params(limit, after)
        rows = await self._db.read(
            lambda conn: conn.execute(QUEUE["undecodable_letters"], params).fetchall()
        )
        return [dead_letters.letter_from_row(row) for row in rows]

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        row = await self._db.read(
            lambda conn: conn.execute(
                QUEUE["undecodable_letter"], {"id": dead_letter_id}
            ).fetchone()
        )
        return None if row is None else dead_letters.letter_from_row(row)

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        deleted: int = await self._db.write(
            lambda conn: (
                conn.execute(QUEUE["delete_undecodable_letter"], {"id": dead_letter_id}).rowcount
            )
        )
        return deleted == 1

    async def any_visible(self) -> bool:
        return await self._db.read(partial(_any_visible, now=self._clock.now()))

    async def stats(self) -> QueueStats:
        return await self._db.read(partial(_stats, now=self._clock.now()))


def _claim_received(conn: sqlite3.Connection, delivery: Delivery, decide: Decide) -> Received:
    """The delivery's job as this transaction reads it, and the claim ``decide`` made
    from it, written only if the job still has the revision it expects."""
    if delivery.message.payload_version not in SUPPORTED_PAYLOAD_VERSIONS:
        return Received(delivery=delivery, job=None, claim=None, read=False)
    try:
        job = jobops.load(conn, delivery.message.job_id)
    except Exception:  # noqa: BLE001 - this delivery's own failure, met again by handle()
        # Raised here it would undo the whole receive on every look: the messages
        # behind this one would never be delivered, and it would never be counted.
        return Received(delivery=delivery, job=None, claim=None, read=False)
    claim = decide(delivery, job)
    if claim is not None:
        # A claim that fails to write leaves the receive and the other claims whole.
        conn.execute("SAVEPOINT claim")
        try:
            written = jobops.apply(conn, claim)
        except Exception:  # noqa: BLE001 - handle() claims it again, alone
            conn.execute("ROLLBACK TO claim")
            written = False
        conn.execute("RELEASE claim")
        if not written:
            claim = None
    return Received(delivery=delivery, job=job, claim=claim)


def _any_visible(conn: sqlite3.Connection, *, now: float) -> bool:
    return conn.execute(QUEUE["any_visible"], {"now": now}).fetchone() is not None


def _dead_letters(conn: sqlite3.Connection, *, limit: int) -> list[DeadLetter]:
    letters: list[DeadLetter] = []
    for row in conn.execute(QUEUE["list_dead_letters"], {"limit": limit}).fetchall():
        try:
            message = QueueMessage.from_body(row["body"])
        except ValueError:
            continue  # written before bodies were checked: it names no job to fail
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


def _stats(conn: sqlite3.Connection, *, now: float) -> QueueStats:
    row = conn.execute(QUEUE["message_stats"], {"now": now}).fetchone()
    dead = conn.execute(QUEUE["dead_letter_count"]).fetchone()
    oldest = row["oldest_sent_at"]
    return QueueStats(
        visible=row["visible"],
        in_flight=row["in_flight"],
        oldest_age_seconds=0.0 if oldest is None else max(0.0, now - oldest),
        dead_letters=dead["n"],
        undecodable_letters=dead["undecodable"],
    )
