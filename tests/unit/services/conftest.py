"""A small world of in-memory adapters and the sim, for service tests on a FakeClock.

Engines are opened only through ``ferryman.engines.open_engine``: ``memory://`` for
``make_world`` (``outbox=True`` is ``EngineOptions(memory_outbox=True)``), a SQLite
file for ``sqlite_world``."""

from __future__ import annotations

import asyncio
import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.core.clock import FakeClock
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.engines import Engine, EngineOptions, open_engine
from ferryman.failpoints import Failpoints
from ferryman.observability.job_failpoints import FailpointObserver
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.attempt import attempt_timeouts
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.observers import Observers
from ferryman.services.operations import Operations
from ferryman.services.results import ResultWriter
from ferryman.services.sweeper import Sweeper
from ferryman.services.worker import Worker, compose_worker
from ferryman.services.worker_parts import WorkerOptions, WorkerParts
from ferryman.tasks import builtin_tasks
from ferryman.wiring import process_observers
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path

    from ferryman.core.job import Job
    from ferryman.ports.control import ControlStore
    from ferryman.ports.provider import ModelRequest, ModelResponse
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore


class CountingProvider:
    """The sim, counting invocations; optionally blocking until released."""

    def __init__(self, inner: SimulatedProvider, *, block: asyncio.Event | None = None) -> None:
        self._inner = inner
        self.block = block
        self.invocations = 0
        self.started = asyncio.Event()

    @property
    def name(self) -> str:
        return self._inner.name

    async def check(self) -> None:
        await self._inner.check()

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        self.invocations += 1
        self.started.set()
        if self.block is not None:
            await self.block.wait()
        return await self._inner.invoke(request, timeout_seconds=timeout_seconds)


@dataclass
class World:
    clock: FakeClock
    store: JobLedger
    queue: JobQueue
    results: ResultStore
    control: ControlStore
    provider: CountingProvider
    intake: Intake
    jobs: JobQueries
    operations: Operations
    retry: RetryPolicy
    lease: LeasePolicy
    max_receives: int = 10
    workers: list[Worker] = field(default_factory=list)
    # The engine the world runs on, for the ports no service above holds (webhook secrets).
    engine: Engine | None = None

    def worker(self, **overrides: Any) -> Worker:
        options: dict[str, Any] = {
            "store": self.store,
            "queue": self.queue,
            "results": ResultWriter(self.results, sleep=_no_sleep),
            "providers": [self.provider],
            "tasks": builtin_tasks(),
            "control": self.control,
            "clock": self.clock,
            "lease": self.lease,
            "retry": self.retry,
            "concurrency": 8,
            "provider_timeout_seconds": 5.0,
            "worker_id": f"w{len(self.workers) + 1}",
            "failpoints": Failpoints(),
            "shutdown_grace_seconds": 0.05,
            "receive_wait_seconds": 0.01,
            "max_receives": self.max_receives,
        }
        options.update(overrides)
        # A test names the providers the worker may call (each serving its own name),
        # or gives a whole catalog.
        providers = options.pop("providers")
        options.setdefault("catalog", ModelCatalog.serving_own_names(providers))
        observers = options.pop("observers", self.store.observers)
        worker = compose_test_worker(options, observers=observers)
        self.workers.append(worker)
        return worker

    def sweeper(self, **overrides: Any) -> Sweeper:
        options: dict[str, Any] = {
            "store": self.store,
            "ledger": self.store,
            "queue": self.queue,
            "clock": self.clock,
            "interval_seconds": 0.01,
            "stalled_after_seconds": 120.0,
        }
        options.update(overrides)
        return Sweeper(**options)

    async def submit(
        self,
        prompt: str = "hello there",
        *,
        tenant: str = "t1",
        key: str | None = None,
        simulate: dict[str, Any] | None = None,
        task: str = "generate",
    ) -> Job:
        job_input: dict[str, Any] = {"prompt": prompt} if task == "generate" else {"ticket": prompt}
        if simulate is not None:
            job_input["simulate"] = simulate
        submission = await self.intake.submit(
            tenant_id=tenant,
            request=SubmitRequest(task=task, input=job_input),
            idempotency_key=key,
        )
        return submission.job

    async def job(self, job_id: str) -> Job:
        job = await self.store.get(job_id)
        assert job is not None
        return job


@pytest.fixture
def make_world() -> Iterator[Callable[..., World]]:
    opened: list[AbstractAsyncContextManager[Engine]] = []

    def build(
        *,
        outbox: bool = False,
        block: asyncio.Event | None = None,
        retry: RetryPolicy | None = None,
        lease: LeasePolicy | None = None,
        max_receives: int = 10,
    ) -> World:
        clock = FakeClock()
        options = EngineOptions(max_receives=max_receives, memory_outbox=outbox)
        opening = open_engine("memory://", clock=clock, options=options)
        engine = _enter_at_once(opening)
        opened.append(opening)
        provider = CountingProvider(SimulatedProvider(sleep=_no_sleep), block=block)
        return _world(clock, engine, provider, retry=retry, lease=lease, max_receives=max_receives)

    yield build
    for opening in reversed(opened):
        _exit_at_once(opening)


def _enter_at_once(opening: AbstractAsyncContextManager[Engine]) -> Engine:
    """Enter an engine's ``async with`` from plain code: ``make_world`` is synchronous
    (hundreds of tests call it so), and opening the memory engine never suspends
    (adapters/memory/engine.py), so its coroutine finishes at its first step."""
    step = opening.__aenter__()
    try:
        step.send(None)
    except StopIteration as done:
        engine: Engine = done.value
        return engine
    step.close()
    raise AssertionError("opening this engine waits: use it in an async fixture")


def _exit_at_once(opening: AbstractAsyncContextManager[Engine]) -> None:
    step = opening.__aexit__(None, None, None)
    try:
        step.send(None)
    except StopIteration:
        return
    step.close()
    raise AssertionError("closing this engine waits: use it in an async fixture")


_PARTS = {f.name for f in dataclasses.fields(WorkerParts)}
_SETTINGS = {f.name for f in dataclasses.fields(WorkerOptions)}
_TIMEOUTS = {"attempt_timeout_seconds", "provider_timeouts"}


def compose_test_worker(options: dict[str, Any], *, observers: Observers) -> Worker:
    """A worker composed as wiring composes one, from options named as the settings
    they stand for (``failpoints`` joins the ledger's observers)."""
    options = dict(options)
    failpoints = options.pop("failpoints", None)
    if failpoints is not None:
        observers = observers.with_observer(FailpointObserver(failpoints))
    parts = WorkerParts(
        observers=observers, **{k: options.pop(k) for k in list(options) if k in _PARTS}
    )
    settings = WorkerOptions(**{k: options.pop(k) for k in list(options) if k in _SETTINGS})
    timeouts = attempt_timeouts(
        options.pop("provider_timeout_seconds"),
        **{k: options.pop(k) for k in list(options) if k in _TIMEOUTS},
    )
    return compose_worker(parts, settings, timeouts=timeouts, **options)


def _world(
    clock: FakeClock,
    engine: Engine,
    provider: CountingProvider,
    *,
    retry: RetryPolicy | None = None,
    lease: LeasePolicy | None = None,
    max_receives: int = 10,
) -> World:
    """A world around an open engine: its ports, the built-in tasks."""
    store = LedgerWithReads(engine.store, observers=process_observers())
    return World(
        clock=clock,
        store=store,
        queue=engine.queue,
        results=engine.results,
        control=engine.control,
        provider=provider,
        intake=Intake(
            store=store,
            ledger=store,
            queue=engine.queue,
            tasks=builtin_tasks(),
            control=engine.control,
            clock=clock,
            idempotency_retention_seconds=3600,
            catalog=ModelCatalog.serving_own_names([provider]),
            # Tests script the sim model (input.simulate); deployments default to off.
            sim_scripts=True,
        ),
        jobs=JobQueries(store=store, ledger=store, results=engine.results, clock=clock),
        operations=Operations(
            store=store, ledger=store, queue=engine.queue, control=engine.control, clock=clock
        ),
        retry=retry or RetryPolicy(initial_interval_seconds=1.0, maximum_interval_seconds=10.0),
        lease=lease or LeasePolicy(lease_seconds=60, visibility_timeout_seconds=60),
        max_receives=max_receives,
        engine=engine,
    )


@pytest.fixture
async def sqlite_world(tmp_path: Path) -> AsyncIterator[World]:
    """The world over the SQLite engine's jobs and queue (one file), for the worker's
    paths only that engine takes (its receive claims: ports/queue.py's ClaimsOnReceive).
    Results and control stay in memory, so the writer's commits are the job's own."""
    clock = FakeClock()
    url = f"sqlite:///{tmp_path / 'ferryman.db'}"
    options = EngineOptions(max_receives=10)
    async with (
        open_engine(url, clock=clock, options=options) as sqlite,
        open_engine("memory://", clock=clock, options=options) as memory,
    ):
        engine = dataclasses.replace(memory, store=sqlite.store, queue=sqlite.queue)
        yield _world(clock, engine, CountingProvider(SimulatedProvider(sleep=_no_sleep)))


async def _no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)


@pytest.fixture
def eventually() -> Callable[..., Any]:
    """``await eventually(condition, within_seconds=s)``: poll until ``await condition()`` holds."""
    return _eventually


async def _eventually(condition: Callable[[], Any], *, within_seconds: float = 10.0) -> None:
    interval = 0.01
    for _ in range(int(within_seconds / interval)):
        if await condition():
            return
        await asyncio.sleep(interval)
    raise AssertionError(f"not true within {within_seconds} s")
