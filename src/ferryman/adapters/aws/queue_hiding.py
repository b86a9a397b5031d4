"""Hiding received messages on SQS: ChangeMessageVisibility within each receipt's
12-hour limit, and the keeper that keeps parked deliveries hidden.

Every change goes through ``Hiding``: it refuses a receipt the process knows is stale
(adapters/aws/queue_receipts.py), never asks SQS past a receipt's ``extendable_until``
(SQS would refuse the whole request rather than give what is left), and retires a
receipt SQS refuses. The keeper (``ParkedKeeper``) hides each parked delivery for the
visibility timeout it was received with (at least MIN_PARK_SECONDS), again shortly
before it would show (queue_parking.Parked.due_at), ten per
ChangeMessageVisibilityBatch; it runs only while something is parked. So a process that
dies with deliveries parked leaves them hidden no longer than its receives' visibility
timeout, as it leaves those it was running.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.adapters.aws import queue_wire as wire
from ferryman.adapters.aws.errors import error_code, translate_errors

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.adapters.aws.queue_parking import ParkingLot
    from ferryman.adapters.aws.queue_receipts import ReceiptBook
    from ferryman.core.clock import Clock

log = structlog.get_logger("ferryman.aws")

# A parked delivery is hidden at least this long at a time: a receive's visibility of a
# second or two would have the keeper hiding it again every second.
MIN_PARK_SECONDS = 10
RETRY_AFTER_OUTAGE_SECONDS = 1.0


class Hiding:
    """Visibility changes of one queue's receipts."""

    def __init__(self, sqs: Any, url: str, *, clock: Clock, book: ReceiptBook) -> None:
        self._sqs = sqs
        self._url = url
        self._clock = clock
        self._book = book

    def clamped(self, receipt: str, seconds: int, now: float) -> int | None:
        """``seconds``, or less to stay within the receipt's 12-hour limit; None when it
        cannot be hidden at all any more."""
        if seconds <= 0:
            return 0
        held = self._book.get(receipt)
        if held is None:
            return seconds  # a receipt of another process: SQS holds its limit
        left = math.floor(held.extendable_until - now)
        return None if left <= 0 else min(seconds, left)

    def hidden_until(self, receipt: str) -> float | None:
        held = self._book.get(receipt)
        return None if held is None else held.hidden_until

    async def change(self, receipt: str, timeout_seconds: float) -> bool:
        """One receipt's ChangeMessageVisibility; False when it is stale or spent."""
        if self._book.is_stale(receipt):
            return False
        now = self._clock.now()
        seconds = self.clamped(receipt, wire.visibility_seconds(timeout_seconds), now)
        if seconds is None:
            return False
        try:
            with translate_errors("sqs"):
                await self._sqs.change_message_visibility(
                    QueueUrl=self._url, ReceiptHandle=receipt, VisibilityTimeout=seconds
                )
        except Exception as exc:
            if error_code(exc) not in wire.STALE_RECEIPT_CODES:
                raise
            self._book.retire(receipt)
            return False
        self._book.hidden_until(receipt, now + seconds)
        return True

    async def hide(self, receipts: list[str], seconds: Callable[[str], float]) -> set[str]:
        """Hide each for ``seconds(receipt)`` (clamped to its limit), ten per request;
        the receipts SQS refused (or past their limit) come back, retired."""
        now = self._clock.now()
        failed: set[str] = set()
        entries: list[tuple[str, int]] = []
        for receipt in receipts:
            allowed = self.clamped(receipt, wire.visibility_seconds(seconds(receipt)), now)
            if allowed is None:
                failed.add(receipt)
            else:
                entries.append((receipt, allowed))
        for start in range(0, len(entries), wire.MAX_BATCH):
            chunk = entries[start : start + wire.MAX_BATCH]
            with translate_errors("sqs"):
                response = await self._sqs.change_message_visibility_batch(
                    QueueUrl=self._url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": r, "VisibilityTimeout": s}
                        for i, (r, s) in enumerate(chunk)
                    ],
                )
            refused = {int(entry["Id"]) for entry in response.get("Failed") or []}
            for i, (receipt, allowed) in enumerate(chunk):
                if i in refused:
                    failed.add(receipt)
                else:
                    self._book.hidden_until(receipt, now + allowed)
        for receipt in failed:
            self._book.retire(receipt)
        return failed

    async def let_go(self, receipts: list[str]) -> None:
        """Show them now (visibility 0); this process holds them no more."""
        await self.hide(receipts, lambda _receipt: 0)
        for receipt in receipts:
            self._book.retire(receipt)


class ParkedKeeper:
    """Keeps the lot's deliveries hidden while they are parked (the lot's lock held
    for each round, so a receive never hands out one the keeper is hiding)."""

    def __init__(
        self, lot: ParkingLot, lock: asyncio.Lock, hiding: Hiding, *, clock: Clock
    ) -> None:
        self._lot = lot
        self._lock = lock
        self._hiding = hiding
        self._clock = clock
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def parked(self) -> None:
        """Something was parked: hide it now if it is due, and keep it hidden."""
        self._changed.set()
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._keep())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _keep(self) -> None:
        while self._lot:
            next_at = self._lot.next_due_at()
            delay = 0.0 if next_at is None else next_at - self._clock.now()
            if delay > 0:
                self._changed.clear()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(delay):
                        await self._changed.wait()
                continue
            try:
                await self._hide_due()
            except Exception as exc:  # noqa: BLE001 - an outage: try again in a moment
                log.warning("sqs.parked_not_hidden", error=type(exc).__name__)
                await asyncio.sleep(RETRY_AFTER_OUTAGE_SECONDS)

    async def _hide_due(self) -> None:
        async with self._lock:
            now = self._clock.now()
            due = self._lot.due(now=now)
            seconds = {p.delivery.receipt: p.hide_seconds for p in due}
            failed = await self._hiding.hide(list(seconds), seconds.__getitem__)
            self._lot.drop(failed)
            for parked in due:
                # As hidden now; one SQS refused is gone from the lot already.
                until = self._hiding.hidden_until(parked.delivery.receipt)
                parked.hidden_until = now + parked.hide_seconds if until is None else until
