"""InMemoryJobQueue: the JobQueue port with SQS semantics, held in a process's memory.

Visibility is computed from the injected clock, so tests move time with a
FakeClock; waiting receivers are woken by sends (and re-check every poll
interval, so a real clock making a delayed message visible is noticed too).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.fairness import fair_pick
from ferryman.ports.queue import DeadLetter, Delivery, QueueCapabilities, QueueStats

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.queue import QueueMessage, TenantBudget, UndecodableLetter


@dataclass(frozen=True, slots=True)
class _Stored:
    message_id: str
    message: QueueMessage
    sent_at: float
    visible_at: float
    receive_count: int = 0
    # The token of the latest receive: only that receipt may delete or re-hide it.
    token: str | None = None


# Receives take tenants in turn, fewest in flight first (core.fairness.fair_pick).
QUEUE_CAPABILITIES = QueueCapabilities(fair_receive=True, follows_clock=True)


class InMemoryJobQueue:
    """A queue with visibility timeouts, receive counts and a redrive to dead letters."""

    def __init__(
        self, *, clock: Clock, max_receives: int = 10, poll_interval_seconds: float = 0.05
    ) -> None:
        if max_receives < 1:
            raise ValueError("max_receives must be at least 1")
        self._clock = clock
        self._max_receives = max_receives
        self._poll_interval_seconds = poll_interval_seconds
        # Insertion-ordered: iteration order is send order, which is "oldest first".
        self._messages: dict[str, _Stored] = {}
        self._dead: dict[str, DeadLetter] = {}
        self._ids = itertools.count(1)
        self._changed = asyncio.Condition()

    @property
    def capabilities(self) -> QueueCapabilities:
        return QUEUE_CAPABILITIES

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None:
        async with self._changed:
            now = self._clock.now()
            message_id = f"msg-{next(self._ids):08d}"
            self._messages[message_id] = _Stored(
                message_id=message_id,
                message=message,
                sent_at=now,
                visible_at=now + max(0.0, delay_seconds),
            )
            self._changed.notify_all()

    async def receive(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Delivery]:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_seconds)
        async with self._changed:
            while True:
                if budget is not None and budget.freed is not None:
                    budget.freed.clear()  # as the other engines: set again by a slot freed after
                deliveries = self._take(max_messages, visibility_timeout_seconds, budget)
                remaining = deadline - loop.time()
                if deliveries or remaining <= 0:
                    return deliveries
                try:
                    async with asyncio.timeout(min(remaining, self._poll_interval_seconds)):
                        await self._changed.wait()
                except TimeoutError:
                    pass

    def holds_message_for(self, job_id: str) -> bool:
        """Whether a message of this job is in the queue (visible, in flight or
        delayed): what the store's stalled scan asks, under its own lock."""
        return any(stored.message.job_id == job_id for stored in self._messages.values())

    async def any_visible(self) -> bool:
        now = self._clock.now()
        return any(stored.visible_at <= now for stored in self._messages.values())

    def _take(
        self, max_messages: int, visibility_timeout_seconds: float, budget: TenantBudget | None
    ) -> list[Delivery]:
        now = self._clock.now()
        waiting: dict[str, list[_Stored]] = {}
        for stored in sorted(self._messages.values(), key=lambda m: m.visible_at):
            if stored.visible_at > now:
                continue
            if stored.receive_count >= self._max_receives:
                self._dead_letter(stored, now)
                continue
            tenant = stored.message.tenant_id
            allowance = max_messages if budget is None else budget.allowance(tenant)
            queue = waiting.setdefault(tenant, [])
            if len(queue) < min(allowance, max_messages):
                queue.append(stored)
        picked = fair_pick(
            waiting,
            held=(lambda _tenant: 0) if budget is None else budget.held,
            waited_since=lambda m: m.visible_at,
            limit=max_messages,
        )
        return [self._deliver(stored, now, visibility_timeout_seconds) for stored in picked]

    def _deliver(self, stored: _Stored, now: float, visibility_timeout_seconds: float) -> Delivery:
        token = secrets.token_hex(8)
        received = dataclasses.replace(
            stored,
            receive_count=stored.receive_count + 1,
            token=token,
            visible_at=now + visibility_timeout_seconds,
        )
        self._messages[stored.message_id] = received
        return Delivery(
            message=stored.message,
            receipt=f"{stored.message_id}.{token}",
            receive_count=received.receive_count,
            sent_at=stored.sent_at,
        )

    def _dead_letter(self, stored: _Stored, now: float) -> None:
        del self._messages[stored.message_id]
        dead_letter_id = f"dlq-{stored.message_id}"
        self._dead[dead_letter_id] = DeadLetter(
            dead_letter_id=dead_letter_id,
            message=stored.message,
            receive_count=stored.receive_count,
            dead_lettered_at=now,
        )

    def _current(self, receipt: str) -> _Stored | None:
        """The message this receipt was issued for, if the receipt is still the latest."""
        message_id, _, token = receipt.rpartition(".")
        stored = self._messages.get(message_id)
        if stored is None or stored.token is None or stored.token != token:
            return None
        return stored

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        async with self._changed:
            stored = self._current(receipt)
            if stored is None:
                return False
            visible_at = self._clock.now() + max(0.0, timeout_seconds)
            self._messages[stored.message_id] = dataclasses.replace(stored, visible_at=visible_at)
            self._changed.notify_all()
            return True

    async def delete(self, receipt: str) -> None:
        async with self._changed:
            stored = self._current(receipt)
            if stored is not None:
                del self._messages[stored.message_id]

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        async with self._changed:
            return list(itertools.islice(self._dead.values(), max_messages))

    async def delete_dead_letter(self, dead_letter_id: str) -> None:
        async with self._changed:
            self._dead.pop(dead_letter_id, None)

    # Messages are held here as QueueMessage objects, never as bodies: none is ever
    # undecodable.

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        return []

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        return None

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        return False

    async def stats(self) -> QueueStats:
        async with self._changed:
            now = self._clock.now()
            visible = sum(1 for m in self._messages.values() if m.visible_at <= now)
            oldest = min((m.sent_at for m in self._messages.values()), default=now)
            return QueueStats(
                visible=visible,
                in_flight=len(self._messages) - visible,
                oldest_age_seconds=max(0.0, now - oldest),
                dead_letters=len(self._dead),
            )
