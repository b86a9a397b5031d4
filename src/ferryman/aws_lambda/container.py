"""What one Lambda container keeps between invocations: an event loop, and the engine
and worker opened on it.

Lambda runs one invocation at a time in a container and freezes it in between, so the
engine (its connections, clients and pools), the worker and its loop are made once, at
the first invocation, and reused by every later one: a warm invocation pays for no
connection. Opening is what ``ferryman worker`` does, from the same settings
(FERRYMAN_DATABASE_URL and the rest). An open that fails is not kept: that
invocation names all its records as failures, and the next one tries again.

An invocation never raises: whatever breaks, it answers with every record whose message
is not known to be free to go.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.aws_lambda.batch import BatchRunner, worst_case_attempt_seconds
from ferryman.aws_lambda.event_source import EventSourceLedger, EventSourceQueue
from ferryman.aws_lambda.records import SqsEvent, parse_event
from ferryman.aws_lambda.warm import WarmContainer
from ferryman.config import load_settings
from ferryman.observability.logging import describe_exception, flush_logs
from ferryman.wiring import worker_timeouts

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.config import Settings
    from ferryman.wiring import Runtime

log = structlog.get_logger("ferryman.lambda")

BatchResponse = dict[str, list[dict[str, str]]]
# How long a handler waits for its log lines to be written before it returns.
LOG_FLUSH_SECONDS = 2.0


class Container(WarmContainer):
    """The loop, and the batch runner once opened (None until then, or after a failed
    open); ``invoke`` is the handler."""

    def __init__(self, *, settings: Callable[[], Settings] = load_settings) -> None:
        super().__init__(settings=settings)
        self._runner: BatchRunner | None = None

    def invoke(self, event: Any, context: Any) -> BatchResponse:
        """Run the event's records; name those whose message must stay in the queue."""
        goes: set[str] = set()
        try:
            parsed = parse_event(event)
            if parsed.unnamed:
                # A batch item failure must name a message id; such a record cannot stay.
                log.warning("lambda.record_without_message_id", records=parsed.unnamed)
            self._event_loop().run_until_complete(self._invoke(parsed, context, goes))
        except Exception as exc:  # noqa: BLE001 - the mapping must get an answer, never a crash
            log.error("lambda.invocation_failed", **describe_exception(exc))
        # Lines are written by a thread, and Lambda freezes the container as soon as the
        # handler returns: written now, or at the next invocation's thaw (if any).
        flush_logs(LOG_FLUSH_SECONDS)
        return batch_response(_message_ids(event), goes)

    def _forget(self) -> None:
        self._runner = None

    async def _invoke(self, parsed: SqsEvent, context: Any, goes: set[str]) -> None:
        if not parsed.records:
            return
        runner = await self._opened()
        await runner.run(parsed.records, remaining_seconds=_remaining(context), goes=goes)

    async def _opened(self) -> BatchRunner:
        if self._runner is not None:
            return self._runner

        async def build(runtime: Runtime) -> BatchRunner:
            await runtime.prepare_storage()
            return batch_runner(runtime)

        # As `ferryman worker`: it calls models.
        runner = self._runner = await self._open(call_models=True, build=build)
        log.info("lambda.opened", needed_seconds=runner.needed_seconds)
        return runner


def batch_runner(runtime: Runtime) -> BatchRunner:
    """The runtime's worker, over a queue and a ledger that delete no message (the
    event source mapping does: event_source.py)."""
    queue = EventSourceQueue(runtime.queue)
    ledger = EventSourceLedger(runtime.store.store, observers=runtime.store.observers)
    worker = dataclasses.replace(runtime, queue=queue, store=ledger).new_worker()
    settings = runtime.settings
    return BatchRunner(
        worker=worker,
        queue=queue,
        control=runtime.control,
        worst_case_seconds=worst_case_attempt_seconds(worker_timeouts(settings)),
        concurrency=settings.worker.concurrency,
    )


def batch_response(message_ids: list[str], goes: set[str]) -> BatchResponse:
    """The partial batch response: every record named but those whose message may go."""
    return {
        "batchItemFailures": [
            {"itemIdentifier": message_id} for message_id in message_ids if message_id not in goes
        ]
    }


def _message_ids(event: Any) -> list[str]:
    """Each record's message id, read as plainly as can be: what the answer must cover
    even when everything else about the event broke."""
    records = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(records, list):
        return []
    ids = (r.get("messageId") if isinstance(r, dict) else None for r in records)
    return list(dict.fromkeys(i for i in ids if isinstance(i, str) and i))


def _remaining(context: Any) -> Callable[[], float]:
    """The invocation's time left, in seconds, as Lambda's context tells it; unbounded
    for a caller with no such context (a local run)."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining_ms):
        return lambda: math.inf
    return lambda: float(remaining_ms()) / 1000
