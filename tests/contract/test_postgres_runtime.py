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


async def _one_job(runtime) -> tuple[str, int]:
    """Submit one job, run it; its id and the group commits the worker's writes took."""
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
        group = runtime.queue._db.group
        before = group.batches
        assert await runtime.new_worker().run_until_idle() == 1
        commits = group.batches - before
        done = (await client.get(f"/v1/generations/{job_id}")).json()
        assert done["status"] == str(JobStatus.SUCCEEDED)
        assert done["result"] is not None
    return job_id, commits


async def test_results_in_the_database_are_written_by_the_publish(postgres_scratch):
    """The claim, then the publish with its result and its ack: two commits, not three."""
    url = postgres_scratch()
    settings = Settings(database_url=url, results_url="db", postgres_pool_max_size=3)
    async with open_runtime(settings) as runtime:
        job_id, commits = await _one_job(runtime)
    assert commits == 2
    with psycopg.connect(url) as conn:
        [(ref,)] = conn.execute("SELECT result_ref FROM jobs WHERE job_id = %s", (job_id,))
        assert ref.startswith("db:")
        [(n,)] = conn.execute("SELECT count(*) FROM results WHERE key LIKE %s", (f"%{job_id}%",))
        assert n == 1


async def test_results_kept_as_files_are_put_before_the_publish(postgres_scratch, tmp_path):
    url = postgres_scratch()
    directory = tmp_path / "results"
    settings = Settings(
        database_url=url, results_url=f"file://{directory}", postgres_pool_max_size=3
    )
    async with open_runtime(settings) as runtime:
        job_id, commits = await _one_job(runtime)
    assert commits == 2  # the claim and the publish; the result went to a file
    assert any(path.is_file() for path in directory.rglob("*"))
    with psycopg.connect(url) as conn:
        [(ref,)] = conn.execute("SELECT result_ref FROM jobs WHERE job_id = %s", (job_id,))
        assert not ref.startswith("db:")
        assert conn.execute("SELECT count(*) FROM results").fetchone() == (0,)


async def test_a_publish_that_cannot_write_its_result_puts_it_first_then_publishes(
    postgres_scratch, monkeypatch
):
    """The store refusing the publish-with-result longer than a publish waits: the output
    already paid for is still kept (put on its own, as before) and published."""
    from ferryman.adapters.postgres import PostgresJobStore
    from ferryman.core.errors import StoreUnavailableError
    from ferryman.services import delivery

    refused = []

    async def unavailable(self, change, *, result, receipt):
        refused.append(result.key)
        raise StoreUnavailableError("the server went away")

    monkeypatch.setattr(PostgresJobStore, "apply_with_result", unavailable)
    monkeypatch.setattr(delivery, "PERSIST_RETRY_DELAYS_SECONDS", (0.0,))
    url = postgres_scratch()
    settings = Settings(database_url=url, results_url="db", postgres_pool_max_size=3)
    async with open_runtime(settings) as runtime:
        job_id, _ = await _one_job(runtime)
    assert len(refused) == 2  # the publish and its one retry
    with psycopg.connect(url) as conn:
        [(ref,)] = conn.execute("SELECT result_ref FROM jobs WHERE job_id = %s", (job_id,))
        [(key,)] = conn.execute("SELECT key FROM results")
        assert ref.startswith(f"db:{key};") and key == refused[0]
