"""Bearer API keys, the admin check and the per-tenant budgets, through the app."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import pytest

from ferryman.config import Settings
from ferryman.core.errors import AuthenticationError, InvalidRequestError
from ferryman.http.app import AppDeps, create_app

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

GENERATE = {"task": "generate", "input": {"prompt": "hi"}}


def tamper(key: str) -> str:
    """The same key_id with a different secret."""
    prefix, key_id, secret = key.split("_", 2)  # the secret itself may contain "_"
    return f"{prefix}_{key_id}_{'A' if secret[0] != 'A' else 'B'}{secret[1:]}"


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Basic dXNlcjpwYXNz",
        "Bearer fm_000000000000_" + "x" * 43,
        "Bearer not-a-key",
        "Bearer fm_zzzzzzzzzzzz_" + "x" * 43,
        "Bearer " + "x" * 5000,
    ],
)
async def test_missing_unknown_or_garbled_keys_are_401(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    authorization: str | None,
) -> None:
    client = http_open_client(http_stack.app())
    headers = {} if authorization is None else {"Authorization": authorization}

    for method, path in [
        ("POST", "/v1/generations"),
        ("GET", "/v1/generations"),
        ("GET", "/v1/generations/gen_x"),
        ("GET", "/v1/admin/dead-letters"),
    ]:
        response = await client.request(method, path, json=GENERATE, headers=headers)
        http_problem(response, 401, "unauthenticated")
        assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_a_wrong_secret_looks_exactly_like_an_unknown_key(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app()
    wrong_secret = await http_open_client(app, tamper(http_keys.acme)).get("/v1/generations")
    unknown = await http_open_client(app, "fm_0123456789ab_" + "y" * 43).get("/v1/generations")

    http_problem(wrong_secret, 401, "unauthenticated")
    assert wrong_secret.json() == unknown.json()


async def test_authentication_runs_before_the_body_is_looked_at(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    client = http_open_client(http_stack.app())

    response = await client.post(
        "/v1/generations", content=b"{oops", headers={"Content-Type": "application/json"}
    )

    http_problem(response, 401, "unauthenticated")


async def test_a_tenant_key_on_the_operations_api_is_403(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    for method, path, body in [
        ("GET", "/v1/admin/dead-letters", None),
        ("POST", "/v1/admin/dead-letters/replay", {"job_ids": ["gen_x"], "reason": "r"}),
        ("POST", "/v1/admin/pause", {"what": "intake"}),
        ("POST", "/v1/admin/resume", {"what": "intake"}),
    ]:
        response = await http_client.request(method, path, json=body)
        http_problem(response, 403, "forbidden")


async def test_an_admin_key_is_also_a_tenant_key(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    client = http_open_client(http_stack.app(), http_keys.admin)

    created = await client.post("/v1/generations", json=GENERATE)

    assert created.status_code == 202
    job = await http_stack.store.get(created.json()["job_id"])
    assert job is not None
    assert job.tenant_id == "ops"


async def test_the_tenant_is_the_keys_whatever_the_request_says(
    http_client: httpx.AsyncClient, http_stack: HttpStack
) -> None:
    response = await http_client.post(
        "/v1/generations?tenant=globex", json=GENERATE, headers={"X-Tenant-Id": "globex"}
    )

    assert response.status_code == 202
    job = await http_stack.store.get(response.json()["job_id"])
    assert job is not None
    assert job.tenant_id == "acme"


async def test_rate_limit_answers_429_with_retry_after_and_refills(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = http_stack.app(tenant_rate_per_second=0.5, tenant_burst=3)
    acme = http_open_client(app, http_keys.acme)
    globex = http_open_client(app, http_keys.globex)

    allowed = [await acme.post("/v1/generations", json=GENERATE) for _ in range(3)]
    limited = await acme.post("/v1/generations", json=GENERATE)

    assert [r.status_code for r in allowed] == [202, 202, 202]
    http_problem(limited, 429, "rate_limited")
    assert limited.headers["Retry-After"] == "2"  # one token at 0.5/s
    assert len((await http_stack.store.list_jobs(tenant_id="acme")).jobs) == 3
    # Another tenant has its own bucket.
    assert (await globex.post("/v1/generations", json=GENERATE)).status_code == 202

    http_stack.clock.advance(2.0)
    assert (await acme.post("/v1/generations", json=GENERATE)).status_code == 202
    assert (await acme.post("/v1/generations", json=GENERATE)).status_code == 429


async def test_reads_never_spend_the_submission_budget(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    """A client polling its own jobs can still submit and cancel (issue 5, item 10)."""
    app = http_stack.app(
        tenant_rate_per_second=1.0,
        tenant_burst=2,
        tenant_read_rate_per_second=1.0,
        tenant_read_burst=5,
    )
    acme = http_open_client(app, http_keys.acme)
    job_id = (await acme.post("/v1/generations", json=GENERATE)).json()["job_id"]

    polls = [await acme.get(f"/v1/generations/{job_id}") for _ in range(5)]
    over_read = await acme.get("/v1/generations")
    cancel = await acme.post(f"/v1/generations/{job_id}/cancel")

    assert [r.status_code for r in polls] == [200] * 5
    http_problem(over_read, 429, "rate_limited")
    assert cancel.status_code == 200  # the second of two submission tokens
    # Submissions and cancels share one budget, now spent; reads are refused apart.
    http_problem(await acme.post("/v1/generations", json=GENERATE), 429, "rate_limited")
    http_problem(await acme.get(f"/v1/generations/{job_id}/events"), 429, "rate_limited")


async def test_every_authenticated_response_states_its_budget(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    """RateLimit / RateLimit-Policy as draft-ietf-httpapi-ratelimit-headers-11 spells them."""
    app = http_stack.app(
        tenant_rate_per_second=50.0,
        tenant_burst=100,
        tenant_read_rate_per_second=2.0,
        tenant_read_burst=2,
    )
    acme = http_open_client(app, http_keys.acme)

    submitted = await acme.post("/v1/generations", json=GENERATE)
    first = await acme.get("/v1/generations")
    missing = await acme.get("/v1/generations/gen_nope")  # errors say it too
    refused = await acme.get("/v1/generations")

    assert submitted.headers["RateLimit-Policy"] == '"submit";q=100;w=2'
    assert submitted.headers["RateLimit"] == '"submit";r=99;t=1'
    assert first.headers["RateLimit-Policy"] == '"read";q=2;w=1'
    assert first.headers["RateLimit"] == '"read";r=1;t=1'
    assert missing.status_code == 404
    assert missing.headers["RateLimit"] == '"read";r=0;t=1'
    assert refused.status_code == 429
    assert refused.headers["RateLimit"] == '"read";r=0;t=1'
    assert refused.headers["Retry-After"] == "1"
    # An anonymous caller has no budget to report.
    anonymous = await http_open_client(app).get("/v1/generations")
    assert anonymous.status_code == 401
    assert "RateLimit" not in anonymous.headers


async def test_unauthenticated_requests_do_not_spend_a_tenants_budget(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app(tenant_rate_per_second=1.0, tenant_burst=1)
    anonymous = http_open_client(app, tamper(http_keys.acme))
    for _ in range(5):
        assert (await anonymous.post("/v1/generations", json=GENERATE)).status_code == 401

    acme = http_open_client(app, http_keys.acme)
    assert (await acme.post("/v1/generations", json=GENERATE)).status_code == 202


async def test_a_rate_of_zero_turns_the_budget_off(http_client: httpx.AsyncClient) -> None:
    # http_client's app sets both rates to 0 (tests/integration/conftest.py).
    responses = [await http_client.get("/v1/generations") for _ in range(50)]

    assert {r.status_code for r in responses} == {200}
    assert "RateLimit" not in responses[-1].headers


async def test_the_default_budgets_are_the_deployments(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    # AppDeps left to its defaults budgets as a deployment that sets nothing does.
    given = http_stack.deps()
    app = create_app(
        AppDeps(
            intake=given.intake,
            jobs=given.jobs,
            operations=given.operations,
            api_keys=given.api_keys,
            usage=given.usage,
            clock=given.clock,
        )
    )
    acme = http_open_client(app, http_keys.acme)
    settings = Settings()
    submitted = await acme.post("/v1/generations", json=GENERATE)
    listed = await acme.get("/v1/generations")
    assert submitted.headers["RateLimit-Policy"].startswith(f'"submit";q={settings.tenants.burst};')
    assert listed.headers["RateLimit-Policy"] == (
        f'"read";q={settings.tenants.read_burst};'
        f"w={settings.tenants.read_burst // int(settings.tenants.read_rate_per_second)}"
    )


# --- ApiKeys, the service behind the Bearer check ---------------------------------


async def test_keys_are_shown_once_and_stored_hashed(http_stack: HttpStack) -> None:
    key = await http_stack.api_keys.create("acme", admin=True)

    prefix, key_id, secret = key.split("_", 2)
    assert prefix == "fm"
    assert len(key_id) == 12
    int(key_id, 16)
    assert len(secret) >= 40
    record = await http_stack.keys.find_key(key_id)
    assert record is not None
    assert record.secret_hash == hashlib.sha256(key.encode()).hexdigest()
    assert secret not in repr(record)
    principal = await http_stack.api_keys.authenticate(key)
    assert (principal.tenant_id, principal.key_id, principal.admin) == ("acme", key_id, True)


async def test_two_keys_are_different(http_stack: HttpStack) -> None:
    first = await http_stack.api_keys.create("acme")
    second = await http_stack.api_keys.create("acme")

    assert first != second
    assert (await http_stack.api_keys.authenticate(second)).admin is False


@pytest.mark.parametrize("token", ["", "fm__", "fm_0123456789ab_", "xx_0123456789ab_" + "a" * 43])
async def test_authenticate_refuses_garbage(http_stack: HttpStack, token: str) -> None:
    with pytest.raises(AuthenticationError):
        await http_stack.api_keys.authenticate(token)


async def test_authenticate_refuses_a_tampered_secret(http_stack: HttpStack) -> None:
    key = await http_stack.api_keys.create("acme")

    with pytest.raises(AuthenticationError):
        await http_stack.api_keys.authenticate(tamper(key))


@pytest.mark.parametrize("tenant", ["", "a" * 65, "acme corp", "ac/me", "acmé"])
async def test_tenant_names_are_checked(http_stack: HttpStack, tenant: str) -> None:
    with pytest.raises(InvalidRequestError):
        await http_stack.api_keys.create(tenant)


@pytest.mark.parametrize("tenant", ["a", "a" * 64, "Acme.Corp_2-eu"])
async def test_good_tenant_names_are_taken(http_stack: HttpStack, tenant: str) -> None:
    key = await http_stack.api_keys.create(tenant)

    assert (await http_stack.api_keys.authenticate(key)).tenant_id == tenant
