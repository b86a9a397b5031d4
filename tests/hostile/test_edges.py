"""Small promises at the edge: reserved fields, trailing slashes, separate budgets.

- ``webhook_url`` is refused with 422 ``unsupported_field`` whatever its value, and
  nothing is stored (issue 5, item 15; docs/reference.md).
- A trailing slash is a 404 problem, never a redirect whose host comes from the
  request's Host header (item 14).
- Polling reads never spend the submission budget (item 10), with the budgets of
  the served configuration.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx

    from ferryman.wiring import Runtime

    Problem = Callable[[httpx.Response, int, str], dict[str, Any]]

GENERATE: dict[str, Any] = {"task": "generate", "input": {"prompt": "hi"}}


@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("", "invalid_request"),
        (42, "invalid_request"),
        ("https://hooks.example/" + "a" * 2048, "invalid_request"),
        ("http://hooks.example/ferryman", "webhook_url_refused"),
        ("https://user:password@hooks.example/ferryman", "webhook_url_refused"),
        ("https://127.0.0.1/ferryman", "webhook_url_refused"),
        ("https://localhost/ferryman", "webhook_url_refused"),
        ("https://[::ffff:10.0.0.1]/ferryman", "webhook_url_refused"),
        ("https://169.254.169.254/latest/meta-data", "webhook_url_refused"),
        ("https://2130706433/ferryman", "webhook_url_refused"),
        ("ftp://hooks.example/ferryman", "webhook_url_refused"),
        ("https://hooks.invalid/ferryman", "webhook_url_refused"),  # does not resolve
    ],
)
async def test_a_webhook_url_ferryman_will_not_call_is_refused_and_nothing_is_stored(
    hostile_client: Callable[..., httpx.AsyncClient],
    hostile_runtime: Runtime,
    problem: Problem,
    value: object,
    code: str,
) -> None:
    client = hostile_client()
    assert (await client.post("/v1/webhooks/secret")).status_code == 201
    response = await client.post(
        "/v1/generations",
        json={**GENERATE, "webhook_url": value},
        headers={"Idempotency-Key": "hook-1"},
    )

    body = problem(response, 422, code)
    # The refusal names the field (in its detail, or its errors' loc).
    assert "webhook_url" in json.dumps(body)
    assert (await hostile_runtime.store.store.list_jobs(tenant_id="acme")).jobs == []
    # The key was not taken either: the same key without the field makes a job.
    retried = await client.post(
        "/v1/generations", json=GENERATE, headers={"Idempotency-Key": "hook-1"}
    )
    assert retried.status_code == 202
    assert "Idempotent-Replayed" not in retried.headers


async def test_a_webhook_url_before_the_tenant_has_a_secret_is_refused(
    hostile_client: Callable[..., httpx.AsyncClient],
    hostile_runtime: Runtime,
    problem: Problem,
) -> None:
    client = hostile_client()
    body = {**GENERATE, "webhook_url": "https://hooks.example/ferryman"}
    response = await client.post("/v1/generations", json=body)
    problem(response, 422, "webhook_secret_required")
    assert (await hostile_runtime.store.store.list_jobs(tenant_id="acme")).jobs == []


async def test_a_null_webhook_url_is_a_job_without_one(
    hostile_client: Callable[..., httpx.AsyncClient],
) -> None:
    client = hostile_client()
    with_null = await client.post(
        "/v1/generations",
        json={**GENERATE, "webhook_url": None},
        headers={"Idempotency-Key": "hook-null"},
    )
    assert with_null.status_code == 202
    # The same request without the field: the same fingerprint, so the same job.
    without = await client.post(
        "/v1/generations", json=GENERATE, headers={"Idempotency-Key": "hook-null"}
    )
    assert without.headers.get("Idempotent-Replayed") == "true"
    assert without.json()["job_id"] == with_null.json()["job_id"]


@pytest.mark.parametrize(
    "path", ["/v1/generations/", "/healthz/", "/v1/admin/dead-letters/", "/v1/generations/x/"]
)
@pytest.mark.parametrize("method", ["GET", "POST"])
async def test_a_trailing_slash_is_404_never_a_redirect(
    hostile_client: Callable[..., httpx.AsyncClient], problem: Problem, path: str, method: str
) -> None:
    response = await hostile_client().request(
        method, path, headers={"Host": "evil.example", "X-Forwarded-Host": "evil.example"}
    )

    problem(response, 404, "not_found")
    assert "location" not in response.headers
    assert "evil.example" not in response.text


async def test_polling_never_costs_a_submission(
    hostile_client: Callable[..., httpx.AsyncClient], hostile_runtime: Runtime
) -> None:
    settings = hostile_runtime.settings
    client = hostile_client()
    job_id = (await client.post("/v1/generations", json=GENERATE)).json()["job_id"]

    # Poll far past the submission burst (a shared budget would refuse these, or the
    # submit after them), within the read burst.
    assert settings.tenants.burst * 3 < settings.tenants.read_burst
    polls = [
        await client.get(f"/v1/generations/{job_id}")
        for _ in range(settings.tenants.read_burst - 2)
    ]

    assert {p.status_code for p in polls} == {200}
    submitted = await client.post("/v1/generations", json=GENERATE)
    cancelled = await client.post(f"/v1/generations/{job_id}/cancel")
    assert submitted.status_code == 202
    assert cancelled.status_code == 200
    assert submitted.headers["RateLimit-Policy"].startswith('"submit";')
    assert polls[-1].headers["RateLimit-Policy"].startswith('"read";')
