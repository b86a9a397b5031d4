"""What many processes on one PostgreSQL share. A "process" here is its own runtime with
its own connection pool, caches and limiters, so nothing passes between them but the
database; the worker that pauses must reach is a real OS process. Revoked keys and intake pauses take effect on the next request
everywhere; a workers pause within the worker's look interval (PAUSE_CHECK_SECONDS);
a tenant's API budget is one budget however many API processes serve it."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx
import pytest

from ferryman.adapters.postgres import PostgresDatabase, PostgresSharedLimits
from ferryman.config import Settings
from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.aimd import AimdWindow
from ferryman.core.job import JobStatus
from ferryman.core.ratelimit import TokenBucket
from ferryman.http.app import AppDeps, create_app
from ferryman.ports.control import Switch
from ferryman.services.pauses import PAUSES_CACHE_SECONDS
from ferryman.services.provider_share import LIVE_AFTER_SECONDS, PerMinute, ProviderShareSync
from ferryman.services.worker import PAUSE_CHECK_SECONDS
from ferryman.wiring import open_runtime

pytestmark = pytest.mark.timeout(60)

SUBMIT = {"task": "generate", "input": {"prompt": "Hello"}}


def _client(runtime, key: str, *, rate: float = 0.0, burst: int = 20) -> httpx.AsyncClient:
    app = create_app(
        AppDeps(
            intake=runtime.intake,
            jobs=runtime.jobs,
            operations=runtime.operations,
            api_keys=runtime.api_keys,
            usage=runtime.usage,
            clock=runtime.clock,
            tasks=runtime.tasks,
            tenant_rate_per_second=rate,
            tenant_burst=burst,
            shared_limits=runtime.shared_limits,
        )
    )
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://test",
        headers={"Authorization": f"Bearer {key}"},
    )


async def _two_runtimes(stack: AsyncExitStack, url: str):
    settings = Settings(database_url=url, results_url="db", postgres_pool_max_size=3)
    one = await stack.enter_async_context(open_runtime(settings))
    two = await stack.enter_async_context(open_runtime(settings))
    return one, two


async def test_a_key_revoked_in_one_process_is_refused_by_another_at_once(postgres_scratch):
    async with AsyncExitStack() as stack:
        one, two = await _two_runtimes(stack, postgres_scratch())
        key = await one.api_keys.create("acme")
        client = await stack.enter_async_context(_client(two, key))
        assert (await client.get("/v1/generations")).status_code == 200

        key_id = (await one.api_keys.list_keys(tenant_id="acme"))[0].key_id
        await one.api_keys.revoke(key_id, actor="test")

        assert (await client.get("/v1/generations")).status_code == 401


async def test_an_intake_pause_in_one_process_refuses_submissions_in_another(postgres_scratch):
    async with AsyncExitStack() as stack:
        one, two = await _two_runtimes(stack, postgres_scratch())
        client = await stack.enter_async_context(_client(two, await one.api_keys.create("acme")))

        await one.operations.set_paused(Switch.INTAKE, True, actor="test")
        paused = await client.post("/v1/generations", json=SUBMIT)
        await one.operations.set_paused(Switch.INTAKE, False, actor="test")
        resumed = await client.post("/v1/generations", json=SUBMIT)

        assert paused.status_code == 503
        assert resumed.status_code == 202


async def test_pauses_reach_a_worker_process_within_a_second(postgres_scratch, worker_process):
    """A worker in another OS process stops receiving within PAUSE_CHECK_SECONDS of a
    workers pause, starts again after the resume, and leaves a paused provider's job
    alone within the second it trusts its last look (PAUSES_CACHE_SECONDS)."""
    url = postgres_scratch()
    settings = Settings(database_url=url, results_url="db", postgres_pool_max_size=3)
    async with open_runtime(settings) as one:
        client = _client(one, await one.api_keys.create("acme"))
        async with client:
            worker_process(url, worker_concurrency="2")
            first = (await client.post("/v1/generations", json=SUBMIT)).json()["job_id"]
            assert await _status(client, first, JobStatus.SUCCEEDED) == JobStatus.SUCCEEDED

            await one.operations.set_paused(Switch.WORKERS, True, actor="test")
            await asyncio.sleep(PAUSE_CHECK_SECONDS + 0.5)  # by then the worker has looked
            held = (await client.post("/v1/generations", json=SUBMIT)).json()["job_id"]
            await asyncio.sleep(PAUSE_CHECK_SECONDS + 0.5)
            while_paused = (await client.get(f"/v1/generations/{held}")).json()["status"]
            await one.operations.set_paused(Switch.WORKERS, False, actor="test")
            after_resume = await _status(client, held, JobStatus.SUCCEEDED)

            await one.operations.set_provider_paused("sim", True, actor="test")
            await asyncio.sleep(PAUSES_CACHE_SECONDS + 0.5)
            for_paused = (await client.post("/v1/generations", json=SUBMIT)).json()["job_id"]
            await asyncio.sleep(PAUSE_CHECK_SECONDS + 0.5)
            provider_paused = (await client.get(f"/v1/generations/{for_paused}")).json()

    assert while_paused == JobStatus.QUEUED
    assert after_resume == JobStatus.SUCCEEDED
    assert provider_paused["status"] != JobStatus.SUCCEEDED


async def _status(client: httpx.AsyncClient, job_id: str, wanted: JobStatus) -> str:
    """The job's status once it is ``wanted``, or its last within ten seconds."""
    status = ""
    for _ in range(100):
        status = (await client.get(f"/v1/generations/{job_id}")).json()["status"]
        if status == wanted:
            break
        await asyncio.sleep(0.1)
    return status


async def test_two_api_processes_share_one_tenant_budget(postgres_scratch):
    async with AsyncExitStack() as stack:
        one, two = await _two_runtimes(stack, postgres_scratch())
        key = await one.api_keys.create("acme")
        # A slow refill, so the test's own duration adds no token: the burst is all.
        clients = [
            await stack.enter_async_context(_client(runtime, key, rate=0.01, burst=6))
            for runtime in (one, two)
        ]

        codes = [
            (await clients[i % 2].post("/v1/generations", json=SUBMIT)).status_code
            for i in range(12)
        ]

        assert codes.count(202) == 6
        assert codes.count(429) == 6
        assert codes[:6] == [202] * 6  # alternating processes, one bucket


async def test_concurrent_leases_from_two_pools_never_grant_more_than_the_bucket(
    postgres_scratch,
):
    url = postgres_scratch()
    async with AsyncExitStack() as stack:
        pools = [
            await stack.enter_async_context(_opened(url)),
            await stack.enter_async_context(_opened(url)),
        ]
        limits = [PostgresSharedLimits(db) for db in pools]

        async def lease(i: int, now: float) -> int:
            got = await limits[i % 2].lease(
                "submit:acme", rate_per_second=10.0, burst=50, want=3, now=now
            )
            return got.granted

        at_once = await asyncio.gather(*(lease(i, 1000.0) for i in range(40)))
        # Two seconds later: 20 tokens refilled, whoever asks.
        later = await asyncio.gather(*(lease(i, 1002.0) for i in range(40)))
        # A clock stepping back mints nothing.
        earlier = await lease(0, 900.0)

        assert sum(at_once) == 50
        assert sum(later) == 20
        assert earlier == 0


class _opened:
    """A PostgresDatabase as an async context manager (one pool: one process)."""

    def __init__(self, url: str) -> None:
        self._url = url

    async def __aenter__(self) -> PostgresDatabase:
        self._db = await PostgresDatabase.open(self._url, min_size=1, max_size=4)
        return self._db

    async def __aexit__(self, *exc: object) -> None:
        await self._db.close()


class _Wall:
    """A wall clock the test moves: heartbeats are compared in wall-clock seconds."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _sync(db, member: str, wall: _Wall, per_minute: float = 600.0):
    window = AimdWindow(maximum=64.0, start=8.0)
    learned = AdaptiveRate()
    bucket = TokenBucket(per_minute / 60.0, burst=10)
    sync = ProviderShareSync(
        PostgresSharedLimits(db),
        provider="openai",
        model="gpt-x",
        member=member,
        window=window,
        learned=learned,
        budgets=(PerMinute(bucket, per_minute),),
        wall_clock=wall,
    )
    return sync, window, learned, bucket


async def test_two_limiters_on_one_database_converge_to_one_window_and_rate(postgres_scratch):
    url = postgres_scratch()
    wall = _Wall()
    async with AsyncExitStack() as stack:
        dbs = [await stack.enter_async_context(_opened(url)) for _ in range(2)]
        one, w1, r1, b1 = _sync(dbs[0], "worker-1", wall)
        two, w2, r2, b2 = _sync(dbs[1], "worker-2", wall)

        # Both join, each bringing its starting window: each opens at its start.
        await one.report(0.0)
        await two.report(0.0)
        await one.report(0.1)
        assert (w1.limit, w2.limit) == (8.0, 8.0)
        assert (one.members, two.members) == (2, 2)
        # Each process's share of a per-minute budget configured for all of them.
        assert b1.rate_per_second == b2.rate_per_second == pytest.approx(5.0)

        # One grows its share by 4 (slow start): the cluster adds it, both get half.
        for _ in range(4):
            w1.on_success()
        await one.report(1.0)
        await two.report(1.0)
        assert (w1.limit, w2.limit) == (10.0, 10.0)

        # One overload throttles both, admitted under epoch 0: the cluster halves once.
        for rate in (r1, r2):
            for _ in range(20):
                rate.admitted(2.0)
            assert rate.on_throttle(2.0, 0)
        w1.on_throttle(0)
        w2.on_throttle(0)
        await one.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
        await two.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
        await one.report(3.5)
        assert (one.epoch, two.epoch) == (1, 1)
        assert (w1.limit, w2.limit) == (5.0, 5.0)
        # The first learned rate is the first reporter's (19 of its 20 calls accepted,
        # less 15%) times the processes; each paces at half of it.
        assert r1.rate == r2.rate
        assert r1.rate is not None
        assert r1.rate * 2 == pytest.approx(19 * 0.85 * 2)

        # worker-2 dies: once it has been silent LIVE_AFTER_SECONDS, worker-1 takes
        # the whole window and budget.
        for _ in range(2):  # worker-1 keeps reporting; worker-2 says nothing
            wall.now += LIVE_AFTER_SECONDS / 2 + 0.5
            await one.report(10.0)
        assert one.members == 1
        assert w1.limit == 10.0
        assert b1.rate_per_second == pytest.approx(10.0)


async def test_a_throttle_under_an_old_epoch_does_not_narrow_the_cluster_again(postgres_scratch):
    url = postgres_scratch()
    wall = _Wall()
    async with AsyncExitStack() as stack:
        db = await stack.enter_async_context(_opened(url))
        one, w1, _, _ = _sync(db, "worker-1", wall)
        await one.report(0.0)
        await one.after_call(1.0, admitted_epoch=0, narrowed=True, lowered=False)
        await one.after_call(1.1, admitted_epoch=0, narrowed=True, lowered=False)

        assert one.epoch == 1
        assert w1.limit == 4.0  # 8 halved once, not twice
