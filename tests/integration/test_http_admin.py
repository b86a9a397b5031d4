"""The operations API: dead letters, replay, pause and resume (admin keys only)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

GENERATE = {"task": "generate", "input": {"prompt": "hello"}}


class Clients:
    def __init__(
        self, stack: HttpStack, keys: HttpKeys, open_client: Callable[..., httpx.AsyncClient]
    ) -> None:
        app = stack.app()
        self.acme = open_client(app, keys.acme)
        self.globex = open_client(app, keys.globex)
        self.admin = open_client(app, keys.admin)
        self.admin_key_id = keys.admin.split("_")[1]


@pytest.fixture
def clients(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> Clients:
    return Clients(http_stack, http_keys, http_open_client)


async def submit(client: httpx.AsyncClient, prompt: str = "hello") -> str:
    response = await client.post(
        "/v1/generations", json={"task": "generate", "input": {"prompt": prompt}}
    )
    assert response.status_code == 202, response.text
    job_id: str = response.json()["job_id"]
    return job_id


async def test_dead_letters_lists_dead_lettered_jobs_across_tenants(
    clients: Clients, http_stack: HttpStack
) -> None:
    done = await submit(clients.acme, "fine")
    await http_stack.run_worker()
    stuck_acme = await submit(clients.acme, "stuck one")
    stuck_globex = await submit(clients.globex, "stuck two")
    await http_stack.dead_letter(stuck_acme)

    response = await clients.admin.get("/v1/admin/dead-letters")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"data", "next_cursor", "undecodable_letters"}
    assert body["undecodable_letters"] == 0
    listed = {job["job_id"]: job for job in body["data"]}
    assert set(listed) == {stuck_acme, stuck_globex}
    assert done not in listed
    assert listed[stuck_acme]["tenant_id"] == "acme"
    assert listed[stuck_globex]["tenant_id"] == "globex"
    for job in listed.values():
        assert job["status"] == "FAILED"
        assert job["error"]["code"] == "dead_lettered"
        assert job["error"]["class"] == "DELIVERY"


async def test_dead_letters_paginate(clients: Clients, http_stack: HttpStack) -> None:
    stuck = [await submit(clients.acme, f"stuck {i}") for i in range(3)]
    await http_stack.dead_letter(stuck[0])

    first = (await clients.admin.get("/v1/admin/dead-letters", params={"limit": 2})).json()
    second = (
        await clients.admin.get(
            "/v1/admin/dead-letters", params={"limit": 2, "cursor": first["next_cursor"]}
        )
    ).json()

    assert len(first["data"]) == 2
    assert first["next_cursor"] is not None
    assert [j["job_id"] for j in first["data"] + second["data"]] == list(reversed(stuck))
    assert second["next_cursor"] is None


async def test_replay_restarts_dead_letters_and_skips_the_rest(
    clients: Clients, http_stack: HttpStack
) -> None:
    done = await submit(clients.acme, "fine")
    await http_stack.run_worker()
    stuck = await submit(clients.acme, "stuck")
    await http_stack.dead_letter(stuck)
    unknown = "gen_01HZZZZZZZZZZZZZZZZZZZZZZZ"

    response = await clients.admin.post(
        "/v1/admin/dead-letters/replay",
        json={"job_ids": [stuck, done, unknown], "reason": "fixed the poison payload bug"},
    )

    assert response.status_code == 200
    body = response.json()
    assert body["replayed"] == [stuck]
    skipped = {entry["job_id"]: entry["reason"] for entry in body["skipped"]}
    assert set(skipped) == {done, unknown}
    assert all(set(entry) == {"job_id", "reason"} for entry in body["skipped"])
    assert "succeeded" in skipped[done].lower()

    events = (await clients.acme.get(f"/v1/generations/{stuck}/events")).json()["events"]
    (replayed,) = [e for e in events if e["kind"] == "REPLAYED"]
    assert replayed["detail"]["actor"] == clients.admin_key_id
    assert replayed["detail"]["reason"] == "fixed the poison payload bug"

    await http_stack.run_worker()
    job = (await clients.acme.get(f"/v1/generations/{stuck}")).json()
    assert job["status"] == "SUCCEEDED"
    assert (await clients.acme.get(f"/v1/generations/{done}")).json()["status"] == "SUCCEEDED"


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        ({"job_ids": [], "reason": "r"}, ["body", "job_ids"]),
        ({"job_ids": ["gen_x"] * 101, "reason": "r"}, ["body", "job_ids"]),
        ({"job_ids": ["gen_x"], "reason": ""}, ["body", "reason"]),
        ({"job_ids": ["gen_x"], "reason": "r" * 501}, ["body", "reason"]),
        ({"job_ids": ["gen_x"]}, ["body", "reason"]),
        ({"job_ids": "gen_x", "reason": "r"}, ["body", "job_ids"]),
        ({"job_ids": ["gen_x"], "reason": "r", "actor": "someone"}, ["body", "actor"]),
    ],
)
async def test_replay_validates_its_body(
    clients: Clients, http_problem: ProblemCheck, body: dict[str, Any], loc: list[str]
) -> None:
    response = await clients.admin.post("/v1/admin/dead-letters/replay", json=body)

    problem = http_problem(response, 422, "invalid_request")
    assert loc in [error["loc"] for error in problem["errors"]]


async def test_replay_accepts_a_hundred_ids(clients: Clients) -> None:
    ids = [f"gen_{i:026d}" for i in range(100)]

    response = await clients.admin.post(
        "/v1/admin/dead-letters/replay", json={"job_ids": ids, "reason": "bulk"}
    )

    assert response.status_code == 200
    assert response.json()["replayed"] == []
    assert len(response.json()["skipped"]) == 100


async def test_paused_intake_answers_503_with_retry_after_until_resumed(
    clients: Clients, http_stack: HttpStack, http_problem: ProblemCheck
) -> None:
    paused = await clients.admin.post("/v1/admin/pause", json={"what": "intake"})
    assert paused.status_code == 200
    assert paused.json() == {"paused": ["intake"]}

    refused = await clients.acme.post("/v1/generations", json=GENERATE)
    http_problem(refused, 503, "paused")
    assert int(refused.headers["Retry-After"]) >= 1
    assert (await http_stack.store.list_jobs(tenant_id="acme")).jobs == []
    # Reading is not paused.
    assert (await clients.acme.get("/v1/generations")).status_code == 200

    resumed = await clients.admin.post("/v1/admin/resume", json={"what": "intake"})
    assert resumed.status_code == 200
    assert resumed.json() == {"paused": []}
    assert (await clients.acme.post("/v1/generations", json=GENERATE)).status_code == 202


async def test_pause_workers_is_recorded(clients: Clients, http_stack: HttpStack) -> None:
    response = await clients.admin.post("/v1/admin/pause", json={"what": "workers"})

    assert response.json() == {"paused": ["workers"]}
    assert {str(s) for s in await http_stack.operations.paused()} == {"workers"}
    # Intake still takes work while workers are paused.
    assert (await clients.acme.post("/v1/generations", json=GENERATE)).status_code == 202


@pytest.mark.parametrize("body", [{"what": "everything"}, {}, {"what": "intake", "x": 1}])
async def test_pause_validates_its_body(
    clients: Clients, http_problem: ProblemCheck, body: dict[str, Any]
) -> None:
    response = await clients.admin.post("/v1/admin/pause", json=body)

    http_problem(response, 422, "invalid_request")


async def test_replay_by_default_skips_model_failures_and_client_cancellations(
    clients: Clients, http_stack: HttpStack
) -> None:
    refused = (
        await clients.acme.post(
            "/v1/generations",
            json={"task": "generate", "input": {"prompt": "p", "simulate": {"script": ["refuse"]}}},
        )
    ).json()["job_id"]
    cancelled = await submit(clients.acme, "never mind")
    await clients.acme.post(f"/v1/generations/{cancelled}/cancel")
    await http_stack.run_worker()

    default = await clients.admin.post(
        "/v1/admin/dead-letters/replay",
        json={"job_ids": [refused, cancelled], "reason": "policy changed"},
    )
    included = await clients.admin.post(
        "/v1/admin/dead-letters/replay",
        json={"job_ids": [refused, cancelled], "reason": "policy changed", "include_failed": True},
    )

    skipped = {e["job_id"]: e["reason"] for e in default.json()["skipped"]}
    assert skipped == {refused: "not_dead_lettered", cancelled: "status_cancelled"}
    assert included.json()["replayed"] == [refused]
    assert included.json()["skipped"] == [{"job_id": cancelled, "reason": "status_cancelled"}]


async def test_pause_resume_and_replay_leave_an_audit_record(
    clients: Clients, http_stack: HttpStack
) -> None:
    stuck = await submit(clients.acme, "stuck")
    await http_stack.dead_letter(stuck)
    await clients.admin.post("/v1/admin/pause", json={"what": "workers", "reason": "provider down"})
    await clients.admin.post("/v1/admin/resume", json={"what": "workers"})
    await clients.admin.post(
        "/v1/admin/dead-letters/replay", json={"job_ids": [stuck], "reason": "provider is back"}
    )

    page = (await clients.admin.get("/v1/admin/audit")).json()

    records = [(r["action"], r["target"], r["reason"], r["actor"]) for r in page["data"]]
    me = clients.admin_key_id
    assert records == [
        ("replay", stuck, "provider is back", me),
        ("resume", "workers", None, me),
        ("pause", "workers", "provider down", me),
    ]
    assert all(r["at"].endswith("Z") for r in page["data"])
    older = (await clients.admin.get("/v1/admin/audit", params={"limit": 1, "before": 3})).json()
    assert [r["action"] for r in older["data"]] == ["resume"]
    assert (await clients.acme.get("/v1/admin/audit")).status_code == 403


@pytest.mark.parametrize("before", [2**63, 2276624062895913172992, 0, -1, "x"])
async def test_an_audit_position_no_record_can_have_is_a_422(
    clients: Clients, before: object
) -> None:
    """Record ids are 64-bit in every engine: a larger one (found by the OpenAPI fuzz,
    which got a 500 from the driver's overflow) is refused like any other bad value."""
    response = await clients.admin.get("/v1/admin/audit", params={"before": before})

    assert response.status_code == 422, response.text
    assert response.json()["code"] == "invalid_request"


async def test_the_largest_audit_position_is_taken(clients: Clients) -> None:
    response = await clients.admin.get("/v1/admin/audit", params={"before": 2**63 - 1})

    assert response.status_code == 200
    assert response.json()["data"] == []


# --- dead letters no worker can read ---------------------------------------------------


async def _undecodable(http_stack: HttpStack, *bodies: str) -> list[str]:
    """Messages written by something other than ferryman (a bug, a newer version, an
    operator), received once: each goes to the dead letters as undecodable."""

    def insert(conn: Any) -> None:
        for n, body in enumerate(bodies):
            at = http_stack.clock.now() + n  # in this order
            conn.execute(
                "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count) "
                "VALUES (?, ?, 't1', ?, ?, 0)",
                (f"raw_{n}", body, at, at),
            )

    await http_stack.db.write(insert)
    http_stack.clock.advance(len(bodies))
    assert await http_stack.queue.receive(max_messages=10, visibility_timeout_seconds=1) == []
    page = await http_stack.queue.undecodable_letters(limit=10)
    return [letter.dead_letter_id for letter in page]


async def test_an_undecodable_dead_letter_is_counted_listed_shown_and_purged(
    clients: Clients, http_stack: HttpStack
) -> None:
    [letter_id] = await _undecodable(http_stack, '{"not": "a job message"}')

    jobs = (await clients.admin.get("/v1/admin/dead-letters")).json()
    listed = (await clients.admin.get("/v1/admin/dead-letters/undecodable")).json()
    shown = await clients.admin.get(f"/v1/admin/dead-letters/undecodable/{letter_id}")

    # The dead-letter queue's depth and the lists agree: no job, one undecodable letter.
    assert (jobs["data"], jobs["undecodable_letters"]) == ([], 1)
    assert (await http_stack.queue.stats()).dead_letters == 1
    [item] = listed["data"]
    assert item["id"] == letter_id
    assert item["body_preview"] == '{"not": "a job message"}'
    assert (item["body_bytes"], item["receive_count"], item["truncated"]) == (24, 0, False)
    assert listed["next_cursor"] is None
    assert shown.status_code == 200
    assert shown.json()["body"] == '{"not": "a job message"}'

    purge = await clients.admin.post(
        "/v1/admin/dead-letters/undecodable/purge",
        json={"dead_letter_ids": [letter_id, "dl_unknown"], "reason": "written by a bug"},
    )

    assert purge.status_code == 200
    assert purge.json() == {"purged": [letter_id], "not_found": ["dl_unknown"]}
    assert (await http_stack.queue.stats()).dead_letters == 0
    audit = (await clients.admin.get("/v1/admin/audit")).json()["data"][0]
    assert (audit["action"], audit["target"], audit["reason"]) == (
        "purge_dead_letter",
        letter_id,
        "written by a bug",
    )
    gone = await clients.admin.get(f"/v1/admin/dead-letters/undecodable/{letter_id}")
    assert gone.status_code == 404


async def test_undecodable_letters_page_in_the_order_they_were_dead_lettered(
    clients: Clients, http_stack: HttpStack
) -> None:
    letter_ids = await _undecodable(http_stack, "first", "[2]", "x" * 500)

    first = (await clients.admin.get("/v1/admin/dead-letters/undecodable?limit=2")).json()
    rest = (
        await clients.admin.get(
            "/v1/admin/dead-letters/undecodable",
            params={"limit": 2, "cursor": first["next_cursor"]},
        )
    ).json()

    assert [i["id"] for i in first["data"] + rest["data"]] == letter_ids
    assert rest["next_cursor"] is None
    [long] = [i for i in first["data"] + rest["data"] if i["body_bytes"] == 500]
    assert (len(long["body_preview"]), long["truncated"]) == (200, True)


@pytest.mark.parametrize("cursor", ["nope", "W10", "WyJhIiwiYiJd", "!!"])
async def test_a_cursor_the_list_never_gave_is_a_422(
    clients: Clients, http_problem: ProblemCheck, cursor: str
) -> None:
    response = await clients.admin.get(
        "/v1/admin/dead-letters/undecodable", params={"cursor": cursor}
    )
    http_problem(response, 422, "invalid_request")


async def test_a_jobs_dead_letter_is_never_purged_as_undecodable(
    clients: Clients, http_stack: HttpStack
) -> None:
    """A job's letter is the sweeper's: it fails the job first. Here it is not found."""
    job_id = await submit(clients.acme)
    for _ in range(11):  # past max_receives, no outcome: the queue dead-letters it
        await http_stack.queue.receive(max_messages=10, visibility_timeout_seconds=1.0)
        http_stack.clock.advance(2.0)
    [letter] = await http_stack.queue.receive_dead_letters(max_messages=10)
    assert letter.message.job_id == job_id

    purge = await clients.admin.post(
        "/v1/admin/dead-letters/undecodable/purge",
        json={"dead_letter_ids": [letter.dead_letter_id], "reason": "oops"},
    )
    shown = await clients.admin.get(f"/v1/admin/dead-letters/undecodable/{letter.dead_letter_id}")

    assert purge.json() == {"purged": [], "not_found": [letter.dead_letter_id]}
    assert shown.status_code == 404
    assert len(await http_stack.queue.receive_dead_letters(max_messages=10)) == 1


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/admin/dead-letters/undecodable"),
        ("GET", "/v1/admin/dead-letters/undecodable/dl_x"),
        ("POST", "/v1/admin/dead-letters/undecodable/purge"),
    ],
)
async def test_undecodable_letters_are_for_admin_keys_only(
    clients: Clients, http_problem: ProblemCheck, method: str, path: str
) -> None:
    body = {"dead_letter_ids": ["dl_x"], "reason": "r"} if method == "POST" else None
    response = await clients.acme.request(method, path, json=body)
    http_problem(response, 403, "forbidden")


@pytest.mark.parametrize(
    "body",
    [{}, {"dead_letter_ids": [], "reason": "r"}, {"dead_letter_ids": ["a"]}, {"x": 1}],
)
async def test_purge_validates_its_body(
    clients: Clients, http_problem: ProblemCheck, body: dict[str, Any]
) -> None:
    response = await clients.admin.post("/v1/admin/dead-letters/undecodable/purge", json=body)
    http_problem(response, 422, "invalid_request")
