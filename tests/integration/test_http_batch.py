"""POST /v1/generations/batch: per-item outcomes, idempotency per item, limits, one
transaction per slice of the batch (services/intake.py's BATCH_SLICE_JOBS)."""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.sqlite import messages
from ferryman.core.errors import IdempotencyKeyMismatchError
from ferryman.services.intake import BATCH_SLICE_JOBS, TenantQuotas

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

BATCH = "/v1/generations/batch"


def job(prompt: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"task": "generate", "input": {"prompt": prompt}, **extra}


async def stored(stack: HttpStack, tenant: str = "acme") -> list[str]:
    page = await stack.store.list_jobs(tenant_id=tenant, limit=200)
    return sorted(j.job_id for j in page.jobs)


def check_item_problem(entry: dict[str, Any], status: int, code: str) -> None:
    assert entry["status"] == status, entry
    assert entry["code"] == code
    assert entry["type"] == f"https://ferryman.dev/problems/{code}"
    assert entry["title"]
    assert entry["detail"]
    assert "job_id" not in entry


async def test_each_item_gets_its_job_in_order(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    response = await http_client.post(
        BATCH,
        json={"jobs": [job("one"), job("two", metadata={"n": 2}), job("three")]},
        headers={"X-Correlation-Id": "batch-1"},
    )

    assert response.status_code == 200, response.text
    assert set(response.json()) == {"results", "atomic_chunk_size"}
    # SQLite has no transaction limit of its own: the chunk is intake's slice.
    assert response.json()["atomic_chunk_size"] == BATCH_SLICE_JOBS
    results = response.json()["results"]
    assert [set(r) for r in results] == [
        {"job_id", "status", "created_at", "correlation_id", "replayed"}
    ] * 3
    assert all(r["status"] == "QUEUED" and r["replayed"] is False for r in results)
    assert all(r["correlation_id"] == "batch-1" for r in results)
    ids = [r["job_id"] for r in results]
    assert sorted(ids) == await stored(http_stack)
    prompts = [(await http_stack.store.get(i)).input["prompt"] for i in ids]  # type: ignore[union-attr]
    assert prompts == ["one", "two", "three"]
    # Every job is dispatched with it: a worker runs them all.
    assert await http_stack.run_worker() == 3


async def test_one_bad_item_never_spoils_the_others(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    items: list[Any] = [
        job("fine"),
        {"task": "no-such-task", "input": {}},
        job("\x00"),
        job("webhook", webhook_url="https://example.com"),
        "not an object",
        job("bad key", idempotency_key="tab\tkey"),
        job("x", metadata={"big": "y" * 5000}),
        {"task": "generate", "input": {"prompt": "p"}, "surprise": 1},
        job("also fine"),
    ]
    response = await http_client.post(BATCH, json={"jobs": items})

    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == len(items)
    assert results[0]["status"] == "QUEUED"
    check_item_problem(results[1], 422, "invalid_request")
    assert results[1]["errors"][0]["loc"] == ["body", "jobs", 1, "task"]
    check_item_problem(results[2], 422, "invalid_request")
    assert results[2]["errors"][0]["loc"] == ["body", "jobs", 2, "input", "prompt"]
    check_item_problem(results[3], 422, "unsupported_field")
    check_item_problem(results[4], 422, "invalid_request")
    assert results[4]["errors"][0]["loc"] == ["body", "jobs", 4]
    check_item_problem(results[5], 400, "invalid_idempotency_key")
    check_item_problem(results[6], 422, "invalid_request")
    check_item_problem(results[7], 422, "invalid_request")
    assert results[7]["errors"][0]["loc"] == ["body", "jobs", 7, "surprise"]
    assert results[8]["status"] == "QUEUED"
    assert await stored(http_stack) == sorted([results[0]["job_id"], results[8]["job_id"]])


async def test_idempotency_per_item_replays_and_mismatches(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    single = await http_client.post(
        "/v1/generations", json=job("first"), headers={"Idempotency-Key": "k-1"}
    )
    assert single.status_code == 202

    response = await http_client.post(
        BATCH,
        json={
            "jobs": [
                job("first", idempotency_key="k-1"),  # the single submit's request: replay
                job("changed", idempotency_key="k-1"),  # same key, other request
                job("new", idempotency_key="k-2"),
            ]
        },
    )
    again = await http_client.post(BATCH, json={"jobs": [job("new", idempotency_key="k-2")]})

    results = response.json()["results"]
    assert results[0]["job_id"] == single.json()["job_id"]
    assert results[0]["replayed"] is True
    check_item_problem(results[1], 422, IdempotencyKeyMismatchError.code)
    assert results[2]["replayed"] is False
    assert again.json()["results"][0] == results[2] | {"replayed": True}
    # A batch item's key is the same key as a single submission's header.
    by_header = await http_client.post(
        "/v1/generations", json=job("new"), headers={"Idempotency-Key": "k-2"}
    )
    assert by_header.json()["job_id"] == results[2]["job_id"]
    assert by_header.headers["Idempotent-Replayed"] == "true"
    assert len(await stored(http_stack)) == 2


async def test_duplicate_keys_in_one_batch_resolve_in_order(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    response = await http_client.post(
        BATCH,
        json={
            "jobs": [
                job("a", idempotency_key="dup"),
                job("b", idempotency_key="dup"),
                job("a", idempotency_key="dup"),
            ]
        },
    )

    first, other, same = response.json()["results"]
    assert first["replayed"] is False
    check_item_problem(other, 422, "idempotency_key_mismatch")
    assert same["job_id"] == first["job_id"]
    assert same["replayed"] is True
    assert await stored(http_stack) == [first["job_id"]]


async def test_same_key_in_two_tenants_makes_two_jobs(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    body = {"jobs": [job("same", idempotency_key="shared")]}
    acme = await http_open_client(app, http_keys.acme).post(BATCH, json=body)
    globex = await http_open_client(app, http_keys.globex).post(BATCH, json=body)

    acme_job = acme.json()["results"][0]
    globex_job = globex.json()["results"][0]
    assert acme_job["replayed"] is globex_job["replayed"] is False
    assert acme_job["job_id"] != globex_job["job_id"]
    assert await stored(http_stack, "acme") == [acme_job["job_id"]]
    assert await stored(http_stack, "globex") == [globex_job["job_id"]]


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"jobs": []}, ["body", "jobs"]),
        ({}, ["body", "jobs"]),
        ({"jobs": {"task": "generate"}}, ["body", "jobs"]),
        ([job()], ["body"]),
        ({"jobs": [job()], "extra": 1}, ["body", "extra"]),
    ],
)
async def test_a_bad_envelope_refuses_the_whole_request(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_problem: ProblemCheck,
    body: Any,
    loc: list[Any],
) -> None:
    response = await http_client.post(BATCH, json=body)

    problem = http_problem(response, 422, "invalid_request")
    assert problem["errors"][0]["loc"] == loc
    assert await stored(http_stack) == []


async def test_not_json_is_422(http_client: httpx.AsyncClient, http_problem: ProblemCheck) -> None:
    response = await http_client.post(
        BATCH, content=b"{not json", headers={"Content-Type": "application/json"}
    )

    http_problem(response, 422, "invalid_request")


async def test_more_than_1000_items_is_413(
    http_client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(BATCH, json={"jobs": [job(str(i)) for i in range(1001)]})

    http_problem(response, 413, "too_many_items")
    assert await stored(http_stack) == []


async def test_1000_items_are_accepted(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    response = await http_client.post(BATCH, json={"jobs": [job(str(i)) for i in range(1000)]})

    assert response.status_code == 200
    assert len({r["job_id"] for r in response.json()["results"]}) == 1000
    assert (await http_stack.store.usage("acme")).stored == 1000


async def test_the_batch_body_has_its_own_limit_and_items_keep_the_single_one(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    client = http_open_client(
        http_stack.app(max_body_bytes=2000, max_batch_body_bytes=10_000), http_keys.acme
    )
    # Over the single limit as a whole, each item under it: accepted.
    fits = await client.post(BATCH, json={"jobs": [job("w" * 500) for _ in range(6)]})
    assert fits.status_code == 200
    assert all(r["replayed"] is False for r in fits.json()["results"])
    # One item over the single limit: that item alone is refused.
    mixed = await client.post(BATCH, json={"jobs": [job("w" * 3000), job("small")]})
    big, small = mixed.json()["results"]
    check_item_problem(big, 413, "payload_too_large")
    assert small["status"] == "QUEUED"
    # Over the batch limit: the whole request, before anything is read.
    too_big = await client.post(BATCH, json={"jobs": [job("w" * 1500) for _ in range(8)]})
    http_problem(too_big, 413, "payload_too_large")
    assert len(await stored(http_stack)) == 7
    # The single route keeps its own limit.
    single = await client.post("/v1/generations", json=job("w" * 3000))
    http_problem(single, 413, "payload_too_large")


async def test_paused_intake_refuses_the_whole_batch(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app()
    admin = http_open_client(app, http_keys.admin)
    assert (await admin.post("/v1/admin/pause", json={"what": "intake"})).status_code == 200

    client = http_open_client(app, http_keys.acme)
    refused = await client.post(BATCH, json={"jobs": [job(), {"bad": 1}]})

    http_problem(refused, 503, "paused")
    assert int(refused.headers["Retry-After"]) >= 1
    assert await stored(http_stack) == []


async def test_unauthenticated_is_401(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    response = await http_open_client(http_stack.app()).post(BATCH, json={"jobs": [job()]})

    http_problem(response, 401, "unauthenticated")
    assert await stored(http_stack) == []


async def test_a_batch_is_counted_by_its_items(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app(tenant_rate_per_second=1.0, tenant_burst=10)
    client = http_open_client(app, http_keys.acme)

    first = await client.post(BATCH, json={"jobs": [job(str(i)) for i in range(4)]})
    assert first.status_code == 200
    assert first.headers["RateLimit"] == '"submit";r=6;t=4'
    # Six left: a batch of seven waits (its Retry-After says for how long), and keeps
    # the token its bytes cost before they were parsed.
    refused = await client.post(BATCH, json={"jobs": [job(str(i)) for i in range(7)]})
    http_problem(refused, 429, "rate_limited")
    assert int(refused.headers["Retry-After"]) == 2
    assert refused.headers["RateLimit"] == '"submit";r=0;t=2'
    assert len(await stored(http_stack)) == 4
    # A batch over the whole burst still passes once the bucket is full, and leaves it
    # in debt, so the next submission waits.
    http_stack.clock.advance(10.0)
    huge = await client.post(BATCH, json={"jobs": [job(str(i)) for i in range(25)]})
    assert huge.status_code == 200
    after = await client.post("/v1/generations", json=job("next"))
    http_problem(after, 429, "rate_limited")
    assert int(after.headers["Retry-After"]) >= 15


async def test_quotas_apply_per_item(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    http_stack.intake._quotas = TenantQuotas(max_backlog=3)
    client = http_open_client(http_stack.app(), http_keys.acme)

    response = await client.post(BATCH, json={"jobs": [job(str(i)) for i in range(5)]})

    results = response.json()["results"]
    assert [r.get("job_id") is not None for r in results] == [True, True, True, False, False]
    check_item_problem(results[3], 429, "backlog_quota_exceeded")
    assert len(await stored(http_stack)) == 3


async def test_a_batch_within_one_slice_is_one_transaction(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_problem: ProblemCheck,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_outage: Callable[[str, int], sqlite3.OperationalError],
) -> None:
    """A fault after some items were written leaves none of the batch behind."""
    real = messages.insert_message
    written = 0

    def failing(conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> None:
        nonlocal written
        written += 1
        if written == 3:
            raise sqlite_outage("disk I/O error", sqlite3.SQLITE_IOERR)
        real(conn, *args, **kwargs)

    monkeypatch.setattr(messages, "insert_message", failing)
    response = await http_client.post(BATCH, json={"jobs": [job(str(i)) for i in range(5)]})

    http_problem(response, 503, "store_unavailable")
    assert written == 3
    assert await stored(http_stack) == []
    assert (await http_stack.store.usage("acme")).stored == 0
    assert await http_stack.run_worker() == 0
    # And nothing of it blocks a retry of the same batch.
    monkeypatch.setattr(messages, "insert_message", real)
    retried = await http_client.post(BATCH, json={"jobs": [job(str(i)) for i in range(5)]})
    assert retried.status_code == 200
    assert len(await stored(http_stack)) == 5


async def test_an_idempotency_key_header_is_400_naming_the_per_item_key(
    http_client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    """A header would not make a retried batch one batch: refused, not ignored."""
    response = await http_client.post(
        BATCH, json={"jobs": [job("one")]}, headers={"Idempotency-Key": "batch-7"}
    )

    problem = http_problem(response, 400, "invalid_idempotency_key")
    assert "idempotency_key" in problem["detail"]
    assert await stored(http_stack) == []


async def test_a_store_failure_after_a_stored_slice_answers_per_item_and_a_retry_converges(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    monkeypatch: pytest.MonkeyPatch,
    sqlite_outage: Callable[[str, int], sqlite3.OperationalError],
) -> None:
    """A batch is stored a slice at a time: a fault in its second slice leaves the first
    stored and says so; the same batch again (same keys) stores exactly the rest."""
    real = messages.insert_message
    written = 0

    def failing(conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> None:
        nonlocal written
        written += 1
        if written == BATCH_SLICE_JOBS + 3:
            raise sqlite_outage("disk I/O error", sqlite3.SQLITE_IOERR)
        real(conn, *args, **kwargs)

    monkeypatch.setattr(messages, "insert_message", failing)
    body = {"jobs": [job(str(i), idempotency_key=f"k{i}") for i in range(BATCH_SLICE_JOBS + 20)]}

    response = await http_client.post(BATCH, json=body)

    assert response.status_code == 200
    results = response.json()["results"]
    assert all(r["status"] == "QUEUED" for r in results[:BATCH_SLICE_JOBS])
    for entry in results[BATCH_SLICE_JOBS:]:
        check_item_problem(entry, 503, "store_unavailable")
    assert len(await stored(http_stack)) == BATCH_SLICE_JOBS
    monkeypatch.setattr(messages, "insert_message", real)
    retried = (await http_client.post(BATCH, json=body)).json()["results"]
    assert [r["replayed"] for r in retried] == [True] * BATCH_SLICE_JOBS + [False] * 20
    assert [r["job_id"] for r in retried[:BATCH_SLICE_JOBS]] == [
        r["job_id"] for r in results[:BATCH_SLICE_JOBS]
    ]
    assert len(await stored(http_stack)) == BATCH_SLICE_JOBS + 20
