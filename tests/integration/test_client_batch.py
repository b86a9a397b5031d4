"""Client.submit_many and AsyncClient.submit_many: per-item outcomes, a key for every
item, chunks of 1,000, and a retried batch that makes no second job."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from pydantic import ValidationError

import ferryman.client.async_client as async_client_module
import ferryman.client.retrying as retrying_module
from ferryman.cli.serving import app_deps
from ferryman.client import AsyncClient, BatchProblem, Client, ClientError, SubmitItem, Submitted
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from ferryman.wiring import Runtime

BASE_URL = "http://ferryman.test"


@pytest.fixture
async def batch_runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/results",
        receive_wait_seconds=0,
        tenant_rate_per_second=0,
    )
    async with open_runtime(settings) as runtime:
        yield runtime


@pytest.fixture
def no_retry_waits(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    sleeps: list[float] = []

    async def no_wait(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(async_client_module, "_sleep", no_wait)
    monkeypatch.setattr(retrying_module, "_monotonic", lambda: sum(sleeps))
    return sleeps


class LosesFirstAnswer(httpx.AsyncBaseTransport):
    """Delivers the first POST, then loses its answer as a dropped connection would."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.bodies: list[dict[str, Any]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST":
            self.bodies.append(json.loads(request.content))
            if len(self.bodies) == 1:
                await response.aread()
                raise httpx.ReadTimeout("answer lost", request=request)
        return response


async def test_outcomes_come_back_in_order_with_problems_typed(batch_runtime: Runtime) -> None:
    key = await batch_runtime.api_keys.create("acme")
    transport = httpx.ASGITransport(app=create_app(app_deps(batch_runtime)))
    async with AsyncClient(BASE_URL, key, transport=transport) as client:
        first = await client.submit_many(
            [
                {"task": "generate", "input": {"prompt": "one"}},
                SubmitItem(task="generate", input={"prompt": "two"}, idempotency_key="mine"),
                {"task": "nope", "input": {}},
            ]
        )
        again = await client.submit_many(
            [SubmitItem(task="generate", input={"prompt": "two"}, idempotency_key="mine")]
        )

    one, two, bad = first
    assert isinstance(one, Submitted)
    assert isinstance(two, Submitted)
    assert not one.replayed
    assert not two.replayed
    assert isinstance(bad, BatchProblem)
    assert (bad.status, bad.code) == (422, "invalid_request")
    assert bad.errors[0].loc[:3] == ["body", "jobs", 2]
    assert isinstance(again[0], Submitted)
    assert again[0].replayed
    assert again[0].job_id == two.job_id
    assert await batch_runtime.new_worker().run_until_idle() == 2


async def test_a_lost_answer_is_retried_and_makes_no_second_job(
    batch_runtime: Runtime, no_retry_waits: list[float]
) -> None:
    key = await batch_runtime.api_keys.create("acme")
    flaky = LosesFirstAnswer(httpx.ASGITransport(app=create_app(app_deps(batch_runtime))))
    async with AsyncClient(BASE_URL, key, transport=flaky) as client:
        outcomes = await client.submit_many(
            [{"task": "generate", "input": {"prompt": str(i)}} for i in range(3)]
        )
        page = await client.list()

    assert len(flaky.bodies) == 2
    assert flaky.bodies[0] == flaky.bodies[1]
    keys = [item["idempotency_key"] for item in flaky.bodies[0]["jobs"]]
    assert len(set(keys)) == 3
    assert all(isinstance(o, Submitted) and o.replayed for o in outcomes)
    assert sorted(j.job_id for j in page.data) == sorted(o.job_id for o in outcomes)  # type: ignore[union-attr]
    assert len(no_retry_waits) == 1


def test_large_lists_go_in_chunks_of_1000() -> None:
    sizes: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        jobs = json.loads(request.content)["jobs"]
        sizes.append(len(jobs))
        results = [
            {
                "job_id": f"gen_{item['input']['prompt']}",
                "status": "QUEUED",
                "created_at": "2026-11-30T14:23:12.123456Z",
                "correlation_id": "c",
                "replayed": False,
            }
            for item in jobs
        ]
        return httpx.Response(200, json={"results": results})

    with Client(BASE_URL, "k", transport=httpx.MockTransport(handler)) as client:
        outcomes = client.submit_many(
            {"task": "generate", "input": {"prompt": str(i)}} for i in range(2500)
        )

    assert sizes == [1000, 1000, 500]
    assert [o.job_id for o in outcomes] == [f"gen_{i}" for i in range(2500)]  # type: ignore[union-attr]


def test_a_refused_request_raises_and_a_short_answer_is_an_error() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        problem = {"type": "t", "title": "x", "status": 413, "detail": "d", "code": "too_many"}
        return httpx.Response(
            413, json=problem, headers={"content-type": "application/problem+json"}
        )

    def short(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"results": []})

    items = [{"task": "generate", "input": {"prompt": "p"}}]
    with Client(BASE_URL, "k", transport=httpx.MockTransport(refuse)) as client:
        with pytest.raises(ClientError) as refused:
            client.submit_many(items)
    assert refused.value.status == 413
    with Client(BASE_URL, "k", transport=httpx.MockTransport(short)) as client:
        with pytest.raises(ClientError, match="0 entries for 1 jobs"):
            client.submit_many(items)


def test_an_item_that_is_not_a_job_is_refused_before_sending() -> None:
    def never(request: httpx.Request) -> httpx.Response:
        raise AssertionError("nothing should be sent")

    with Client(BASE_URL, "k", transport=httpx.MockTransport(never)) as client:
        with pytest.raises(ValidationError):
            client.submit_many([{"task": "generate", "input": {}, "webhook": "x"}])
        with pytest.raises(ValidationError):
            client.submit_many([{"input": {}}])
        assert client.submit_many([]) == []
