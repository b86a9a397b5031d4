"""What many processes on one PostgreSQL share. A "process" here is its own runtime with
its own connection pool, caches and limiters, so nothing passes between them but the
database; the worker that pauses must reach is a real OS process. Revoked keys and intake pauses take effect on the next request
everywhere; a workers pause within the worker's look interval (PAUSE_CHECK_SECONDS);
a tenant's API budget is one budget however many API processes serve it. The shared
limits themselves hold on every engine that shares them: tests/contract/test_shared_limits.py."""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack

import httpx
import pytest

from ferryman.config import Settings
from ferryman.core.job import JobStatus
from ferryman.http.app import AppDeps, create_app
from ferryman.ports.control import Switch
from ferryman.services.pauses import PAUSES_CACHE_SECONDS
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
