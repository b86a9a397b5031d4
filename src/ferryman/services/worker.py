"""The worker: receive messages, run up to ``concurrency`` attempts at once, stop gracefully.

Receiving is batched (one receive fills every free slot), and each delivery runs
as its own asyncio task, so one process holds thousands of slow model calls at
the cost of a coroutine each. Slots are shared fairly: no tenant holds more than
``tenant_max_share`` of them, and free slots go to the tenants holding fewest
(core/fairness.py), so one tenant's flood of slow jobs never keeps another's
quick ones waiting. On stop it receives nothing more, lets running attempts
finish within the grace period, then gives the rest back: their jobs wait again
and their messages become visible now, so another worker takes over at once.

Under a steady stream of jobs that arrive one at a time, a receive after one that
found work, but less than it could take, and left nothing visible, starts
``receive_linger_seconds`` after it (docs/design-notes.md, "Receives linger under a
steady stream"): the jobs arriving meanwhile share one receive, and one transaction,
instead of costing one each. A job that arrives alone, later than that, is taken at
once.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
from functools import partial
from typing import TYPE_CHECKING

import structlog

from ferryman.observability.logging import describe_exception
from ferryman.ports.control import Switch
from ferryman.ports.queue import ClaimsOnReceive, TenantBudget
from ferryman.services.attempt import AttemptRunner
from ferryman.services.delivery import DeliveryHandler, DeliverySettings
from ferryman.services.limiter import Limiters
from ferryman.services.verdicts import Verdict

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Mapping

    from ferryman.core.job import Job
    from ferryman.ports.limits import SharedLimits
    from ferryman.ports.queue import Delivery, Received
    from ferryman.services.attempt import AttemptTimeouts
    from ferryman.services.limiter import CallBudget
    from ferryman.services.worker_parts import WorkerOptions, WorkerParts

log = structlog.get_logger("ferryman.worker")

MAX_RECEIVE_BATCH = 64
PAUSE_CHECK_SECONDS = 1.0
IDLE_BACKOFF_SECONDS = 0.5


class Worker:
    """The receive loop over a delivery handler and its attempt runner (``compose_worker``)."""

    def __init__(
        self,
        parts: WorkerParts,
        settings: WorkerOptions,
        *,
        runner: AttemptRunner,
        handler: DeliveryHandler,
    ) -> None:
        self.worker_id = settings.worker_id
        self._store = parts.store
        self._queue = queue = parts.queue
        self._results = parts.results
        self._control = parts.control
        self._lease = settings.lease
        self._concurrency = concurrency = settings.concurrency
        self._grace_seconds = settings.shutdown_grace_seconds
        self._wait_seconds = settings.receive_wait_seconds
        self._linger_seconds = settings.receive_linger_seconds
        self._cancel_check_seconds = settings.cancel_check_seconds
        # Deliveries in flight per tenant, live: the receive reads it at every look.
        self._tenant_in_flight: collections.Counter[str] = collections.Counter()
        self._budget = TenantBudget(
            max_per_tenant=max(1, math.floor(concurrency * settings.tenant_max_share)),
            in_flight=self._tenant_in_flight,
            freed=asyncio.Event(),
        )
        self._runner = runner
        self._handler = handler
        # Where the engine can, a receive claims its jobs in its own transaction.
        self._claiming: ClaimsOnReceive | None = (
            queue if isinstance(queue, ClaimsOnReceive) and queue.claims_on_receive else None
        )
        self._running: dict[asyncio.Task[Verdict], str] = {}
        self._slot_freed = asyncio.Event()

    @property
    def in_flight(self) -> int:
        return len(self._running)

    async def handle(self, delivery: Delivery) -> Verdict:
        """Process one delivery to its end (tests drive the worker through this)."""
        return await self._handler.handle(delivery)

    @property
    def max_per_tenant(self) -> int:
        return self._budget.max_per_tenant

    async def run(self, stop: asyncio.Event) -> None:
        log.info(
            "worker.started",
            worker_id=self.worker_id,
            concurrency=self._concurrency,
            max_per_tenant=self._budget.max_per_tenant,
        )
        watcher_stop = asyncio.Event()
        watcher = asyncio.create_task(
            self._runner.watch_cancellations(
                watcher_stop, interval_seconds=self._cancel_check_seconds
            )
        )
        # Providers paused automatically are probed again, and resumed, from here.
        prober = asyncio.create_task(self._handler.probes.run(watcher_stop))
        try:
            await self._receive_until(stop)
        finally:
            await self._drain()
            watcher_stop.set()
            await watcher
            await prober
            log.info("worker.stopped", worker_id=self.worker_id)

    async def _paused_or_unreadable(self) -> bool:
        """Are workers paused? A switch that cannot be read (the database is away) counts
        as paused for now: the worker waits and looks again, it does not stop."""
        try:
            return Switch.WORKERS in await self._control.paused()
        except Exception as exc:  # noqa: BLE001 - an outage must not kill the worker
            log.warning("worker.pause_check_failed", **describe_exception(exc))
            return True

    async def run_until_idle(self, *, max_rounds: int = 10_000) -> int:
        """Receive and finish work until the queue has nothing visible (tests, benchmarks)."""
        handled = 0
        for _ in range(max_rounds):
            if self._claiming is not None:
                await self._handler.look_at_pauses()
                received = await self._claiming.receive_claiming(
                    max_messages=min(self._concurrency, MAX_RECEIVE_BATCH),
                    visibility_timeout_seconds=self._lease.visibility_timeout_seconds,
                    budget=self._budget,
                    decide=self._handler.decide_claim,
                )
                if not received:
                    return handled
                await asyncio.gather(*(self._handler.handle_received(r) for r in received))
                handled += len(received)
                continue
            batch = await self._queue.receive(
                max_messages=min(self._concurrency, MAX_RECEIVE_BATCH),
                visibility_timeout_seconds=self._lease.visibility_timeout_seconds,
                budget=self._budget,
            )
            if not batch:
                return handled
            jobs = await self._read_jobs(batch)
            await asyncio.gather(*(self._handler.handle(d, jobs) for d in batch))
            handled += len(batch)
        return handled

    async def _receive_until(self, stop: asyncio.Event) -> None:
        paused_until = 0.0
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            free = self._concurrency - len(self._running)
            if free <= 0:
                await self._wait_for_slot_or(stop)
                continue
            if loop.time() >= paused_until:
                if await self._paused_or_unreadable():
                    await _wait_or(stop, PAUSE_CHECK_SECONDS)
                    continue
                paused_until = loop.time() + PAUSE_CHECK_SECONDS
            if not self._results.healthy:
                # No new paid call while its output would have nowhere to go.
                log.warning("worker.waiting_for_results", worker_id=self.worker_id)
                await self._results.wait_until_healthy(stop)
                continue
            if self._claiming is not None:
                taken = await self._receive_claiming(self._claiming, free)
                for received in taken:
                    self._start(received.delivery, partial(self._handler.handle_received, received))
                await self._linger(stop, len(taken), free)
                continue
            batch = await self._receive(free)
            if not batch:
                continue
            jobs = await self._read_jobs(batch)
            for delivery in batch:
                self._start(delivery, partial(self._handler.handle, delivery, jobs))
            await self._linger(stop, len(batch), free)

    async def _linger(self, stop: asyncio.Event, taken: int, free: int) -> None:
        """After a receive that took some work but less than it could, with nothing
        left visible: let the jobs that arrive next gather for one receive. A full
        receive goes on at once, and so does one that left a message visible (a
        tenant at its share, a tenant the receive did not get to, a message another
        receiver raced it for); an empty one has already waited for work. A stop ends
        the wait, and so does a slot freed by a tenant at its share (its next job may
        be waiting)."""
        if not (self._linger_seconds > 0 and 0 < taken < min(free, MAX_RECEIVE_BATCH)):
            return
        freed = self._budget.freed
        # Set since the receive's look (each look clears it): left set, it also tells
        # the next receive not to skip its first look (adapters/sqlite/queue.py).
        if freed is not None and freed.is_set():
            return
        try:
            if await self._queue.any_visible():
                return
        except Exception as exc:  # noqa: BLE001 - the next receive meets the outage itself
            log.warning("worker.visible_check_failed", **describe_exception(exc))
            return
        await _wait_any((stop, freed), self._linger_seconds)

    async def _receive_claiming(self, claiming: ClaimsOnReceive, free: int) -> list[Received]:
        """A receive that reads its jobs and writes the claims of those it may claim at
        once in its own transaction (ports/queue.py's ClaimsOnReceive): a delivery that
        arrives alone costs the writer one transaction, not a receive and a claim."""
        try:
            await self._handler.look_at_pauses()
            return await claiming.receive_claiming(
                max_messages=min(free, MAX_RECEIVE_BATCH),
                visibility_timeout_seconds=self._lease.visibility_timeout_seconds,
                wait_seconds=self._wait_seconds,
                budget=self._budget,
                decide=self._handler.decide_claim,
            )
        except Exception as exc:  # noqa: BLE001 - a queue outage must not kill the worker
            log.warning("worker.receive_failed", **describe_exception(exc))
            await asyncio.sleep(IDLE_BACKOFF_SECONDS)
            return []

    async def _receive(self, free: int) -> list[Delivery]:
        try:
            return await self._queue.receive(
                max_messages=min(free, MAX_RECEIVE_BATCH),
                visibility_timeout_seconds=self._lease.visibility_timeout_seconds,
                wait_seconds=self._wait_seconds,
                budget=self._budget,
            )
        except Exception as exc:  # noqa: BLE001 - a queue outage must not kill the worker
            log.warning("worker.receive_failed", **describe_exception(exc))
            await asyncio.sleep(IDLE_BACKOFF_SECONDS)
            return []

    async def _read_jobs(self, batch: list[Delivery]) -> dict[str, Job] | None:
        """The batch's jobs in one read instead of one each (None: each reads its own).

        Only a first look: every change the handler makes is still conditional on the
        job's revision, so a job that moved since is read again before it is written."""
        if len(batch) == 1:
            return None
        try:
            return await self._store.get_many({d.message.job_id for d in batch})
        except Exception as exc:  # noqa: BLE001 - each delivery reads its own job instead
            log.warning("worker.batch_read_failed", **describe_exception(exc))
            return None

    def _start(
        self, delivery: Delivery, work: Callable[[], Coroutine[None, None, Verdict]]
    ) -> None:
        tenant = delivery.message.tenant_id
        self._tenant_in_flight[tenant] += 1
        task = asyncio.create_task(self._guarded(delivery, work))
        # The tenant rides with the task in _running rather than in a closure per call.
        self._running[task] = tenant
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[Verdict]) -> None:
        tenant = self._running.pop(task)
        if self._tenant_in_flight[tenant] >= self._budget.max_per_tenant and self._budget.freed:
            # A receive waiting because this tenant held its share may take one more.
            self._budget.freed.set()
        self._tenant_in_flight[tenant] -= 1
        if self._tenant_in_flight[tenant] <= 0:
            del self._tenant_in_flight[tenant]
        self._slot_freed.set()

    async def _guarded(
        self, delivery: Delivery, work: Callable[[], Coroutine[None, None, Verdict]]
    ) -> Verdict:
        try:
            # Made here, in the task: a task cancelled before it ran leaves no coroutine
            # never awaited (its claim, if the receive wrote one, ends with its lease).
            return await work()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the message reappears; the job record is the truth
            log.warning(
                "worker.delivery_failed",
                job_id=delivery.message.job_id,
                **describe_exception(exc),
            )
            return Verdict.DEFERRED

    async def _wait_for_slot_or(self, stop: asyncio.Event) -> None:
        self._slot_freed.clear()
        waiters = [
            asyncio.create_task(self._slot_freed.wait()),
            asyncio.create_task(stop.wait()),
        ]
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()

    async def _drain(self) -> None:
        if not self._running:
            return
        log.info("worker.draining", in_flight=len(self._running), grace_seconds=self._grace_seconds)
        _done, pending = await asyncio.wait(set(self._running), timeout=self._grace_seconds)
        if pending:
            self._runner.release_all()
            _done, still = await asyncio.wait(
                pending, timeout=max(5.0, self._lease.heartbeat_seconds)
            )
            for task in still:
                task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*still, return_exceptions=True)


async def _wait_or(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()


async def _wait_any(events: tuple[asyncio.Event | None, ...], seconds: float) -> None:
    """Until one of ``events`` is set, or ``seconds`` have passed."""
    waiters = [asyncio.ensure_future(event.wait()) for event in events if event is not None]
    try:
        await asyncio.wait(waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()


def compose_worker(
    parts: WorkerParts,
    settings: WorkerOptions,
    *,
    timeouts: AttemptTimeouts,
    budgets: Mapping[str, CallBudget] | None = None,
    shared_limits: SharedLimits | None = None,
) -> Worker:
    """A worker made of its three parts: the attempt runner (calls under the providers'
    budgets, shared with other processes through ``shared_limits`` where the engine
    can), the delivery handler over it, and the receive loop over both."""
    limiters = Limiters(
        budgets or {},
        max_concurrency=settings.concurrency,
        shared=shared_limits,
        member=settings.worker_id,
    )
    runner = AttemptRunner(parts, lease=settings.lease, timeouts=timeouts, limiters=limiters)
    handler = DeliveryHandler(
        parts,
        runner=runner,
        settings=DeliverySettings(
            lease=settings.lease,
            retry=settings.retry,
            worker_id=settings.worker_id,
            max_receives=settings.max_receives,
            probe_schedule=settings.probe_schedule,
        ),
    )
    return Worker(parts, settings, runner=runner, handler=handler)
