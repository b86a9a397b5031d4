"""A small world of in-memory adapters and the sim, for service tests on a FakeClock."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.memory import (
    InMemoryControlStore,
    InMemoryJobQueue,
    InMemoryJobStore,
    InMemoryResultStore,
)
from ferryman.core.clock import FakeClock
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.failpoints import Failpoints
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.operations import Operations
from ferryman.services.results import ResultWriter
from ferryman.services.sweeper import Sweeper
from ferryman.services.worker import Worker
from ferryman.tasks import builtin_tasks
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from ferryman.core.job import Job
    from ferryman.ports.provider import ModelRequest, ModelResponse


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
    queue: InMemoryJobQueue
    results: InMemoryResultStore
    control: InMemoryControlStore
    provider: CountingProvider
    intake: Intake
    jobs: JobQueries
    operations: Operations
    retry: RetryPolicy
    lease: LeasePolicy
    max_receives: int = 10
    workers: list[Worker] = field(default_factory=list)

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
        worker = Worker(**options)
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
def make_world() -> Callable[..., World]:
    def build(
        *,
        outbox: bool = False,
        block: asyncio.Event | None = None,
        retry: RetryPolicy | None = None,
        lease: LeasePolicy | None = None,
        max_receives: int = 10,
    ) -> World:
        clock = FakeClock()
        queue = InMemoryJobQueue(clock=clock, max_receives=max_receives)
        store = LedgerWithReads(InMemoryJobStore(queue=None if outbox else queue))
        provider = CountingProvider(SimulatedProvider(sleep=_no_sleep), block=block)
        return _world(
            clock, store, queue, provider, retry=retry, lease=lease, max_receives=max_receives
        )

    return build


def _world(
    clock: FakeClock,
    store: JobLedger,
    queue: Any,
    provider: CountingProvider,
    *,
    retry: RetryPolicy | None = None,
    lease: LeasePolicy | None = None,
    max_receives: int = 10,
) -> World:
    """A world around the given engine: memory results and control, the built-in tasks."""
    results = InMemoryResultStore()
    control = InMemoryControlStore()
    return World(
        clock=clock,
        store=store,
        queue=queue,
        results=results,
        control=control,
        provider=provider,
        intake=Intake(
            store=store,
            ledger=store,
            queue=queue,
            tasks=builtin_tasks(),
            control=control,
            clock=clock,
            idempotency_retention_seconds=3600,
            catalog=ModelCatalog.serving_own_names([provider]),
            # Tests script the sim model (input.simulate); deployments default to off.
            sim_scripts=True,
        ),
        jobs=JobQueries(store=store, ledger=store, results=results, clock=clock),
        operations=Operations(store=store, ledger=store, queue=queue, control=control, clock=clock),
        retry=retry or RetryPolicy(initial_interval_seconds=1.0, maximum_interval_seconds=10.0),
        lease=lease or LeasePolicy(lease_seconds=60, visibility_timeout_seconds=60),
        max_receives=max_receives,
    )


@pytest.fixture
async def sqlite_world(tmp_path: Path) -> AsyncIterator[World]:
    """The world over the SQLite engine's jobs and queue (one file), for the worker's
    paths only that engine takes (its receive claims: ports/queue.py's ClaimsOnReceive)."""
    from ferryman.adapters.sqlite import SqliteDatabase, SqliteJobQueue, SqliteJobStore

    clock = FakeClock()
    db = await SqliteDatabase.open(tmp_path / "ferryman.db")
    try:
        queue = SqliteJobQueue(db, clock=clock, max_receives=10)
        store = LedgerWithReads(SqliteJobStore(db, clock=clock))
        yield _world(clock, store, queue, CountingProvider(SimulatedProvider(sleep=_no_sleep)))
    finally:
        await db.close()


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
