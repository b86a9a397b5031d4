"""What tenants and operators read over HTTP: verified results, bounded lists, checked
cursors, and views that keep internals for operators."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ferryman.core.errors import ResultUnreadableError
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE, STATUS_TABLE
from ferryman.services.jobs import JobQueries

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

# The HTTP layer maps ResultUnreadableError to 500 `result_unreadable`; until that
# mapping is in this tree it is a bare 500 `internal_error`. Either way: a 500, and
# never someone else's data.
UNREADABLE_CODE = "result_unreadable" if ResultUnreadableError in STATUS_TABLE else "internal_error"


async def submit(client: httpx.AsyncClient, prompt: str, **extra: Any) -> str:
    body = {"task": "generate", "input": {"prompt": prompt}, **extra}
    response = await client.post("/v1/generations", json=body)
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def overwrite_result(stack: HttpStack, job_id: str, data: bytes) -> None:
    job = await stack.store.get(job_id)
    assert job is not None and job.result_ref is not None
    key = job.result_ref.removeprefix("db:").split(";")[0]
    await stack.db.write(
        lambda conn: conn.execute("UPDATE results SET data = ? WHERE key = ?", (data, key))
    )


# --- damaged results ---------------------------------------------------------------


async def test_get_of_a_damaged_result_is_a_500_problem_never_other_data(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    job_id = await submit(http_client, "mine")
    await http_stack.run_worker()
    await overwrite_result(http_stack, job_id, b'{"text": "someone else\'s output"}')

    response = await http_client.get(f"/v1/generations/{job_id}")

    assert response.status_code == 500
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    assert response.json()["code"] == UNREADABLE_CODE
    assert "someone else" not in response.text


async def test_a_list_serves_the_rest_and_marks_the_damaged_item(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    ids = [await submit(http_client, f"job {i}") for i in range(3)]
    await http_stack.run_worker()
    await overwrite_result(http_stack, ids[1], b'{"text": "someone else"}')

    response = await http_client.get("/v1/generations")

    assert response.status_code == 200
    data = {item["job_id"]: item for item in response.json()["data"]}
    assert set(data) == set(ids)
    broken = data[ids[1]]
    assert broken["result"] is None
    assert broken["result_error"]["code"] == "result_unreadable"
    assert "someone else" not in response.text
    for job_id in (ids[0], ids[2]):
        assert data[job_id]["result_error"] is None
        assert data[job_id]["result"]["text"].startswith("echo: job ")


# --- bounded lists -----------------------------------------------------------------


async def test_a_list_page_is_bounded_in_bytes_and_its_cursor_continues(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    budget = 5000
    jobs = JobQueries(
        store=http_stack.store,
        ledger=http_stack.store,
        results=http_stack.results,
        clock=http_stack.clock,
        list_max_bytes=budget,
    )
    client = http_open_client(http_stack.app(jobs=jobs), http_keys.acme)
    ids = [await submit(client, f"{i:03d} " + "x" * 2000) for i in range(7)]
    await http_stack.run_worker()

    seen: list[str] = []
    params: dict[str, Any] = {"limit": 200}
    while True:
        response = await client.get("/v1/generations", params=params)
        body = response.json()
        assert response.status_code == 200
        assert 1 <= len(body["data"]) <= 2  # two ~2 KB results fit in 5,000 bytes
        assert len(response.content) < budget + 2000
        seen += [item["job_id"] for item in body["data"]]
        if body["next_cursor"] is None:
            break
        params["cursor"] = body["next_cursor"]

    assert seen == list(reversed(ids))


async def test_metadata_any_json_integer_is_served_as_given(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    huge = 2**80
    job_id = await submit(http_client, "meta", metadata={"big": huge, "list": [huge, 1]})
    await http_stack.run_worker()

    listed = await http_client.get("/v1/generations")
    single = await http_client.get(f"/v1/generations/{job_id}")

    assert listed.status_code == single.status_code == 200
    assert listed.json()["data"][0]["metadata"] == {"big": huge, "list": [huge, 1]}
    assert single.json()["metadata"]["big"] == huge


# --- cursors -----------------------------------------------------------------------

MALFORMED_CURSORS = [
    "abc",
    "gen_",
    "gen_123",
    "gen_01hzzzzzzzzzzzzzzzzzzzzzzz",  # lowercase: not a ULID as issued
    "gen_01HZZZZZZZZZZZZZZZZZZZZZZZZ",  # 27 characters
    "gen_01HZZZZZZZZZZZZZZZZZZZZZZI",  # I is not in the ULID alphabet
    "' OR 1=1 --",
    "g" * 600,
]


@pytest.mark.parametrize("cursor", MALFORMED_CURSORS)
async def test_a_malformed_cursor_is_a_422_on_the_tenant_list(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck, cursor: str
) -> None:
    response = await http_client.get("/v1/generations", params={"cursor": cursor})

    problem = http_problem(response, 422, "invalid_request")
    assert [error["loc"] for error in problem["errors"]] == [["query", "cursor"]]


@pytest.mark.parametrize("cursor", MALFORMED_CURSORS)
async def test_a_malformed_cursor_is_a_422_on_the_dead_letters(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    cursor: str,
) -> None:
    admin = http_open_client(http_stack.app(), http_keys.admin)

    response = await admin.get("/v1/admin/dead-letters", params={"cursor": cursor})

    problem = http_problem(response, 422, "invalid_request")
    assert [error["loc"] for error in problem["errors"]] == [["query", "cursor"]]


async def test_a_well_formed_cursor_past_every_job_is_an_empty_page(
    http_client: httpx.AsyncClient,
) -> None:
    await submit(http_client, "one")

    response = await http_client.get(
        "/v1/generations", params={"cursor": "gen_00000000000000000000000000"}
    )

    assert response.status_code == 200
    assert response.json() == {"data": [], "next_cursor": None}


# --- tenant and operator views -----------------------------------------------------


async def test_tenants_never_see_workers_or_storage_references(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    job_id = await submit(http_client, "where did this run")
    await http_stack.run_worker()

    body = (await http_client.get(f"/v1/generations/{job_id}/events")).json()
    job = (await http_client.get(f"/v1/generations/{job_id}")).json()

    assert body["attempts"] and body["events"]
    # The attempt (docs/reference.md) keeps its worker_id, as an opaque name: the same
    # worker has the same name in the attempt and the CLAIMED event, but no host or pid shows.
    [attempt] = body["attempts"]
    assert attempt["worker_id"].startswith("wkr_")
    claimed = next(e for e in body["events"] if e["kind"] == "CLAIMED")
    assert claimed["detail"]["worker_id"] == attempt["worker_id"]
    for event in body["events"]:
        assert "result_ref" not in event["detail"]
    assert "http-test-worker" not in str(body) + str(job)
    assert "db:" not in str(body) + str(job)


async def test_operators_inspect_any_tenant_s_job_with_its_internals(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    admin = http_open_client(app, http_keys.admin)
    job_id = await submit(acme, "private prompt words")
    await http_stack.run_worker()

    job = (await admin.get(f"/v1/admin/generations/{job_id}")).json()
    history = (await admin.get(f"/v1/admin/generations/{job_id}/events")).json()

    assert job["tenant_id"] == "acme"
    assert job["status"] == "SUCCEEDED"
    assert job["worker_id"] == "http-test-worker"
    assert job["result_ref"].startswith("db:")
    # Operators see how and where, never the customer's input or output.
    assert "result" not in job and "input" not in job
    assert "private prompt" not in str(job) + str(history)
    assert history["job"] == job
    assert [a["worker_id"] for a in history["attempts"]] == ["http-test-worker"]
    claimed = next(e for e in history["events"] if e["kind"] == "CLAIMED")
    assert claimed["detail"]["worker_id"] == "http-test-worker"


@pytest.mark.parametrize("path", ["", "/events"])
async def test_the_operator_job_views_are_for_admin_keys_only(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    path: str,
) -> None:
    app = http_stack.app()
    acme = http_open_client(app, http_keys.acme)
    admin = http_open_client(app, http_keys.admin)
    job_id = await submit(acme, "mine")

    http_problem(await acme.get(f"/v1/admin/generations/{job_id}{path}"), 403, "forbidden")
    http_problem(
        await admin.get(f"/v1/admin/generations/gen_00000000000000000000000000{path}"),
        404,
        "not_found",
    )
