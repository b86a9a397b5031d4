"""Waiting without polling over HTTP: GET ...?wait= and the event stream of a job.

Each test waits on conditions (a wait is held by the watcher, a worker ran), never on
elapsed time."""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.services.jobs import JobQueries
from ferryman.services.watch import JobWatcher

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck


@pytest.fixture
def watcher(http_stack: HttpStack) -> JobWatcher:
    return JobWatcher(store=http_stack.store)


@pytest.fixture
def client(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    watcher: JobWatcher,
) -> httpx.AsyncClient:
    jobs = JobQueries(
        store=http_stack.store,
        ledger=http_stack.store,
        results=http_stack.results,
        clock=http_stack.clock,
        watcher=watcher,
    )
    return http_open_client(http_stack.app(jobs=jobs), http_keys.acme)


async def submit(client: httpx.AsyncClient, prompt: str = "Hello there") -> str:
    response = await client.post(
        "/v1/generations", json={"task": "generate", "input": {"prompt": prompt}}
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def held(watcher: JobWatcher, count: int = 1) -> None:
    """Until the watcher holds ``count`` waits."""
    while watcher.waiting < count:  # noqa: ASYNC110 - a condition other tasks make true
        await asyncio.sleep(0)


async def work(http_stack: HttpStack) -> None:
    http_stack.clock.advance(1.5)
    assert await http_stack.run_worker() >= 1


async def test_a_wait_answers_once_the_job_is_finished(
    client: httpx.AsyncClient, http_stack: HttpStack, watcher: JobWatcher
) -> None:
    job_id = await submit(client)
    waiting = asyncio.create_task(client.get(f"/v1/generations/{job_id}", params={"wait": 60}))
    await held(watcher)
    assert not waiting.done()

    await work(http_stack)

    response = await waiting
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "SUCCEEDED"
    assert "Hello there" in body["result"]["text"]
    # The same body GET answers.
    assert body == (await client.get(f"/v1/generations/{job_id}")).json()
    assert watcher.waiting == 0


async def test_a_wait_answers_with_the_current_state_when_the_time_is_up(
    client: httpx.AsyncClient, watcher: JobWatcher
) -> None:
    job_id = await submit(client)
    response = await client.get(f"/v1/generations/{job_id}", params={"wait": "0.01"})
    assert response.status_code == 200
    assert response.json()["status"] == "QUEUED"
    assert watcher.waiting == 0


async def test_a_wait_on_a_finished_job_answers_at_once(
    client: httpx.AsyncClient, http_stack: HttpStack, watcher: JobWatcher
) -> None:
    job_id = await submit(client)
    await work(http_stack)
    response = await client.get(f"/v1/generations/{job_id}", params={"wait": 60})
    assert response.json()["status"] == "SUCCEEDED"
    assert watcher.reads == 0  # never watched


@pytest.mark.parametrize("value", ["0", "-1", "60.5", "61", "abc", "nan", "inf", ""])
async def test_a_bad_wait_is_a_422_naming_the_parameter(
    client: httpx.AsyncClient, http_problem: ProblemCheck, value: str
) -> None:
    job_id = await submit(client)
    response = await client.get(f"/v1/generations/{job_id}", params={"wait": value})
    problem = http_problem(response, 422, "invalid_request")
    assert any(error["loc"] == ["query", "wait"] for error in problem["errors"]), problem


async def test_a_wait_on_another_tenants_job_is_a_404_at_once(
    client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    watcher: JobWatcher,
) -> None:
    job_id = await submit(client)
    globex = http_open_client(http_stack.app(jobs=_jobs_of(http_stack, watcher)), http_keys.globex)
    for path in (f"/v1/generations/{job_id}", f"/v1/generations/{job_id}/stream"):
        response = await globex.get(path, params={"wait": 60} if "stream" not in path else None)
        http_problem(response, 404, "not_found")
    assert watcher.waiting == 0
    assert watcher.reads == 0


def _jobs_of(http_stack: HttpStack, watcher: JobWatcher) -> JobQueries:
    return JobQueries(
        store=http_stack.store,
        ledger=http_stack.store,
        results=http_stack.results,
        clock=http_stack.clock,
        watcher=watcher,
    )


def events_of(text: str) -> list[dict[str, Any]]:
    """The events of a text/event-stream body: id, event and data (parsed JSON)."""
    events = []
    for block in text.split("\n\n"):
        fields: dict[str, Any] = {}
        data: list[str] = []
        for line in block.split("\n"):
            if not line or line.startswith(":"):
                continue
            name, _, value = line.partition(": ")
            if name == "data":
                data.append(value)
            else:
                fields[name] = value
        if data:
            fields["data"] = json.loads("\n".join(data))
            events.append(fields)
    return events


async def test_the_stream_sends_each_status_and_ends_after_the_finished_one(
    client: httpx.AsyncClient, http_stack: HttpStack, watcher: JobWatcher
) -> None:
    job_id = await submit(client)
    streaming = asyncio.create_task(client.get(f"/v1/generations/{job_id}/stream"))
    await held(watcher)

    await work(http_stack)

    response = await streaming
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/event-stream")
    assert response.headers["cache-control"] == "no-store"
    assert response.text.startswith("retry: ")
    events = events_of(response.text)
    assert [e["event"] for e in events] == ["status"] * len(events)
    statuses = [e["data"]["status"] for e in events]
    # The first is the job as it was; the last the finished one, once; none repeated
    # (PROCESSING is sent when a read happened to find it: the worker here is fast).
    assert statuses[0] == "QUEUED"
    assert statuses[-1] == "SUCCEEDED"
    assert len(statuses) == len(set(statuses))
    assert events[-1]["data"] == (await client.get(f"/v1/generations/{job_id}")).json()
    assert len({e["id"] for e in events}) == len(events)
    assert watcher.waiting == 0


async def test_last_event_id_resumes_without_repeating_and_never_misses_the_end(
    client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    job_id = await submit(client)
    path = f"/v1/generations/{job_id}/stream"
    queued = await client.get(f"/v1/generations/{job_id}")
    assert queued.json()["status"] == "QUEUED"
    # A client that was sent QUEUED, then lost its connection while the job finished.
    first_id = "1-QUEUED"
    await work(http_stack)

    resumed = await client.get(path, headers={"Last-Event-ID": first_id})
    events = events_of(resumed.text)
    assert [e["data"]["status"] for e in events] == ["SUCCEEDED"]

    # Reconnecting after the finished event: nothing more to send, and 204 says so.
    done = await client.get(path, headers={"Last-Event-ID": events[-1]["id"]})
    assert done.status_code == 204
    assert done.content == b""

    # An id this server did not make is no id: the job as it is now.
    fresh = await client.get(path, headers={"Last-Event-ID": "not-an-id"})
    assert [e["data"]["status"] for e in events_of(fresh.text)] == ["SUCCEEDED"]


async def test_a_stream_of_a_finished_job_is_its_one_event(
    client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    job_id = await submit(client)
    await work(http_stack)
    response = await client.get(f"/v1/generations/{job_id}/stream")
    events = events_of(response.text)
    assert [e["data"]["status"] for e in events] == ["SUCCEEDED"]


async def test_a_stream_ends_when_its_client_goes_away_and_leaves_no_wait(
    client: httpx.AsyncClient, http_stack: HttpStack, http_keys: HttpKeys, watcher: JobWatcher
) -> None:
    job_id = await submit(client)
    app = http_stack.app(jobs=_jobs_of(http_stack, watcher))
    gone = asyncio.Event()
    sent: list[dict[str, Any]] = []
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body" and message.get("body"):
            gone.set()  # the client read the first event, then went away

    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": f"/v1/generations/{job_id}/stream",
        "raw_path": f"/v1/generations/{job_id}/stream".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"host", b"test"), (b"authorization", f"Bearer {http_keys.acme}".encode())],
        "client": ("127.0.0.1", 1234),
        "server": ("test", 80),
    }
    await app(scope, receive, send)

    assert sent[0]["status"] == 200
    assert b"event: status" in sent[1]["body"]
    assert watcher.waiting == 0
    # The job is still unfinished: the stream ended because its client left.
    assert (await client.get(f"/v1/generations/{job_id}")).json()["status"] == "QUEUED"
