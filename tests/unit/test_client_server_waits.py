"""The clients' ``wait`` and ``result`` ask the server to wait (GET ...?wait=, in rounds
of at most 60 s until their own deadline), and poll as before against a server that
refuses the parameter (422) or ignores it. A mock transport, a clock moved by hand."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

import ferryman.client.async_client as async_module
import ferryman.client.calls as calls_module
import ferryman.client.sync_client as sync_module
from ferryman.client import AsyncClient, Client, ClientError, WaitTimeoutError

JOB_ID = "gen_01J0000000000000000000000A"


def job(status: str) -> dict[str, Any]:
    return {"job_id": JOB_ID, "status": status, "task": "generate", "result": {"text": "hi"}}


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The clients' monotonic clock, moved by hand (a server's wait moves it)."""
    now = [1000.0]
    for module in (calls_module, async_module, sync_module):
        monkeypatch.setattr(module, "_monotonic", lambda: now[0])

    async def no_async_sleep(seconds: float) -> None:
        now[0] += seconds

    def no_sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(async_module, "_sleep", no_async_sleep)
    monkeypatch.setattr(sync_module, "_sleep", no_sleep)
    return now


Handler = Callable[[httpx.Request], httpx.Response]


async def wait_both(handler: Handler, **kwargs: Any) -> list[dict[str, Any]]:
    """Run the wait with the sync and the async client; both must give the same."""
    outcomes = []
    with Client("http://t", "k", transport=httpx.MockTransport(handler)) as client:
        outcomes.append(client.wait(JOB_ID, **kwargs).model_dump())
    async with AsyncClient("http://t", "k", transport=httpx.MockTransport(handler)) as aclient:
        outcomes.append((await aclient.wait(JOB_ID, **kwargs)).model_dump())
    assert outcomes[0] == outcomes[1]
    return outcomes


async def test_a_server_that_waits_is_asked_once_with_a_read_timeout_beyond_its_wait(
    clock: list[float],
) -> None:
    asked: list[httpx.Request] = []

    def server(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        clock[0] += 3  # it finished three seconds into the wait
        return httpx.Response(200, json=job("SUCCEEDED"))

    await wait_both(server)

    assert len(asked) == 2  # one per client
    for request in asked:
        assert request.url.params["wait"] == "60.000"
        assert request.extensions["timeout"]["read"] == 70.0


async def test_a_long_wait_asks_in_rounds_until_its_own_deadline(clock: list[float]) -> None:
    waits: list[str] = []

    def server(request: httpx.Request) -> httpx.Response:
        waits.append(request.url.params["wait"])
        clock[0] += float(request.url.params["wait"])  # the server waited it out
        return httpx.Response(200, json=job("PROCESSING"))

    with (
        Client("http://t", "k", transport=httpx.MockTransport(server)) as client,
        pytest.raises(WaitTimeoutError),
    ):
        client.wait(JOB_ID, timeout=130)
    assert waits == ["60.000", "60.000", "10.000"]


async def test_result_uses_the_servers_wait(clock: list[float]) -> None:
    def server(request: httpx.Request) -> httpx.Response:
        assert request.url.params["wait"] == "60.000"
        return httpx.Response(200, json=job("SUCCEEDED"))

    async with AsyncClient("http://t", "k", transport=httpx.MockTransport(server)) as client:
        assert await client.result(JOB_ID) == {"text": "hi"}


async def test_an_older_server_refusing_the_wait_is_polled(clock: list[float]) -> None:
    asked: list[dict[str, str]] = []

    def older(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        if "wait" in request.url.params:
            problem = {
                "type": "about:blank",
                "title": "Invalid request",
                "status": 422,
                "detail": "unknown query parameter",
                "code": "invalid_request",
                "errors": [{"loc": ["query", "wait"], "msg": "not allowed"}],
            }
            return httpx.Response(422, json=problem)
        polls = sum(1 for params in asked if "wait" not in params)
        return httpx.Response(200, json=job("SUCCEEDED" if polls >= 3 else "QUEUED"))

    with Client("http://t", "k", transport=httpx.MockTransport(older)) as client:
        assert client.wait(JOB_ID).status == "SUCCEEDED"
    assert asked == [{"wait": "60.000"}, {}, {}, {}]


async def test_a_server_that_ignores_the_wait_is_polled_after_its_first_answer(
    clock: list[float],
) -> None:
    asked: list[dict[str, str]] = []

    def ignoring(request: httpx.Request) -> httpx.Response:
        asked.append(dict(request.url.params))
        return httpx.Response(200, json=job("SUCCEEDED" if len(asked) >= 3 else "QUEUED"))

    async with AsyncClient("http://t", "k", transport=httpx.MockTransport(ignoring)) as client:
        assert (await client.wait(JOB_ID)).status == "SUCCEEDED"
    assert asked == [{"wait": "60.000"}, {}, {}]


async def test_another_422_is_the_error_it_was(clock: list[float]) -> None:
    def server(request: httpx.Request) -> httpx.Response:
        problem = {"status": 422, "code": "invalid_request", "errors": [{"loc": ["path"]}]}
        return httpx.Response(422, json=problem)

    with Client("http://t", "k", transport=httpx.MockTransport(server)) as client:
        with pytest.raises(ClientError) as caught:
            client.wait(JOB_ID)
    assert caught.value.status == 422
