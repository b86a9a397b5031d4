"""GET /v1/generations?job_id=...: a list of named jobs (a client waiting for many polls
them in one request), never another tenant's, and what each bad filter gets."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ferryman.core.ids import new_job_id
from ferryman.ports.store import LIST_ITEM_BYTES

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck


async def submit(client: httpx.AsyncClient, prompt: str) -> str:
    response = await client.post(
        "/v1/generations", json={"task": "generate", "input": {"prompt": prompt}}
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def listed(client: httpx.AsyncClient, **params: Any) -> dict[str, Any]:
    response = await client.get("/v1/generations", params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_a_list_of_named_jobs_shows_them_as_get_does(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    done = await submit(http_client, "one")
    await http_stack.run_worker()
    waiting = await submit(http_client, "two")
    await submit(http_client, "not asked for")

    body = await listed(http_client, job_id=[done, waiting])

    assert [job["job_id"] for job in body["data"]] == [waiting, done]
    assert body["next_cursor"] is None
    assert body["data"][1] == (await http_client.get(f"/v1/generations/{done}")).json()
    assert "one" in body["data"][1]["result"]["text"]


async def test_another_tenant_s_or_an_unknown_id_is_simply_absent(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    globex = http_open_client(app, http_keys.globex)
    mine = await submit(acme, "acme")
    theirs = await submit(globex, "globex")

    body = await listed(acme, job_id=[theirs, new_job_id(), mine, mine])
    only_theirs = await listed(acme, job_id=[theirs])

    assert [job["job_id"] for job in body["data"]] == [mine]
    assert only_theirs == {"data": [], "next_cursor": None}


async def test_named_jobs_combine_with_the_other_filters_and_pages(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    done = await submit(http_client, "one")
    await http_stack.run_worker()
    waiting = [await submit(http_client, f"q{i}") for i in range(3)]
    named = [done, *waiting]

    queued = await listed(http_client, job_id=named, status="QUEUED")
    first = await listed(http_client, job_id=named, limit=2)
    rest = await listed(http_client, job_id=named, limit=2, cursor=first["next_cursor"])

    assert [job["job_id"] for job in queued["data"]] == waiting[::-1]
    assert [job["job_id"] for job in first["data"] + rest["data"]] == named[::-1]
    assert rest["next_cursor"] is None


async def test_a_hundred_ids_are_taken(http_client: httpx.AsyncClient) -> None:
    mine = await submit(http_client, "one")

    body = await listed(http_client, job_id=[mine, *(new_job_id() for _ in range(99))])

    assert [job["job_id"] for job in body["data"]] == [mine]


@pytest.mark.parametrize(
    ("job_ids", "loc"),
    [
        (["gen_" + "0" * 26] * 101, ["query", "job_id"]),
        (["not-a-job"], ["query", "job_id", 0]),
        ([new_job_id(), "gen_01ARZ3NDEKTSV4RRFFQ69G5FA"], ["query", "job_id", 1]),
        ([""], ["query", "job_id", 0]),
        ([new_job_id().lower()], ["query", "job_id", 0]),
    ],
)
async def test_a_bad_job_id_filter_is_a_422(
    http_client: httpx.AsyncClient,
    http_problem: ProblemCheck,
    job_ids: list[str],
    loc: list[Any],
) -> None:
    response = await http_client.get("/v1/generations", params={"job_id": job_ids})

    problem = http_problem(response, 422, "invalid_request")
    assert [error["loc"] for error in problem["errors"]] == [loc]


async def test_other_query_parameters_still_take_one_value(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    response = await http_client.get("/v1/generations?status=QUEUED&status=FAILED")

    problem = http_problem(response, 422, "invalid_request")
    assert problem["errors"][0]["loc"] == ["query", "status"]


async def test_a_page_of_summaries_is_bounded_by_the_list_budget(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    from ferryman.services.jobs import JobQueries

    budget = 3 * LIST_ITEM_BYTES
    jobs = JobQueries(
        store=http_stack.store,
        ledger=http_stack.store,
        results=http_stack.results,
        clock=http_stack.clock,
        list_max_bytes=budget,
    )
    client = http_open_client(http_stack.app(jobs=jobs), http_keys.acme)
    created = [await submit(client, f"q{i}") for i in range(5)]

    body = await listed(client, limit=200)

    assert [job["job_id"] for job in body["data"]] == created[::-1][:3]
    assert body["next_cursor"] == created[::-1][2]
