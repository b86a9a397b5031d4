"""ferryman.AsyncClient against the real app (wiring over SQLite in tmp_path, ASGI)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import httpx
import pytest

from ferryman.cli.serving import app_deps
from ferryman.client import AsyncClient, ClientError, JobStatus, WaitTimeoutError
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from ferryman.wiring import Runtime

BASE_URL = "http://ferryman.test"


@pytest.fixture
async def client_runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/results",
        receive_wait_seconds=0,
        tenant_rate_per_second=0,
    )
    async with open_runtime(settings) as runtime:
        yield runtime


@pytest.fixture
async def client_for(client_runtime: Runtime) -> AsyncIterator[AsyncClient]:
    key = await client_runtime.api_keys.create("acme")
    transport = httpx.ASGITransport(app=create_app(app_deps(client_runtime)))
    async with AsyncClient(BASE_URL, key, transport=transport) as client:
        yield client


async def test_submit_then_wait_returns_the_result(
    client_for: AsyncClient, client_runtime: Runtime
) -> None:
    job = await client_for.submit("generate", {"prompt": "hello there"})
    assert job.status is JobStatus.QUEUED
    assert job.job_id.startswith("gen_")
    assert await client_runtime.new_worker().run_until_idle() == 1

    done = await client_for.wait(job.job_id, timeout_seconds=5)
    assert done.status == "SUCCEEDED"
    assert "hello there" in done.result["text"]

    history = await client_for.events(job.job_id)
    assert [a.outcome for a in history.attempts] == ["succeeded"]


async def test_the_same_idempotency_key_gives_the_same_job(client_for: AsyncClient) -> None:
    first = await client_for.submit("generate", {"prompt": "a"}, idempotency_key="k-1")
    again = await client_for.submit("generate", {"prompt": "a"}, idempotency_key="k-1")
    assert again.job_id == first.job_id
    page = await client_for.list()
    assert [j.job_id for j in page.data] == [first.job_id]


async def test_without_a_key_each_submit_is_a_new_job(client_for: AsyncClient) -> None:
    first = await client_for.submit("generate", {"prompt": "a"})
    second = await client_for.submit("generate", {"prompt": "a"})
    assert first.job_id != second.job_id


async def test_a_reused_key_with_another_request_raises_the_problem(
    client_for: AsyncClient,
) -> None:
    await client_for.submit("generate", {"prompt": "a"}, idempotency_key="k-2")
    with pytest.raises(ClientError) as caught:
        await client_for.submit("generate", {"prompt": "b"}, idempotency_key="k-2")
    assert caught.value.status == 422
    assert caught.value.code == "idempotency_key_mismatch"
    assert caught.value.title


async def test_an_unknown_job_is_a_404_client_error(client_for: AsyncClient) -> None:
    with pytest.raises(ClientError) as caught:
        await client_for.get("gen_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert caught.value.status == 404
    assert caught.value.code == "not_found"


async def test_invalid_input_is_refused_before_anything_is_stored(client_for: AsyncClient) -> None:
    with pytest.raises(ClientError) as caught:
        await client_for.submit("generate", {"no_prompt": 1})
    assert caught.value.status == 422
    assert caught.value.code == "invalid_request"
    assert (await client_for.list()).data == []


async def test_cancel_a_queued_job(client_for: AsyncClient) -> None:
    job = await client_for.submit("generate", {"prompt": "a"})
    cancelled = await client_for.cancel(job.job_id)
    assert cancelled.status == "CANCELLED"
    with pytest.raises(ClientError) as caught:
        await client_for.cancel(job.job_id)
    assert caught.value.status == 409
    assert caught.value.code == "already_terminal"


async def test_list_filters_by_status(client_for: AsyncClient) -> None:
    kept = await client_for.submit("generate", {"prompt": "a"})
    dropped = await client_for.submit("generate", {"prompt": "b"})
    await client_for.cancel(dropped.job_id)
    page = await client_for.list(status="QUEUED", limit=10)
    assert [j.job_id for j in page.data] == [kept.job_id]


async def test_wait_gives_up_after_its_timeout(client_for: AsyncClient) -> None:
    job = await client_for.submit("generate", {"prompt": "a"})  # no worker runs
    with pytest.raises(WaitTimeoutError) as caught:
        await client_for.wait(job.job_id, timeout_seconds=0.05, initial_interval=0.01)
    assert caught.value.job.status == "QUEUED"


async def test_a_wrong_api_key_is_a_401(client_runtime: Runtime) -> None:
    transport = httpx.ASGITransport(app=create_app(app_deps(client_runtime)))
    async with AsyncClient(BASE_URL, "fm_nope", transport=transport) as client:
        with pytest.raises(ClientError) as caught:
            await client.get("gen_x")
    assert caught.value.status == 401
