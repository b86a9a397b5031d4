"""GET /v1/usage: a tenant's own calls, tokens and cost; operators may ask about anyone."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

# The sim reports whitespace-split words: 3 in, and {"text": "echo: a b c"} is 5 out.
PROMPT = "a b c"


async def _run_jobs(client: httpx.AsyncClient, stack: HttpStack, count: int) -> None:
    for _ in range(count):
        body = {"task": "generate", "input": {"prompt": PROMPT}}
        assert (await client.post("/v1/generations", json=body)).status_code == 202
    await stack.run_worker()
    stack.clock.advance(1)  # a report runs up to now, exclusive


async def test_a_tenant_gets_its_own_exact_usage_and_nobody_elses(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme, globex = http_open_client(app, http_keys.acme), http_open_client(app, http_keys.globex)
    await _run_jobs(acme, http_stack, 3)
    await _run_jobs(globex, http_stack, 1)

    mine = (await acme.get("/v1/usage", params={"group_by": "task"})).json()
    theirs = (await globex.get("/v1/usage", params={"group_by": "model"})).json()

    assert mine["group_by"] == "task"
    assert mine["data"] == [
        {
            "task": "generate",
            "calls": 3,
            "failed_calls": 0,
            "input_tokens": 9,
            "output_tokens": 15,
            "cost_usd": 0.0,
            "wasted_cost_usd": 0.0,
            "unknown_usage_calls": 0,
        }
    ]
    assert mine["total"]["calls"] == 3
    assert [row["model"] for row in theirs["data"]] == ["sim"]
    assert theirs["total"]["calls"] == 1
    assert mine["from"].endswith("Z") and mine["to"].endswith("Z")


async def test_operators_ask_about_any_tenant_and_tenants_cannot(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app()
    acme, admin = http_open_client(app, http_keys.acme), http_open_client(app, http_keys.admin)
    await _run_jobs(acme, http_stack, 2)

    one = (await admin.get("/v1/admin/usage", params={"tenant": "acme"})).json()
    everyone = (await admin.get("/v1/admin/usage")).json()

    assert (one["tenant_id"], one["total"]["calls"]) == ("acme", 2)
    assert everyone["tenant_id"] is None
    assert (await acme.get("/v1/admin/usage")).status_code == 403


async def test_a_bad_period_or_grouping_is_422(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    for params in (
        {"group_by": "week"},
        {"from": "2026-11-30T00:00:00Z", "to": "2026-11-01T00:00:00Z"},
        {"from": "2024-01-01T00:00:00Z", "to": "2026-01-01T00:00:00Z"},
        {"from": "yesterday"},
        {"from": "2026-11-01T00:00:00"},
        {"from": "1764460800"},  # epoch seconds: a time is RFC 3339 and nothing else
        {"from": "2026-11-01"},  # a date is not a time
        {"to": "2026-13-01T00:00:00Z"},
    ):
        http_problem(await http_client.get("/v1/usage", params=params), 422, "invalid_request")


async def test_a_paused_provider_is_resumed_by_an_operator(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    admin = http_open_client(http_stack.app(), http_keys.admin)

    paused = await admin.post(
        "/v1/admin/pause", json={"what": "provider", "provider": "openai", "reason": "key rotated"}
    )
    resumed = await admin.post("/v1/admin/resume", json={"what": "provider", "provider": "openai"})
    unnamed = await admin.post("/v1/admin/pause", json={"what": "provider"})
    misplaced = await admin.post("/v1/admin/pause", json={"what": "intake", "provider": "x"})

    assert paused.json() == {"paused": ["provider:openai"]}
    assert resumed.json() == {"paused": []}
    http_problem(unnamed, 422, "invalid_request")
    http_problem(misplaced, 422, "invalid_request")
    audit = (await admin.get("/v1/admin/audit")).json()["data"]
    assert [(r["action"], r["target"]) for r in audit[:2]] == [
        ("resume", "provider:openai"),
        ("pause", "provider:openai"),
    ]


async def test_times_are_rfc3339_with_any_offset(http_client: httpx.AsyncClient) -> None:
    response = await http_client.get(
        "/v1/usage", params={"from": "2026-11-01t01:00:00.5+01:00", "to": "2026-11-02T00:00:00z"}
    )
    assert response.status_code == 200, response.text
    assert (response.json()["from"], response.json()["to"]) == (
        "2026-11-01T00:00:00.500000Z",
        "2026-11-02T00:00:00.000000Z",
    )


async def test_times_the_api_cannot_write_back_are_422_not_500(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    for params in (
        # The last microsecond of year 9999 is past what a float of epoch seconds holds.
        {"from": "9999-12-31T23:59:59Z", "to": "9999-12-31T23:59:59.999999Z"},
        # The first hour of year 1 at +01:00 is still year 0 in UTC.
        {"from": "0001-01-01T00:30:00+01:00", "to": "0001-01-02T00:00:00Z"},
        # Only an end: the default start, 30 days before it, would be before year 1.
        {"to": "0001-01-02T00:00:00Z"},
        {"from": "1969-12-31T23:59:59Z", "to": "1970-01-02T00:00:00Z"},
    ):
        problem = http_problem(
            await http_client.get("/v1/usage", params=params), 422, "invalid_request"
        )
        assert problem["errors"][0]["loc"][0] == "query"
