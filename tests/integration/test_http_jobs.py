"""Reading, listing, history and cancel of jobs, and tenant isolation (I6)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

ISO_UTC = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z")
JOB_FIELDS = {
    "job_id",
    "status",
    "task",
    "model",
    "created_at",
    "updated_at",
    "completed_at",
    "attempt_count",
    "correlation_id",
    "metadata",
    "result",
    "error",
}


async def submit(client: httpx.AsyncClient, prompt: str = "Hello there", **extra: Any) -> str:
    response = await client.post(
        "/v1/generations", json={"task": "generate", "input": {"prompt": prompt}, **extra}
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def test_full_flow_submit_work_read(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    job_id = await submit(http_client, "Hello ferryman", metadata={"k": "v"})

    queued = await http_client.get(f"/v1/generations/{job_id}")
    assert queued.status_code == 200
    assert queued.json()["status"] == "QUEUED"
    assert queued.json()["result"] is None
    assert queued.json()["completed_at"] is None

    http_stack.clock.advance(1.5)
    assert await http_stack.run_worker() == 1

    response = await http_client.get(f"/v1/generations/{job_id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) >= JOB_FIELDS
    assert body["job_id"] == job_id
    assert body["status"] == "SUCCEEDED"
    assert body["task"] == "generate"
    assert body["model"] == "sim"
    assert body["attempt_count"] == 1
    assert body["metadata"] == {"k": "v"}
    assert body["error"] is None
    assert "Hello ferryman" in body["result"]["text"]
    for name in ("created_at", "updated_at", "completed_at"):
        assert ISO_UTC.fullmatch(body[name]), body[name]
    assert body["created_at"] == "2023-11-14T22:13:20.000000Z"  # the FakeClock's start
    assert body["completed_at"] == "2023-11-14T22:13:21.500000Z"

    # A list shows each job exactly as GET does, result and why it waits included.
    assert body["waiting"] is None
    listed = (await http_client.get("/v1/generations")).json()["data"]
    assert listed == [body]


async def test_a_failed_job_shows_its_error(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    response = await http_client.post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi", "simulate": {"script": ["refuse"]}}},
    )
    job_id = response.json()["job_id"]
    await http_stack.run_worker()

    body = (await http_client.get(f"/v1/generations/{job_id}")).json()

    assert body["status"] == "FAILED"
    assert body["result"] is None
    assert set(body["error"]) == {"code", "class", "message"}
    assert body["error"]["class"] == "SAFETY_REJECTED"
    assert body["error"]["code"] == "safety_rejected"


async def test_events_and_attempts(http_client: httpx.AsyncClient, http_stack: HttpStack) -> None:
    job_id = await submit(http_client, "count these four words")
    await http_stack.run_worker()

    response = await http_client.get(f"/v1/generations/{job_id}/events")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"events", "attempts"}
    events = body["events"]
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "ACCEPTED"
    assert "CLAIMED" in kinds
    assert kinds[-1] == "SUCCEEDED"
    for event in events:
        assert set(event) == {"seq", "at", "kind", "detail"}
        assert ISO_UTC.fullmatch(event["at"])
        assert isinstance(event["detail"], dict)
    (attempt,) = body["attempts"]
    assert {
        "attempt_no",
        "attempt_id",
        "started_at",
        "ended_at",
        "outcome",
        "failure_class",
        "latency_ms",
        "input_tokens",
        "output_tokens",
    } <= set(attempt)
    assert attempt["attempt_no"] == 1
    assert attempt["attempt_id"].startswith("att_")
    # Where it ran is the operator's business (GET /v1/admin/generations/{id}/events):
    # the tenant sees an opaque name in the attempt's worker_id (docs/reference.md).
    assert attempt["worker_id"].startswith("wkr_")
    assert attempt["outcome"] == "succeeded"
    assert attempt["failure_class"] is None
    assert attempt["input_tokens"] == 4
    assert isinstance(attempt["latency_ms"], int)
    assert ISO_UTC.fullmatch(attempt["started_at"])
    assert ISO_UTC.fullmatch(attempt["ended_at"])


async def test_a_retry_says_when_in_the_same_time_format(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    """An event detail's moment (not_before) is written like every other time, not
    as the epoch seconds the store keeps."""
    scripted = await http_client.post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "p", "simulate": {"script": ["throttle"]}}},
    )
    await http_stack.run_worker()
    events = (await http_client.get(f"/v1/generations/{scripted.json()['job_id']}/events")).json()
    (retry,) = [e for e in events["events"] if e["kind"] == "RETRY_SCHEDULED"]
    assert ISO_UTC.fullmatch(retry["detail"]["not_before"]), retry["detail"]
    assert retry["detail"]["not_before"] > retry["at"]  # same format, so text order is time order


async def test_cancel_a_queued_job(http_client: httpx.AsyncClient, http_stack: HttpStack) -> None:
    job_id = await submit(http_client)

    response = await http_client.post(f"/v1/generations/{job_id}/cancel")

    assert response.status_code == 200
    assert response.json()["job_id"] == job_id
    assert response.json()["status"] == "CANCELLED"
    assert set(response.json()) >= JOB_FIELDS
    await http_stack.run_worker()
    assert http_stack.provider.invocations == 0
    again = await http_client.get(f"/v1/generations/{job_id}")
    assert again.json()["status"] == "CANCELLED"


async def test_cancel_a_finished_job_is_409(
    http_client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    job_id = await submit(http_client)
    await http_stack.run_worker()

    response = await http_client.post(f"/v1/generations/{job_id}/cancel")

    http_problem(response, 409, "already_terminal")
    assert (await http_client.get(f"/v1/generations/{job_id}")).json()["status"] == "SUCCEEDED"


async def test_cancel_twice_is_409_the_second_time(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    job_id = await submit(http_client)

    first = await http_client.post(f"/v1/generations/{job_id}/cancel")
    second = await http_client.post(f"/v1/generations/{job_id}/cancel")

    assert first.status_code == 200
    http_problem(second, 409, "already_terminal")


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/events"), ("POST", "/cancel")]
)
async def test_unknown_job_is_404(
    http_client: httpx.AsyncClient, method: str, suffix: str, http_problem: ProblemCheck
) -> None:
    response = await http_client.request(
        method, f"/v1/generations/gen_01HZZZZZZZZZZZZZZZZZZZZZZZ{suffix}"
    )

    http_problem(response, 404, "not_found")


@pytest.mark.parametrize(
    ("method", "suffix"), [("GET", ""), ("GET", "/events"), ("POST", "/cancel")]
)
async def test_another_tenants_job_is_404(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    method: str,
    suffix: str,
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    globex = http_open_client(app, http_keys.globex)
    job_id = await submit(acme)

    response = await globex.request(method, f"/v1/generations/{job_id}{suffix}")

    unknown = await globex.request(
        method, f"/v1/generations/gen_01HZZZZZZZZZZZZZZZZZZZZZZZ{suffix}"
    )
    http_problem(response, 404, "not_found")
    # Indistinguishable from a job that does not exist.
    assert response.json() == unknown.json()
    # And untouched: globex's cancel did not cancel acme's job.
    assert (await acme.get(f"/v1/generations/{job_id}")).json()["status"] == "QUEUED"


async def test_list_shows_only_the_callers_jobs_newest_first(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    globex = http_open_client(app, http_keys.globex)
    mine = [await submit(acme, f"acme {i}") for i in range(3)]
    await submit(globex, "globex 0")

    response = await acme.get("/v1/generations")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"data", "next_cursor"}
    assert [job["job_id"] for job in body["data"]] == list(reversed(mine))
    assert body["next_cursor"] is None
    assert {job["status"] for job in body["data"]} == {"QUEUED"}


async def test_list_pages_through_every_job_once(http_client: httpx.AsyncClient) -> None:
    created = [await submit(http_client, f"job {i}") for i in range(7)]

    seen: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        params: dict[str, Any] = {"limit": 3}
        if cursor is not None:
            params["cursor"] = cursor
        body = (await http_client.get("/v1/generations", params=params)).json()
        pages += 1
        assert len(body["data"]) <= 3
        seen += [job["job_id"] for job in body["data"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break

    assert pages == 3
    assert seen == list(reversed(created))


async def test_list_filters_by_status_and_task(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    done = await submit(http_client, "one")
    await http_stack.run_worker()
    waiting = await submit(http_client, "two")

    succeeded = (await http_client.get("/v1/generations", params={"status": "SUCCEEDED"})).json()
    queued = (await http_client.get("/v1/generations", params={"status": "QUEUED"})).json()
    other_task = (
        await http_client.get("/v1/generations", params={"task": "classify_ticket"})
    ).json()

    assert [job["job_id"] for job in succeeded["data"]] == [done]
    assert [job["job_id"] for job in queued["data"]] == [waiting]
    assert other_task["data"] == []


@pytest.mark.parametrize(
    ("params", "loc"),
    [
        ({"status": "DONE"}, ["query", "status"]),
        ({"limit": 0}, ["query", "limit"]),
        ({"limit": 201}, ["query", "limit"]),
        ({"limit": "many"}, ["query", "limit"]),
    ],
)
async def test_list_refuses_bad_queries(
    http_client: httpx.AsyncClient,
    params: dict[str, Any],
    loc: list[str],
    http_problem: ProblemCheck,
) -> None:
    response = await http_client.get("/v1/generations", params=params)

    problem = http_problem(response, 422, "invalid_request")
    assert [error["loc"] for error in problem["errors"]] == [loc]
    assert all(set(error) == {"loc", "msg"} for error in problem["errors"])


async def test_list_accepts_the_limit_bounds(http_client: httpx.AsyncClient) -> None:
    for limit in (1, 200):
        response = await http_client.get("/v1/generations", params={"limit": limit})
        assert response.status_code == 200


async def test_a_query_parameter_given_twice_is_refused_not_guessed(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app()
    url = "/v1/generations?limit=1&limit=200"
    problem = http_problem(
        await http_open_client(app, http_keys.acme).get(url), 422, "invalid_request"
    )
    assert problem["errors"][0]["loc"] == ["query", "limit"]
    # Authentication first: an anonymous caller learns nothing about validation.
    http_problem(await http_open_client(app).get(url), 401, "unauthenticated")
