"""SqsJobQueue: the JobQueue port on Amazon SQS, a job queue and its dead-letter queue.

SQS does the counting and the redrive itself: every receive raises a message's
ApproximateReceiveCount, and a receive that meets a message already received
``maxReceiveCount`` times (``ferryman migrate`` sets it to max_receives) moves it to
the dead-letter queue instead. Receives long-poll (up to 20 s, whole seconds).

Fairness. SQS delivers in its own order (``fair_receive`` False); a standard queue
whose messages carry a MessageGroupId (the tenant, adapters/aws/queue_wire.py) is a
fair queue, which keeps a quiet tenant's dwell time low. Within one receiver the
TenantBudget holds: a delivery beyond its tenant's allowance is never returned. It
is not given straight back either, since the next receive would take it again and
each receive counts toward redrive: a flooding tenant's jobs would be dead-lettered
without ever running. It is parked in this process (adapters/aws/queue_parking.py):
kept hidden (ChangeMessageVisibilityBatch, the receive's visibility timeout at a time) and
handed out, oldest first, as soon as its tenant has room (the receiver sets
``budget.freed``; while anything is parked a receive long-polls 1 s at a time so it
notices). The trade-off: at most ``parking_capacity`` messages wait here, hidden from
other workers that may have room for their tenant; when a batch would overflow it,
the oldest parked are let go (visibility 0: their next receive counts); and once it
is full, a receive does not take more from SQS until its tenants have room, so a
quiet tenant's message behind the flood waits for another worker or for room here
(the fair queue keeps it near the front). A receipt parked past its 12-hour limit is
let go. ``close`` lets every parked message go.

Receipts are SQS ReceiptHandles. A stale one (its message received again, or
deleted) is refused by the process that issued it (adapters/aws/queue_receipts.py),
then by SQS, whose answers for a receipt it will not act on map to False.

The 12-hour budget. SQS keeps a received message hidden at most 12 hours: "you can't
extend the timeout of a message ... to more than a total visibility timeout of 12
hours", and its example counts from the receive (a 30-minute timeout extended by two
hours leaves at most 9 h 30 more: SQS API reference, ChangeMessageVisibility). The
budget is per receive: the next receive starts from its own timeout again. Each
Delivery's ``extendable_until`` is that receive's start (taken before the request, so
never later than SQS's) plus VISIBILITY_BUDGET_SECONDS (12 hours less a minute for
clock skew); ``change_visibility`` never asks past it. moto counts the 12 hours from
the message's SentTimestamp instead, which the suites cannot reach in any case.

Delays are whole seconds, at most 900 (queue_wire.delay_seconds says what a longer
one does). ``stats().oldest_age_seconds``: SQS's API has no age of the oldest message
(CloudWatch's ApproximateAgeOfOldestMessage has it, a minute late); this reports the
oldest send time among the messages this process holds hidden (received, parked, not
deleted), 0 when none: a message waiting unreceived in SQS is not seen.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.adapters.aws import queue_wire as wire
from ferryman.adapters.aws.errors import error_code, translate_errors
from ferryman.adapters.aws.provision import queue_url
from ferryman.adapters.aws.queue_hiding import MIN_PARK_SECONDS, Hiding, ParkedKeeper
from ferryman.adapters.aws.queue_letters import UndecodableLetters
from ferryman.adapters.aws.queue_parking import Allowance, Parked, ParkingLot
from ferryman.adapters.aws.queue_receipts import Held, ReceiptBook
from ferryman.core.errors import StoreUnavailableError
from ferryman.ports.queue import (
    DeadLetter,
    Delivery,
    QueueCapabilities,
    QueueMessage,
    QueueStats,
)

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation
    from ferryman.core.clock import Clock
    from ferryman.ports.queue import TenantBudget, UndecodableLetter

log = structlog.get_logger("ferryman.aws")

# SQS delivers in its own order, and keeps its own time.
QUEUE_CAPABILITIES = QueueCapabilities(fair_receive=False, follows_clock=False)

VISIBILITY_BUDGET_SECONDS = 12 * 3600 - 60
PARKING_CAPACITY = 40  # four full receives' worth
PARKED_POLL_SECONDS = 1
MAX_PULLS = 5  # SQS receives per receive call, the later ones only for what is there
DEAD_LETTER_VISIBILITY_SECONDS = 30  # the sweeper fails the job and deletes meanwhile
ANY_VISIBLE_CACHE_SECONDS = 0.5
# A receipt is forgotten this long after its hiding ran out: a parked one hidden again a
# moment late is still known.
RECEIPT_GRACE_SECONDS = 60


class SqsJobQueue:
    def __init__(
        self,
        clients: AwsClients,
        *,
        queue_url: str,
        dlq_url: str,
        letters: UndecodableLetters,
        clock: Clock,
        max_receives: int,
        parking_capacity: int = PARKING_CAPACITY,
        visibility_budget_seconds: float = VISIBILITY_BUDGET_SECONDS,
    ) -> None:
        if max_receives < 1:
            raise ValueError("max_receives must be at least 1")
        self._sqs = clients.sqs
        self._url = queue_url
        self._dlq_url = dlq_url
        self._letters = letters
        self._clock = clock
        self._max_receives = max_receives
        self._budget_seconds = visibility_budget_seconds
        self._book = ReceiptBook()
        self._lot = ParkingLot(parking_capacity)
        self._parking = asyncio.Lock()
        self._hiding = Hiding(self._sqs, queue_url, clock=clock, book=self._book)
        self._keeper = ParkedKeeper(self._lot, self._parking, self._hiding, clock=clock)
        self._visible_cache: tuple[float, bool] | None = None

    @classmethod
    async def open(
        cls,
        clients: AwsClients,
        location: AwsLocation,
        *,
        clock: Clock,
        max_receives: int,
        **options: Any,
    ) -> SqsJobQueue:
        """The queue of ``location``; StoreUnavailableError when a queue is missing."""
        urls: list[str] = []
        for queue in (location.queue, location.dlq):
            with translate_errors("sqs"):
                url = await queue_url(clients, queue)
            if url is None:
                raise StoreUnavailableError(
                    f"sqs: queue {queue.name} does not exist (run `ferryman migrate` on "
                    "this aws:// URL)"
                )
            urls.append(url)
        return cls(
            clients,
            queue_url=urls[0],
            dlq_url=urls[1],
            letters=UndecodableLetters(clients, location.table),
            clock=clock,
            max_receives=max_receives,
            **options,
        )

    async def close(self) -> None:
        """Stop keeping parked deliveries hidden, and let them go for other workers."""
        await self._keeper.stop()
        async with self._parking:
            parked = self._lot.empty()
        with contextlib.suppress(Exception):  # closing: what is not let go shows in time
            await self._hiding.let_go([p.delivery.receipt for p in parked])

    @property
    def capabilities(self) -> QueueCapabilities:
        return QUEUE_CAPABILITIES

    async def send(self, message: QueueMessage, *, delay_seconds: float = 0.0) -> None:
        with translate_errors("sqs"):
            await self._sqs.send_message(
                **wire.send_arguments(self._url, message, delay=delay_seconds)
            )

    # --- receive ---------------------------------------------------------------------

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
        visibility = wire.visibility_seconds(visibility_timeout_seconds)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(0.0, wait_seconds)
        while True:
            freed = None if budget is None else budget.freed
            if freed is not None:
                freed.clear()  # before the look: a slot freed during it wakes the wait
            allowance = Allowance(max_messages, budget)
            deliveries = await self._unpark(allowance, visibility)
            remaining = deadline - loop.time()
            if allowance.room > 0 and not self._lot.full:
                wait = 0 if deliveries else self._poll_seconds(remaining, freed)
                deliveries += await self._pull(allowance, visibility, wait)
            elif not deliveries and remaining > 0:
                await _wait_for(freed, min(remaining, PARKED_POLL_SECONDS))
            if deliveries or deadline - loop.time() <= 0:
                return deliveries

    def _poll_seconds(self, remaining: float, freed: asyncio.Event | None) -> int:
        wait = wire.wait_seconds(remaining)
        if self._lot and freed is not None:
            return min(wait, PARKED_POLL_SECONDS)  # a freed slot may hand out a parked one
        return wait

    async def _pull(self, allowance: Allowance, visibility: int, wait: int) -> list[Delivery]:
        """Take from SQS: the first receive may long-poll, the next ones take only what
        is there at once, while this receive has room and the lot is not full."""
        deliveries: list[Delivery] = []
        for _ in range(MAX_PULLS):
            started = self._clock.now()
            with translate_errors("sqs"):
                response = await self._sqs.receive_message(
                    QueueUrl=self._url,
                    MaxNumberOfMessages=min(wire.MAX_BATCH, allowance.room),
                    VisibilityTimeout=visibility,
                    WaitTimeSeconds=wait,
                    MessageSystemAttributeNames=list(wire.SYSTEM_ATTRIBUTES),
                    MessageAttributeNames=list(wire.MESSAGE_ATTRIBUTES),
                )
            raw = response.get("Messages") or []
            self._book.prune(now=started, grace_seconds=RECEIPT_GRACE_SECONDS)
            admitted: list[tuple[Delivery, str]] = []
            for item in raw:
                received = wire.received_message(item)
                delivery = await self._admit(received, started, visibility)
                if delivery is not None:
                    admitted.append((delivery, received.message_id))
            deliveries += await self._within_budget(admitted, allowance, visibility)
            wait = 0
            if not raw or allowance.room <= 0 or self._lot.full:
                break
        if deliveries:
            self._visible_cache = None
        return deliveries

    async def _admit(
        self, received: wire.ReceivedMessage, started: float, visibility: int
    ) -> Delivery | None:
        """The received message as a Delivery; None when it was undecodable (moved
        out to the letters at once: the port says no receive returns one)."""
        try:
            message = QueueMessage.from_body(received.body)
        except ValueError:
            await self._move_out(received, self._url)
            return None
        extendable_until = started + self._budget_seconds
        self._book.issued(
            received.receipt,
            Held(
                message_id=received.message_id,
                sent_at=received.sent_at,
                hidden_until=started + visibility,
                extendable_until=extendable_until,
            ),
        )
        return Delivery(
            message=message,
            receipt=received.receipt,
            receive_count=received.receive_count,
            sent_at=received.sent_at,
            extendable_until=extendable_until,
        )

    async def _within_budget(
        self, admitted: list[tuple[Delivery, str]], allowance: Allowance, visibility: int
    ) -> list[Delivery]:
        """The deliveries the allowance lets this receive return; the others parked
        (the oldest parked let go if the lot overflows)."""
        returned: list[Delivery] = []
        released: list[Parked] = []
        async with self._parking:
            for delivery, message_id in admitted:
                self._lot.drop_message(message_id)  # a parked receipt of it is stale now
                tenant = delivery.message.tenant_id
                if allowance.allows(tenant):
                    allowance.give(tenant)
                    returned.append(delivery)
                    continue
                held = self._book.get(delivery.receipt)
                hidden_until = self._clock.now() if held is None else held.hidden_until
                hide = max(MIN_PARK_SECONDS, visibility)
                released += self._lot.park(Parked(delivery, message_id, hidden_until, hide))
        if len(returned) < len(admitted):
            self._keeper.parked()
        if released:
            await self._hiding.let_go([p.delivery.receipt for p in released])
        return returned

    async def _unpark(self, allowance: Allowance, visibility: int) -> list[Delivery]:
        """Parked deliveries whose tenant has room now, hidden for the caller's timeout."""
        async with self._parking:
            taken = self._lot.take(allowance)
            if not taken:
                return []
            receipts = [p.delivery.receipt for p in taken]
            failed = await self._hiding.hide(receipts, lambda _receipt: visibility)
        for parked in taken:
            if parked.delivery.receipt in failed:
                allowance.take_back(parked.delivery.message.tenant_id)
        return [p.delivery for p in taken if p.delivery.receipt not in failed]

    async def _move_out(self, received: wire.ReceivedMessage, url: str) -> None:
        """Keep an undecodable message as a letter, then delete it from SQS. If the
        table is away it stays in SQS: it shows again, and redrive ends its turns."""
        try:
            await self._letters.keep(received, now=self._clock.now())
        except StoreUnavailableError as exc:
            log.warning("sqs.undecodable_not_kept", message_id=received.message_id, error=str(exc))
            return
        await self._delete_at(url, received.receipt)

    # --- receipts ------------------------------------------------------------------------

    async def change_visibility(self, receipt: str, *, timeout_seconds: float) -> bool:
        changed = await self._hiding.change(receipt, timeout_seconds)
        if changed and timeout_seconds <= 0:
            self._visible_cache = None
        return changed

    async def delete(self, receipt: str) -> None:
        if self._book.is_stale(receipt):
            return  # received again since: deleting would drop the newer delivery
        await self._delete_at(self._url, receipt)
        self._book.retire(receipt)

    async def _delete_at(self, url: str, receipt: str) -> None:
        try:
            with translate_errors("sqs"):
                await self._sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
        except Exception as exc:
            if error_code(exc) not in wire.STALE_RECEIPT_CODES:
                raise

    # --- dead letters --------------------------------------------------------------------

    async def receive_dead_letters(self, *, max_messages: int) -> list[DeadLetter]:
        """Job messages from the dead-letter queue, hidden DEAD_LETTER_VISIBILITY_SECONDS
        for the sweeper to fail their jobs and delete them. An undecodable one met
        there is moved to the letters. SQS keeps no time of the redrive:
        ``dead_lettered_at`` is when this read met it."""
        letters: list[DeadLetter] = []
        while len(letters) < max_messages:
            asked = min(wire.MAX_BATCH, max_messages - len(letters))
            with translate_errors("sqs"):
                response = await self._sqs.receive_message(
                    QueueUrl=self._dlq_url,
                    MaxNumberOfMessages=asked,
                    VisibilityTimeout=DEAD_LETTER_VISIBILITY_SECONDS,
                    WaitTimeSeconds=0,
                    MessageSystemAttributeNames=list(wire.SYSTEM_ATTRIBUTES),
                )
            raw = [wire.received_message(item) for item in response.get("Messages") or []]
            for received in raw:
                letter = await self._dead_letter(received)
                if letter is not None:
                    letters.append(letter)
            if len(raw) < asked:
                break
        return letters

    async def _dead_letter(self, received: wire.ReceivedMessage) -> DeadLetter | None:
        try:
            message = QueueMessage.from_body(received.body)
        except ValueError:
            await self._move_out(received, self._dlq_url)
            return None
        return DeadLetter(
            dead_letter_id=received.receipt,
            message=message,
            # The count goes on in the dead-letter queue (each read of it raises it):
            # at the redrive it was maxReceiveCount.
            receive_count=max(0, min(received.receive_count - 1, self._max_receives)),
            dead_lettered_at=self._clock.now(),
        )

    async def delete_dead_letter(self, dead_letter_id: str) -> None:
        await self._delete_at(self._dlq_url, dead_letter_id)

    async def undecodable_letters(
        self, *, limit: int, after: tuple[float, str] | None = None
    ) -> list[UndecodableLetter]:
        return await self._letters.page(limit=limit, after=after)

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter | None:
        return await self._letters.get(dead_letter_id)

    async def delete_undecodable_letter(self, dead_letter_id: str) -> bool:
        return await self._letters.delete(dead_letter_id)

    # --- looks -------------------------------------------------------------------------

    async def _counts(self, url: str) -> dict[str, int]:
        with translate_errors("sqs"):
            response = await self._sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=[
                    "ApproximateNumberOfMessages",
                    "ApproximateNumberOfMessagesNotVisible",
                    "ApproximateNumberOfMessagesDelayed",
                ],
            )
        return {name: int(value) for name, value in (response.get("Attributes") or {}).items()}

    async def stats(self) -> QueueStats:
        main, dead, undecodable = await asyncio.gather(
            self._counts(self._url), self._counts(self._dlq_url), self._letters.count()
        )
        now = self._clock.now()
        oldest = self._book.oldest_sent_at(now)
        return QueueStats(
            visible=main.get("ApproximateNumberOfMessages", 0),
            in_flight=main.get("ApproximateNumberOfMessagesNotVisible", 0)
            + main.get("ApproximateNumberOfMessagesDelayed", 0),
            oldest_age_seconds=0.0 if oldest is None else max(0.0, now - oldest),
            dead_letters=sum(dead.values()) + undecodable,
            undecodable_letters=undecodable,
        )

    async def any_visible(self) -> bool:
        """ApproximateNumberOfMessages > 0, one GetQueueAttributes per half second."""
        moment = asyncio.get_running_loop().time()
        cached = self._visible_cache
        if cached is not None and moment - cached[0] < ANY_VISIBLE_CACHE_SECONDS:
            return cached[1]
        visible = (await self._counts(self._url)).get("ApproximateNumberOfMessages", 0) > 0
        self._visible_cache = (moment, visible)
        return visible


async def _wait_for(event: asyncio.Event | None, seconds: float) -> None:
    if event is None:
        await asyncio.sleep(seconds)
        return
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await event.wait()
