"""POST /v1/generations: acceptance, idempotency, validation (I1, I7)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck


async def count_jobs(stack: HttpStack, tenant: str = "acme") -> int:
    page = await stack.store.list_jobs(tenant_id=tenant, limit=200)
    return len(page.jobs)


async def test_new_job_is_accepted(
    http_client: httpx.AsyncClient, http_generate_body: Callable[..., dict[str, Any]]
) -> None:
    response = await http_client.post(
        "/v1/generations",
        json=http_generate_body(),
        headers={
            "X-Correlation-Id": "req-42",
            "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        },
    )

    assert response.status_code == 202
    body = response.json()
    assert set(body) == {"job_id", "status", "created_at", "correlation_id"}
    assert body["job_id"].startswith("gen_")
    assert body["status"] == "QUEUED"
    assert body["created_at"].endswith("Z")
    assert body["correlation_id"] == "req-42"
    assert response.headers["Location"] == f"/v1/generations/{body['job_id']}"
    assert response.headers["X-Correlation-Id"] == "req-42"
    assert "Idempotent-Replayed" not in response.headers


async def test_a_correlation_id_is_generated_when_none_is_sent(
    http_client: httpx.AsyncClient, http_generate_body: Callable[..., dict[str, Any]]
) -> None:
    response = await http_client.post("/v1/generations", json=http_generate_body())

    assert response.status_code == 202
    generated = response.headers["X-Correlation-Id"]
    assert generated
    assert response.json()["correlation_id"] == generated


async def test_traceparent_is_stored_with_the_job(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
) -> None:
    traceparent = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"
    good = await http_client.post(
        "/v1/generations", json=http_generate_body("one"), headers={"traceparent": traceparent}
    )
    bad = await http_client.post(
        "/v1/generations", json=http_generate_body("two"), headers={"traceparent": "garbage"}
    )

    assert good.status_code == bad.status_code == 202
    good_job = await http_stack.store.get(good.json()["job_id"])
    bad_job = await http_stack.store.get(bad.json()["job_id"])
    assert good_job is not None
    assert good_job.traceparent == traceparent
    # A malformed traceparent is ignored (W3C), not refused.
    assert bad_job is not None
    assert bad_job.traceparent is None


async def test_same_key_same_request_replays_the_job(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
) -> None:
    headers = {"Idempotency-Key": "order-17"}
    first = await http_client.post("/v1/generations", json=http_generate_body(), headers=headers)
    second = await http_client.post("/v1/generations", json=http_generate_body(), headers=headers)

    assert first.status_code == second.status_code == 202
    assert second.json()["job_id"] == first.json()["job_id"]
    assert second.headers["Idempotent-Replayed"] == "true"
    assert second.headers["Location"] == first.headers["Location"]
    assert "Idempotent-Replayed" not in first.headers
    assert await count_jobs(http_stack) == 1


async def test_replay_shows_the_current_status(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
) -> None:
    headers = {"Idempotency-Key": "order-18"}
    first = await http_client.post("/v1/generations", json=http_generate_body(), headers=headers)
    await http_stack.run_worker()

    again = await http_client.post("/v1/generations", json=http_generate_body(), headers=headers)

    assert again.status_code == 202
    assert again.json()["job_id"] == first.json()["job_id"]
    assert again.json()["status"] == "SUCCEEDED"


async def test_same_key_different_request_is_refused_and_creates_nothing(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
    http_problem: ProblemCheck,
) -> None:
    headers = {"Idempotency-Key": "order-19"}
    await http_client.post("/v1/generations", json=http_generate_body("one"), headers=headers)

    response = await http_client.post(
        "/v1/generations", json=http_generate_body("two"), headers=headers
    )

    http_problem(response, 422, "idempotency_key_mismatch")
    assert "Location" not in response.headers
    assert await count_jobs(http_stack) == 1


async def test_the_same_key_in_another_tenant_is_another_job(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_generate_body: Callable[..., dict[str, Any]],
) -> None:
    app = http_stack.app()
    headers = {"Idempotency-Key": "shared"}
    acme = await http_open_client(app, http_keys.acme).post(
        "/v1/generations", json=http_generate_body("one"), headers=headers
    )
    globex = await http_open_client(app, http_keys.globex).post(
        "/v1/generations", json=http_generate_body("two"), headers=headers
    )

    assert acme.status_code == globex.status_code == 202
    assert acme.json()["job_id"] != globex.json()["job_id"]


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
async def test_a_bad_idempotency_key_is_a_400(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
    key: str,
    http_problem: ProblemCheck,
) -> None:
    response = await http_client.post(
        "/v1/generations",
        json=http_generate_body(),
        headers=[(b"Idempotency-Key", key.encode("utf-8"))],
    )

    http_problem(response, 400, "invalid_idempotency_key")
    assert await count_jobs(http_stack) == 0


async def test_unknown_task_is_refused_and_stores_nothing(
    http_client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(
        "/v1/generations", json={"task": "no-such-task", "input": {"prompt": "hi"}}
    )

    problem = http_problem(response, 422, "invalid_request")
    assert problem["errors"][0]["loc"] == ["body", "task"]
    assert "no-such-task" not in response.text
    assert await count_jobs(http_stack) == 0
    assert (await http_stack.queue.stats()).visible == 0


async def test_invalid_input_is_refused_with_field_errors_and_stores_nothing(
    http_client: httpx.AsyncClient, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "", "max_tokens": "secret-value"}},
    )

    problem = http_problem(response, 422, "invalid_request")
    locs = {tuple(error["loc"]) for error in problem["errors"]}
    assert ("body", "input", "prompt") in locs
    assert ("body", "input", "max_tokens") in locs
    assert all(set(error) == {"loc", "msg"} for error in problem["errors"])
    assert "secret-value" not in response.text
    assert await count_jobs(http_stack) == 0


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"input": {"prompt": "hi"}}, ["body", "task"]),
        ({"task": "generate"}, ["body", "input"]),
        ({"task": "generate", "input": "hi"}, ["body", "input"]),
        ({"task": "generate", "input": {"prompt": "hi"}, "tenant": "globex"}, ["body", "tenant"]),
        (
            {"task": "generate", "input": {"prompt": "hi"}, "metadata": {"a": "x" * 4100}},
            ["body", "metadata"],
        ),
        (["not", "an", "object"], ["body"]),
    ],
)
async def test_malformed_bodies_are_422_with_their_location(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    body: Any,
    loc: list[str],
    http_problem: ProblemCheck,
) -> None:
    response = await http_client.post("/v1/generations", json=body)

    problem = http_problem(response, 422, "invalid_request")
    assert loc in [error["loc"] for error in problem["errors"]]
    assert await count_jobs(http_stack) == 0


@pytest.mark.parametrize(
    "raw", [b"{not json", b"", b'{"task": NaN}', b"\xff\xfe{}", b"[" * 100_000]
)
async def test_a_body_that_is_not_json_is_422_not_500(
    http_client: httpx.AsyncClient, raw: bytes, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(
        "/v1/generations", content=raw, headers={"Content-Type": "application/json"}
    )

    problem = http_problem(response, 422, "invalid_request")
    assert problem["errors"] == [{"loc": ["body"], "msg": "the body is not valid JSON"}]


async def test_a_number_json_cannot_write_back_is_422(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(
        "/v1/generations",
        content=b'{"task": "generate", "input": {"prompt": "hi"}, "metadata": {"n": 1e400}}',
        headers={"Content-Type": "application/json"},
    )

    http_problem(response, 422, "invalid_request")


async def test_a_body_that_is_not_json_by_content_type_is_415(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    response = await http_client.post(
        "/v1/generations", content=b"task=generate", headers={"Content-Type": "text/plain"}
    )

    http_problem(response, 415, "unsupported_media_type")


async def test_json_with_a_charset_is_json(
    http_client: httpx.AsyncClient,
) -> None:
    response = await http_client.post(
        "/v1/generations",
        content=b'{"task": "generate", "input": {"prompt": "hi"}}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )

    assert response.status_code == 202


async def test_metadata_is_stored_and_returned(
    http_client: httpx.AsyncClient, http_generate_body: Callable[..., dict[str, Any]]
) -> None:
    metadata = {"order": 17, "tags": ["a", "b"]}
    created = await http_client.post("/v1/generations", json=http_generate_body(metadata=metadata))

    got = await http_client.get(created.headers["Location"])

    assert got.json()["metadata"] == metadata


async def test_forty_concurrent_posts_with_one_key_make_one_job_and_one_invocation(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_generate_body: Callable[..., dict[str, Any]],
) -> None:
    headers = {"Idempotency-Key": "burst-1"}

    responses = await asyncio.gather(
        *(
            http_client.post("/v1/generations", json=http_generate_body(), headers=headers)
            for _ in range(40)
        )
    )

    assert {r.status_code for r in responses} == {202}
    job_ids = {r.json()["job_id"] for r in responses}
    assert len(job_ids) == 1
    assert sum(r.headers.get("Idempotent-Replayed") == "true" for r in responses) == 39
    assert await count_jobs(http_stack) == 1

    await http_stack.run_worker()
    await http_stack.run_worker()

    (job_id,) = job_ids
    history = await http_client.get(f"/v1/generations/{job_id}/events")
    assert len(history.json()["attempts"]) == 1
    assert http_stack.provider.invocations == 1
    job = await http_client.get(f"/v1/generations/{job_id}")
    assert job.json()["status"] == "SUCCEEDED"
    assert job.json()["attempt_count"] == 1
