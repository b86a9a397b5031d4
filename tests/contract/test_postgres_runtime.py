"""The whole service on PostgreSQL: FERRYMAN_DATABASE_URL=postgresql://... and results
in the database switch everything with no other change, and /readyz follows the
server while it refuses connections and after it is back."""

from __future__ import annotations

import asyncio
import time

import httpx
import psycopg
import pytest

from ferryman.config import Settings
from ferryman.core.job import JobStatus
from ferryman.http.app import AppDeps, create_app
from ferryman.wiring import open_runtime

pytestmark = pytest.mark.timeout(60)


def _app(runtime):
    return create_app(
        AppDeps(
            intake=runtime.intake,
            jobs=runtime.jobs,
            operations=runtime.operations,
            api_keys=runtime.api_keys,
            usage=runtime.usage,
            clock=runtime.clock,
            tasks=runtime.tasks,
        )
    )


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


async def test_a_job_runs_end_to_end_and_readyz_follows_the_server(postgres_scratch):
    url = postgres_scratch()
    dbname = url.rsplit("/", 1)[1]
    settings = Settings(database_url=url, results_url="db", postgres_pool_max_size=3)
    async with open_runtime(settings) as runtime:
        key = await runtime.api_keys.create("acme")
        transport = httpx.ASGITransport(app=_app(runtime))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers={"Authorization": f"Bearer {key}"}
        ) as client:
            submitted = await client.post(
                "/v1/generations", json={"task": "generate", "input": {"prompt": "Hello"}}
            )
            assert submitted.status_code == 202, submitted.text
            job_id = submitted.json()["job_id"]
            assert await runtime.new_worker().run_until_idle() == 1
            done = (await client.get(f"/v1/generations/{job_id}")).json()
            assert done["status"] == str(JobStatus.SUCCEEDED)
            assert done["result"] is not None
            assert (await client.get("/readyz")).status_code == 200

            with _admin(url) as admin:
                admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
                try:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                        (dbname,),
                    )
                    started = time.monotonic()
                    down = await client.get("/readyz")
                    assert down.status_code == 503
                    # Each check waits a bounded time for a connection: a load balancer
                    # hears "not ready" well before it gives up on the request.
                    assert time.monotonic() - started < 8
                    assert down.json()["checks"]["store"]["ok"] is False
                finally:
                    admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')

            deadline = time.monotonic() + 30
            while (await client.get("/readyz")).status_code != 200:
                assert time.monotonic() < deadline, "never ready again"
                await asyncio.sleep(0.2)
            again = (await client.get(f"/v1/generations/{job_id}")).json()
            assert again["status"] == str(JobStatus.SUCCEEDED)
