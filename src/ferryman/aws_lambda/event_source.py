"""The engine's queue and ledger as a worker behind an event source mapping sees them.

Under Lambda the mapping received the messages, and it deletes those the function
does not name as failures: the function itself must delete nothing, or a message could
go while the mapping still counts it as in flight. So the worker's deletes (its acks)
are withheld and only noted, as the witness of what the worker judged finished
(dispositions.py); the terminal write is kept from deleting the message in its own
transaction (engines whose queue shares the job's database can) for the same reason.
Everything else reaches the engine unchanged: hiding a message for later and
heartbeats (ChangeMessageVisibility on the record's receipt) are the worker's to do,
and sending a new message (a job put back for a paused provider) too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.services.ledger import JobLedger

if TYPE_CHECKING:
    from ferryman.ports.queue import (
        DeadLetter,
        Delivery,
        JobQueue,
        QueueCapabilities,
        QueueMessage,
        QueueStats,
        TenantBudget,
        UndecodableLetter,
    )


class EventSourceQueue:
    """A JobQueue whose ``delete`` only notes the receipt (``take_acknowledged``)."""

    def __init__(self, queue: JobQueue) -> None:
        self._queue = queue
        self._acknowledged: set[str] = set()

    def take_acknowledged(self, receipt: str) -> bool:
        """Did the worker ask to delete this receipt's message? (Forgets it.)"""
        if receipt in self._acknowledged:
            self._acknowledged.discard(receipt)
            return True
        return False

    async def delete(self, receipt: str) -> None:
        self._acknowledged.add(receipt)

    @property
    def capabilities(self) -> QueueCapabilities:
        return self._queue.capabilities

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None:
        await self._queue.send(message, delay_seconds=delay_seconds)

    async def receive(
        self,
        *,
        max_messages: int,
        visibility_timeout_seconds: float,
        wait_seconds: float = 0.0,
        budget: TenantBudget | None = None,
    ) -> list[Delivery]:
        return await self._queue.receive(
            max_messages=max_messages,
            visibility_timeout_seconds=visibility_timeout_seconds,
            wait_seconds=wait_seconds,
            budget=budget,
        )

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        return await self._queue.change_visibility(receipt, timeout_seconds=timeout_seconds)

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        return await self._queue.receive_dead_letters(max_messages=max_messages)

    async def delete_dead_letter(self, dead_letter_id: str) -> None:
        await self._queue.delete_dead_letter(dead_letter_id)

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        return await self._queue.undecodable_letters(limit=limit, after=after)

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        return await self._queue.undecodable_letter(dead_letter_id)

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        return await self._queue.delete_undecodable_letter(dead_letter_id)

    async def stats(self) -> QueueStats:
        return await self._queue.stats()

    async def any_visible(self) -> bool:
        return await self._queue.any_visible()


class EventSourceLedger(JobLedger):
    """The ledger, except that a terminal write never deletes the message with it:
    the delivery handler then acks through the queue, where EventSourceQueue notes it."""

    @property
    def acks_with_outcome(self) -> bool:
        return False
