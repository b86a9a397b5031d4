"""The scheduled sweeper: ``ferryman.aws_lambda.sweep``, invoked by an EventBridge
schedule (deploy/aws/template.yaml: once a minute).

The Lambda worker runs only while a batch's records do, and ``ferryman api`` does not
sweep, so a deployment of both has no sweeper without this one: a job whose message was
never sent (an API stopped between the write and the send) would wait forever, a
dead-lettered job would never be failed for its callers, and finished jobs would never
be purged. Each invocation runs the rounds a ``ferryman worker`` runs beside its worker
(services/sweeper.py, ``Sweeper.sweep_once``) every FERRYMAN_SWEEP_INTERVAL_SECONDS,
while the time the invocation has left covers a round (SWEEP_MARGIN_SECONDS); so a
schedule of one a minute, with a function timeout a little over it, sweeps about as
often as a worker's sweeper. Two invocations at once would be safe (every change a
sweeper makes is a conditional write, a second message of a job is harmless); the
template reserves a concurrency of one so that a slow one never piles up with the next.

As the worker handler (container.py), the engine, the sweeper and the loop are opened
by a container's first invocation and kept by the later ones; the sweeper remembers the
undecodable dead letters it has logged, so each is logged once per container. It calls
no model. An invocation never raises: a round that fails (the table is away, an
outage) is logged and counted, and the next round tries again; an engine that cannot
be opened counts as a failed round, and the next invocation opens again. It answers
with what it did, in counts (``SweepSummary``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.aws_lambda.warm import WarmContainer
from ferryman.config import load_settings
from ferryman.http.views import webhook_event_body
from ferryman.observability.logging import describe_exception, flush_logs

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.config import Settings
    from ferryman.services.sweeper import Sweeper, SweepReport
    from ferryman.services.webhooks import WebhookDispatcher
    from ferryman.wiring import Runtime

log = structlog.get_logger("ferryman.lambda")

# A round starts only while the invocation has this long left: a round is a few dozen
# requests (more when the SDK retries a throttled one, or a purge has much to remove),
# and Lambda stops a function at its timeout without warning.
SWEEP_MARGIN_SECONDS = 15.0
# A round still running when only this much is left is cut short (each of its changes
# is whole or not made, and the next round takes up what it left), so that the
# invocation returns its answer and its logs before the timeout.
RETURN_SECONDS = 3.0
# How long an invocation waits for its log lines to be written before it returns.
LOG_FLUSH_SECONDS = 2.0


@dataclass(slots=True)
class SweepSummary:
    """One invocation's work: rounds run to the end and rounds that failed (an engine
    that could not be opened is one), and what the finished rounds did."""

    rounds: int = 0
    failed_rounds: int = 0
    dead_lettered: int = 0
    redispatched: int = 0
    purged: int = 0
    undecodable: int = 0
    # Completion webhook attempts started (a Lambda deployment has no worker process
    # to send them: this function does, each round).
    webhooks: int = 0

    def add(self, report: SweepReport) -> None:
        self.rounds += 1
        self.dead_lettered += report.dead_lettered
        self.redispatched += report.redispatched
        self.purged += report.purged
        self.undecodable += report.undecodable

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


class SweepContainer(WarmContainer):
    """The loop, and the sweeper once opened (None until then, or after a failed open);
    ``invoke`` is the handler."""

    def __init__(self, *, settings: Callable[[], Settings] = load_settings) -> None:
        super().__init__(settings=settings)
        self._sweeper: Sweeper | None = None
        self._dispatcher: WebhookDispatcher | None = None
        self._interval_seconds = 0.0

    def invoke(self, event: Any, context: Any) -> dict[str, int]:
        """Run rounds while the invocation has time; what they did. ``event`` (the
        schedule's) says nothing a sweep needs."""
        summary = SweepSummary()
        try:
            self._event_loop().run_until_complete(self._invoke(context, summary))
        except Exception as exc:  # noqa: BLE001 - a schedule gets an answer, never a crash
            summary.failed_rounds += 1
            log.error("lambda.sweep_failed", **describe_exception(exc))
        log.info("lambda.swept", **summary.as_dict())
        # Lambda freezes the container as soon as the handler returns (container.py).
        flush_logs(LOG_FLUSH_SECONDS)
        return summary.as_dict()

    def _forget(self) -> None:
        self._sweeper = None
        self._dispatcher = None

    async def _invoke(self, context: Any, summary: SweepSummary) -> None:
        time_left = _time_left(context)
        if time_left is not None and time_left() < SWEEP_MARGIN_SECONDS:
            log.warning(
                "lambda.sweep_not_started",
                remaining_seconds=round(time_left(), 3),
                needed_seconds=SWEEP_MARGIN_SECONDS,
                fix="raise the sweeper function's timeout",
            )
            return
        sweeper = await self._opened()
        assert self._dispatcher is not None  # opened with the sweeper
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            await _round(sweeper, self._dispatcher, summary, time_left)
            if time_left is None:
                return  # no deadline to sweep up to (a local run): one round
            wait = max(0.0, self._interval_seconds - (loop.time() - started))
            if time_left() - wait < SWEEP_MARGIN_SECONDS:
                return
            await asyncio.sleep(wait)

    async def _opened(self) -> Sweeper:
        if self._sweeper is not None:
            return self._sweeper

        async def build(runtime: Runtime) -> Sweeper:
            self._interval_seconds = runtime.settings.sweeper.interval_seconds
            self._dispatcher = runtime.new_webhook_dispatcher(webhook_event_body)
            return runtime.new_sweeper()

        # It calls no model.
        sweeper = self._sweeper = await self._open(call_models=False, build=build)
        log.info("lambda.sweeper_opened", interval_seconds=self._interval_seconds)
        return sweeper


async def _round(
    sweeper: Sweeper,
    dispatcher: WebhookDispatcher,
    summary: SweepSummary,
    time_left: Callable[[], float] | None,
) -> None:
    """One round, cut short if it runs into the invocation's last RETURN_SECONDS: the
    sweep, then the completion webhooks that are due (the Lambda worker sends none),
    each attempt it starts waited for (10 s at most; one cut short is taken over when
    its claim ends)."""
    budget = None if time_left is None else max(0.0, time_left() - RETURN_SECONDS)
    try:
        async with asyncio.timeout(budget):
            report = await sweeper.sweep_once()
            summary.add(report)
            try:
                summary.webhooks += await dispatcher.dispatch_once()
                await dispatcher.drain()
            except Exception as exc:  # noqa: BLE001 - the sweep stands; looked at next round
                log.warning("webhooks.scan_failed", **describe_exception(exc))
    except Exception as exc:  # noqa: BLE001 - retried next round; never stop sweeping
        summary.failed_rounds += 1
        log.warning("sweeper.failed", **describe_exception(exc))
        return
    if report.dead_lettered or report.redispatched or report.purged:
        log.info(
            "sweeper.swept",
            dead_lettered=report.dead_lettered,
            redispatched=report.redispatched,
            purged=report.purged,
        )


def _time_left(context: Any) -> Callable[[], float] | None:
    """The invocation's time left, in seconds, as Lambda's context tells it (0 when it
    cannot); None for a caller with no such context."""
    remaining_ms = getattr(context, "get_remaining_time_in_millis", None)
    if not callable(remaining_ms):
        return None

    def left() -> float:
        try:
            seconds = float(remaining_ms()) / 1000
        except Exception as exc:  # noqa: BLE001 - a context that cannot say leaves no time
            log.warning("lambda.remaining_time_unknown", **describe_exception(exc))
            return 0.0
        return 0.0 if math.isnan(seconds) else seconds

    return left
