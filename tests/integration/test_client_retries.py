"""The client's retries: one Idempotency-Key per submit, so a retry never makes a second job."""

from __future__ import annotations

import email.utils
import time
from typing import TYPE_CHECKING

import httpx
import pytest

import ferryman.client.async_client as async_client_module
import ferryman.client.retrying as retrying_module
import ferryman.client.sync_client as sync_client_module
from ferryman.cli.serving import app_deps
from ferryman.client import (
    DEFAULT_RETRY_BUDGET_SECONDS,
    AsyncClient,
    Client,
    ClientError,
    RetryNotice,
    UnreachableError,
    retry_after_seconds,
)
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

BASE_URL = "http://ferryman.test"
JOB = {
    "job_id": "gen_1",
    "status": "QUEUED",
    "created_at": "2026-11-30T14:23:12.123456Z",
    "correlation_id": "c",
}


@pytest.fixture
def retry_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Record the client's waits instead of waiting; its budget clock moves by them."""
    sleeps: list[float] = []

    async def no_wait(seconds: float) -> None:
        sleeps.append(seconds)

    monkeypatch.setattr(async_client_module, "_sleep", no_wait)
    monkeypatch.setattr(retrying_module, "_monotonic", lambda: sum(sleeps))
    return sleeps


class LosesFirstPostAnswer(httpx.AsyncBaseTransport):
    """Delivers the first POST to the server, then loses the answer, as a dropped
    connection would: the server stored the job, the caller never heard."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.posts: list[httpx.Request] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST":
            self.posts.append(request)
            if len(self.posts) == 1:
                await response.aread()
                raise httpx.ReadTimeout("answer lost", request=request)
        return response


async def test_a_lost_answer_is_retried_with_the_same_key_and_one_job_exists(
    tmp_path: Path, retry_sleeps: list[float]
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/f.db",
        results_url=f"file://{tmp_path}/r",
        tenant_rate_per_second=0,
    )
    async with open_runtime(settings) as runtime:
        key = await runtime.api_keys.create("acme")
        flaky = LosesFirstPostAnswer(httpx.ASGITransport(app=create_app(app_deps(runtime))))
        async with AsyncClient(BASE_URL, key, transport=flaky) as client:
            job = await client.submit("generate", {"prompt": "once"})
            page = await client.list()

    assert len(flaky.posts) == 2
    keys = {r.headers["Idempotency-Key"] for r in flaky.posts}
    assert len(keys) == 1
    assert [j.job_id for j in page.data] == [job.job_id]
    assert len(retry_sleeps) == 1


def scripted(
    answers: list[Callable[[httpx.Request], httpx.Response]],
) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return answers[min(len(seen), len(answers)) - 1](request)

    return httpx.MockTransport(handler), seen


def status(code: int, **headers: str) -> Callable[[httpx.Request], httpx.Response]:
    def answer(request: httpx.Request) -> httpx.Response:
        body = {"type": "about:blank", "title": "Busy", "status": code, "code": f"c{code}"}
        return httpx.Response(code, json=body, headers=headers)

    return answer


def accepted(request: httpx.Request) -> httpx.Response:
    return httpx.Response(202, json=JOB)


def refuse_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


def time_out_reading(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadTimeout("slow", request=request)


async def test_server_errors_are_retried_with_one_key(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([status(503), status(500), accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        job = await client.submit("generate", {"prompt": "x"}, idempotency_key="mine")
    assert job.api_json == JOB
    assert [r.headers["Idempotency-Key"] for r in seen] == ["mine"] * 3
    assert len(retry_sleeps) == 2


async def test_a_generated_key_is_a_uuid_kept_across_retries(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([refuse_connection, accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        await client.submit("generate", {"prompt": "x"})
    keys = [r.headers["Idempotency-Key"] for r in seen]
    assert len(keys) == 2
    assert keys[0] == keys[1]
    assert len(keys[0]) == 36


async def test_retry_after_is_honoured(retry_sleeps: list[float]) -> None:
    transport, _ = scripted([status(429, **{"Retry-After": "7"}), accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        await client.submit("generate", {"prompt": "x"})
    assert retry_sleeps[0] >= 7


async def test_backoff_grows_and_is_capped(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([status(502)])
    async with AsyncClient(
        BASE_URL,
        "k",
        transport=transport,
        max_retries=6,
        backoff_initial_seconds=1,
        backoff_max_seconds=4,
    ) as client:
        with pytest.raises(ClientError) as caught:
            await client.get("gen_1")
    assert caught.value.status == 502
    assert len(seen) == 7
    assert len(retry_sleeps) == 6
    assert all(0 <= s <= 4 for s in retry_sleeps)


async def test_client_errors_are_not_retried_and_carry_the_problem(
    retry_sleeps: list[float],
) -> None:
    def problem(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            422,
            json={
                "type": "about:blank",
                "title": "Invalid request",
                "status": 422,
                "detail": "input.prompt: field required",
                "code": "invalid_request",
            },
            headers={"Content-Type": "application/problem+json"},
        )

    transport, seen = scripted([problem])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        with pytest.raises(ClientError) as caught:
            await client.submit("generate", {})
    assert len(seen) == 1
    assert retry_sleeps == []
    error = caught.value
    assert (error.status, error.code, error.title) == (422, "invalid_request", "Invalid request")
    assert error.detail == "input.prompt: field required"
    assert error.problem["type"] == "about:blank"


async def test_an_unreachable_server_ends_in_a_client_error(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([refuse_connection])
    async with AsyncClient(BASE_URL, "k", transport=transport, max_retries=2) as client:
        with pytest.raises(ClientError) as caught:
            await client.submit("generate", {"prompt": "x"})
    assert caught.value.code == "unreachable"
    assert caught.value.status is None
    assert len(seen) == 3


async def test_cancel_is_not_retried_when_the_server_may_have_acted(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([time_out_reading, accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        with pytest.raises(ClientError):
            await client.cancel("gen_1")
    assert len(seen) == 1


async def test_cancel_is_retried_when_the_request_never_arrived(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([refuse_connection, status(503), accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        await client.cancel("gen_1")
    assert len(seen) == 3


async def test_the_api_key_is_sent_as_a_bearer_token() -> None:
    transport, seen = scripted([accepted])
    async with AsyncClient(BASE_URL, "secret-key", transport=transport) as client:
        await client.get("gen_1")
    assert seen[0].headers["Authorization"] == "Bearer secret-key"


async def test_wait_polls_with_backoff_until_terminal(retry_sleeps: list[float]) -> None:
    states = iter(["QUEUED", "PROCESSING", "PROCESSING", "SUCCEEDED"])

    def job(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**JOB, "status": next(states)})

    transport, seen = scripted([job])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        done = await client.wait("gen_1", initial_interval=1, max_interval=2)
    assert done.status == "SUCCEEDED"
    assert len(seen) == 4
    assert retry_sleeps == [1, 1.5, 2]


def test_retry_after_reads_seconds_and_http_dates() -> None:
    def with_header(value: str) -> httpx.Response:
        return httpx.Response(429, headers={"Retry-After": value})

    assert retry_after_seconds(with_header("3")) == 3
    later = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= (retry_after_seconds(with_header(later)) or 0) <= 31
    assert retry_after_seconds(with_header("whenever")) is None
    assert retry_after_seconds(httpx.Response(429)) is None


# --- the time budget (an API restart must not lose a submission) ----------------------


def refused_for(seconds: float, sleeps: list[float]) -> Callable[[httpx.Request], httpx.Response]:
    """Connection refused until the (virtual) clock reaches ``seconds``, then accepted."""

    def answer(request: httpx.Request) -> httpx.Response:
        if sum(sleeps) < seconds:
            return refuse_connection(request)
        return accepted(request)

    return answer


async def test_the_default_budget_rides_out_a_restart_of_tens_of_seconds(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([refused_for(40, retry_sleeps)])
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        job = await client.submit("generate", {"prompt": "x"})
    assert job.api_json == JOB
    assert DEFAULT_RETRY_BUDGET_SECONDS >= 40
    assert len({r.headers["Idempotency-Key"] for r in seen}) == 1  # so at most one job


async def test_retries_stop_when_the_time_budget_is_spent(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([refuse_connection])
    async with AsyncClient(BASE_URL, "k", transport=transport, retry_budget_seconds=30) as client:
        with pytest.raises(ClientError) as caught:
            await client.submit("generate", {"prompt": "x"})
    assert caught.value.code == "unreachable"
    assert sum(retry_sleeps) == pytest.approx(30)  # the last wait is cut to the budget
    assert len(seen) == len(retry_sleeps) + 1


async def test_a_zero_budget_never_retries(retry_sleeps: list[float]) -> None:
    transport, seen = scripted([refuse_connection])
    async with AsyncClient(BASE_URL, "k", transport=transport, retry_budget_seconds=0) as client:
        with pytest.raises(ClientError):
            await client.submit("generate", {"prompt": "x"})
    assert (len(seen), retry_sleeps) == (1, [])


async def test_a_retry_after_beyond_the_budget_ends_the_retries_at_once(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([status(429, **{"Retry-After": "50"}), accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport, retry_budget_seconds=20) as client:
        with pytest.raises(ClientError) as caught:
            await client.submit("generate", {"prompt": "x"})
    assert caught.value.status == 429
    assert (len(seen), retry_sleeps) == (1, [])


async def test_every_retry_is_reported_before_its_wait(retry_sleeps: list[float]) -> None:
    notices: list[tuple[RetryNotice, int]] = []
    transport, _ = scripted([refuse_connection, status(503), accepted])
    async with AsyncClient(
        BASE_URL,
        "k",
        transport=transport,
        retry_budget_seconds=45,
        on_retry=lambda notice: notices.append((notice, len(retry_sleeps))),
    ) as client:
        await client.submit("generate", {"prompt": "x"})

    (unreachable, waited_before_first), (busy, waited_before_second) = notices
    assert (waited_before_first, waited_before_second) == (0, 1)  # told before waiting
    assert unreachable.unreachable
    assert (unreachable.error, unreachable.status, unreachable.retry) == ("ConnectError", None, 1)
    assert (unreachable.method, unreachable.path) == ("POST", "/v1/generations")
    assert unreachable.base_url == BASE_URL
    assert unreachable.budget_seconds == 45
    assert unreachable.delay_seconds == retry_sleeps[0]
    assert not busy.unreachable
    assert (busy.status, busy.retry) == (503, 2)
    assert busy.elapsed_seconds == pytest.approx(retry_sleeps[0])


async def test_wait_shows_each_poll(retry_sleeps: list[float]) -> None:
    states = iter(["QUEUED", "PROCESSING", "SUCCEEDED"])

    def job(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**JOB, "status": next(states)})

    transport, _ = scripted([job])
    seen: list[str] = []
    async with AsyncClient(BASE_URL, "k", transport=transport) as client:
        await client.wait("gen_1", on_poll=lambda j: seen.append(j.status))
    assert seen == ["QUEUED", "PROCESSING", "SUCCEEDED"]


# --- a server never reached (the CLI's choice) ----------------------------------------


async def test_without_waiting_for_the_server_a_first_refusal_fails_at_once(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([refuse_connection, accepted])
    async with AsyncClient(BASE_URL, "k", transport=transport, wait_for_server=False) as client:
        with pytest.raises(UnreachableError) as caught:
            await client.submit("generate", {"prompt": "x"})
    assert (len(seen), retry_sleeps) == (1, [])
    assert caught.value.url == BASE_URL
    assert caught.value.reason == "ConnectError"
    assert caught.value.code == "unreachable"


async def test_once_the_server_answered_a_lost_connection_is_retried(
    retry_sleeps: list[float],
) -> None:
    transport, seen = scripted([accepted, refuse_connection, refuse_connection, accepted])
    notices: list[RetryNotice] = []
    async with AsyncClient(
        BASE_URL, "k", transport=transport, wait_for_server=False, on_retry=notices.append
    ) as client:
        await client.get("gen_1")
        job = await client.get("gen_1")  # the API restarts meanwhile
    assert job.job_id == "gen_1"
    assert len(seen) == 4
    assert [n.unreachable for n in notices] == [True, True]


# --- the sync client follows the same rules --------------------------------------------


@pytest.fixture
def sync_sleeps(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    sleeps: list[float] = []
    monkeypatch.setattr(sync_client_module, "_sleep", sleeps.append)
    monkeypatch.setattr(retrying_module, "_monotonic", lambda: sum(sleeps))
    return sleeps


def test_the_sync_client_retries_with_one_key(sync_sleeps: list[float]) -> None:
    transport, seen = scripted([refuse_connection, status(503), accepted])
    with Client(BASE_URL, "k", transport=transport) as client:
        job = client.submit("generate", {"prompt": "x"})
    assert job.api_json == JOB
    assert len({r.headers["Idempotency-Key"] for r in seen}) == 1
    assert len(sync_sleeps) == 2


def test_the_sync_client_does_not_retry_a_cancel_the_server_may_have_seen(
    sync_sleeps: list[float],
) -> None:
    transport, seen = scripted([time_out_reading, accepted])
    with Client(BASE_URL, "k", transport=transport) as client, pytest.raises(UnreachableError):
        client.cancel("gen_1")
    assert len(seen) == 1


def test_the_sync_client_fails_at_once_when_it_never_reached_the_server(
    sync_sleeps: list[float],
) -> None:
    transport, seen = scripted([refuse_connection])
    with (
        Client(BASE_URL, "k", transport=transport, wait_for_server=False) as client,
        pytest.raises(UnreachableError),
    ):
        client.list()
    assert (len(seen), sync_sleeps) == (1, [])


def test_the_sync_client_waits_with_backoff(sync_sleeps: list[float]) -> None:
    states = iter(["QUEUED", "PROCESSING", "SUCCEEDED"])

    def job(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={**JOB, "status": next(states), "result": {"text": "t"}})

    transport, _ = scripted([job])
    with Client(BASE_URL, "k", transport=transport) as client:
        assert client.result("gen_1") == {"text": "t"}
    assert sync_sleeps == [0.2, pytest.approx(0.3)]


def test_a_negative_budget_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_budget_seconds"):
        Client(BASE_URL, "k", retry_budget_seconds=-1)
