"""One invocation's batch: every record run at once, each answered on its own.

A record is one delivery for the worker's ``handle``, as a receive of ``ferryman
worker`` would make it. What the batch answers is which records' messages may go
(dispositions.py); every other record is named a failure, so the event source mapping
leaves its message in the queue. No record can fail another: a record whose body is
no job message, an attempt that raises, a store that is away are each that record's
own failure.

Before a record's attempt starts, the time the invocation has left must cover the
worst an attempt can take (``worst_case_attempt_seconds``) plus a margin: Lambda
stops a function at its timeout with no warning, and an attempt cut off there has paid
for a call whose result is lost. One that cannot finish in time is not started; its
record is named a failure, and its message comes back after its visibility timeout.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

import structlog

from ferryman.aws_lambda.dispositions import message_may_go
from ferryman.observability.logging import describe_exception
from ferryman.ports.control import Switch
from ferryman.services import delivery as delivery_steps
from ferryman.services.pauses import PAUSED_PROVIDER_RECHECK_SECONDS

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ferryman.aws_lambda.event_source import EventSourceQueue
    from ferryman.aws_lambda.records import SqsRecord
    from ferryman.ports.control import ControlStore
    from ferryman.ports.queue import Delivery
    from ferryman.services.attempt import AttemptTimeouts
    from ferryman.services.worker import Worker

log = structlog.get_logger("ferryman.lambda")

# Beyond the attempt's own worst case: the claim, the result's put and the outcome's
# write (one round trip each, more when the SDK retries a throttled call), and the
# handler's return, all of which must fit before Lambda stops the function.
TIMEOUT_MARGIN_SECONDS = 10.0


def worst_case_attempt_seconds(timeouts: AttemptTimeouts) -> float:
    """The longest one attempt may run: its call, bounded by the attempt timeout
    whatever the provider, then the outcome's write ridden through a store that is
    briefly away (services/delivery.py waits between its tries)."""
    return timeouts.attempt_timeout_seconds + sum(delivery_steps.PERSIST_RETRY_DELAYS_SECONDS)


class BatchRunner:
    """Runs an invocation's records through one worker (made once per container)."""

    def __init__(
        self,
        *,
        worker: Worker,
        queue: EventSourceQueue,
        control: ControlStore,
        worst_case_seconds: float,
        concurrency: int,
        margin_seconds: float = TIMEOUT_MARGIN_SECONDS,
    ) -> None:
        self._worker = worker
        self._queue = queue
        self._control = control
        self._needed_seconds = worst_case_seconds + margin_seconds
        self._slots = asyncio.Semaphore(concurrency)

    @property
    def needed_seconds(self) -> float:
        """What an invocation must have left to start an attempt."""
        return self._needed_seconds

    async def run(
        self,
        records: Sequence[SqsRecord],
        *,
        remaining_seconds: Callable[[], float],
        goes: set[str],
    ) -> None:
        """Add to ``goes`` the message id of each record whose message may go, as soon as
        that is known (so an invocation that breaks off still answers for them)."""
        deliveries = [(r.message_id, r.delivery) for r in records if r.delivery is not None]
        for record in records:
            if record.delivery is None:
                await self._poison(record)
        if not deliveries:
            return
        paused = await self._workers_paused()
        if paused is None:
            return  # the switch cannot be read: start nothing, every record stays
        if paused:
            await asyncio.gather(*(self._put_back(m, d, goes) for m, d in deliveries))
            return
        await asyncio.gather(*(self._handle(m, d, remaining_seconds, goes) for m, d in deliveries))

    async def _poison(self, record: SqsRecord) -> None:
        """A record no worker can ever read. It is named a failure like any other, so
        the queue's redrive moves it to the dead-letter queue after maxReceiveCount
        receives (where ``ferryman dlq`` shows it to an operator); and it is made visible
        again now, so it gets there in seconds instead of visibility timeouts. Deleted,
        it would leave no trace; moved by hand, it would need a send this engine-blind
        handler has no verb for (the port's receive dead-letters such a body itself)."""
        log.warning(
            "lambda.undecodable_record", message_id=record.message_id, problem=record.problem
        )
        if record.receipt is None:
            return
        try:
            await self._queue.change_visibility(record.receipt, timeout_seconds=0.0)
        except Exception as exc:  # noqa: BLE001 - it comes back later all the same
            log.warning("lambda.visibility_failed", **describe_exception(exc))

    async def _workers_paused(self) -> bool | None:
        """Are workers paused? None when the switch cannot be read (the store is away)."""
        try:
            return Switch.WORKERS in await self._control.paused()
        except Exception as exc:  # noqa: BLE001 - an outage fails the batch, not the function
            log.warning("lambda.pause_check_failed", **describe_exception(exc))
            return None

    async def _put_back(self, message_id: str, delivery: Delivery, goes: set[str]) -> None:
        """Workers are paused: start nothing. The mapping keeps receiving regardless, and
        each receive counts towards the redrive, so a pause of hours would dead-letter
        every waiting job. Instead the job's message is sent again for later (as for a
        paused provider) and this one may go: a duplicate is harmless, a loss is not."""
        try:
            await self._queue.send(delivery.message, delay_seconds=PAUSED_PROVIDER_RECHECK_SECONDS)
        except Exception as exc:  # noqa: BLE001 - this record stays, the others go on
            log.warning(
                "lambda.put_back_failed", job_id=delivery.message.job_id, **describe_exception(exc)
            )
            return
        goes.add(message_id)

    async def _handle(
        self,
        message_id: str,
        delivery: Delivery,
        remaining_seconds: Callable[[], float],
        goes: set[str],
    ) -> None:
        async with self._slots:
            left = _seconds_left(remaining_seconds)
            if left < self._needed_seconds:
                log.warning(
                    "lambda.attempt_not_started",
                    job_id=delivery.message.job_id,
                    remaining_seconds=round(left, 3),
                    needed_seconds=self._needed_seconds,
                    fix="raise the function's timeout above needed_seconds, or lower "
                    "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS",
                )
                return
            try:
                verdict = await self._worker.handle(delivery)
            except Exception as exc:  # noqa: BLE001 - the message comes back; the job record is the truth
                log.warning(
                    "lambda.delivery_failed",
                    job_id=delivery.message.job_id,
                    **describe_exception(exc),
                )
                self._queue.take_acknowledged(delivery.receipt)
                return
        if message_may_go(verdict, acknowledged=self._queue.take_acknowledged(delivery.receipt)):
            goes.add(message_id)


def _seconds_left(remaining_seconds: Callable[[], float]) -> float:
    """The invocation's time left; none when it cannot be told (start nothing)."""
    try:
        left = float(remaining_seconds())
    except Exception as exc:  # noqa: BLE001 - a context that cannot say leaves no time
        log.warning("lambda.remaining_time_unknown", **describe_exception(exc))
        return 0.0
    return 0.0 if math.isnan(left) else left
