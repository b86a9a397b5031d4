"""Text no engine can store is refused at the edge (issue 5, item 3), and every
free-text field has a length limit.

Rule: any string in any request body (keys and values, at any depth, on every route)
holding a lone surrogate or NUL is a 422 ``invalid_request`` whose ``errors`` name
the field's ``loc``, before anything is hashed or stored. Headers and query strings
cannot smuggle such text in either (they arrive as latin-1 and percent-decoding
replaces bad bytes), and the headers ferryman reads are checked or ignored.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.tasks.builtin import MAX_PROMPT_CHARS, MAX_SYSTEM_CHARS, MAX_TICKET_CHARS

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx

    from ferryman.wiring import Runtime

    Problem = Callable[[httpx.Response, int, str], dict[str, Any]]

JSON = {"Content-Type": "application/json"}
LONE_SURROGATE = "\\ud800"  # as JSON writes it: an escape, decoded by the parser
TEXT_MESSAGE = "must be valid text"


def raw_body(template: str, bad: str = LONE_SURROGATE) -> bytes:
    return template.replace("BAD", bad).encode("utf-8")


SUBMISSIONS = [
    pytest.param(
        '{"task": "generate", "input": {"prompt": "hi", "system": "BAD"}}',
        ["body", "input", "system"],
        id="input.system",
    ),
    pytest.param(
        '{"task": "generate", "input": {"prompt": "aBADb"}}',
        ["body", "input", "prompt"],
        id="input.prompt",
    ),
    pytest.param('{"task": "BAD", "input": {"prompt": "hi"}}', ["body", "task"], id="task"),
    pytest.param(
        '{"task": "generate", "input": {"prompt": "hi"}, "model": "simBAD"}',
        ["body", "model"],
        id="model",
    ),
    pytest.param(
        '{"task": "generate", "input": {"prompt": "hi"}, "metadata": {"tags": ["ok", "BAD"]}}',
        ["body", "metadata", "tags", 1],
        id="metadata list item",
    ),
    pytest.param(
        '{"task": "generate", "input": {"prompt": "hi"}, "metadata": {"a": {"kBAD": 1}}}',
        ["body", "metadata", "a"],
        id="an object key",
    ),
    pytest.param(
        '{"task": "generate", "input": {"prompt": "hi", "BAD": 1}}',
        ["body", "input"],
        id="an unknown key",
    ),
]


@pytest.mark.parametrize(("template", "loc"), SUBMISSIONS)
@pytest.mark.parametrize("bad", [LONE_SURROGATE, "\\udfff", "\\u0000"])
async def test_invalid_text_anywhere_in_a_submission_is_422_with_its_loc(
    hostile_client: Callable[..., httpx.AsyncClient],
    hostile_runtime: Runtime,
    problem: Problem,
    template: str,
    loc: list[Any],
    bad: str,
) -> None:
    response = await hostile_client().post(
        "/v1/generations", content=raw_body(template, bad), headers=JSON
    )

    problem = problem(response, 422, "invalid_request")
    assert [e["loc"] for e in problem["errors"]] == [loc]
    assert TEXT_MESSAGE in problem["errors"][0]["msg"]
    assert (await hostile_runtime.store.store.list_jobs(tenant_id="acme")).jobs == []


async def test_raw_surrogate_bytes_are_refused_like_escaped_ones(
    hostile_client: Callable[..., httpx.AsyncClient],
    problem: Problem,
) -> None:
    # CESU-style bytes: not UTF-8, yet Python's json module lets them through.
    body = b'{"task": "generate", "input": {"prompt": "hi", "system": "\xed\xa0\x80"}}'

    response = await hostile_client().post("/v1/generations", content=body, headers=JSON)

    problem = problem(response, 422, "invalid_request")
    assert problem["errors"][0]["loc"] in (["body"], ["body", "input", "system"])


async def test_a_valid_surrogate_pair_is_ordinary_text(
    hostile_client: Callable[..., httpx.AsyncClient],
) -> None:
    body = raw_body('{"task": "generate", "input": {"prompt": "hi", "system": "\\ud83d\\ude00"}}')

    response = await hostile_client().post("/v1/generations", content=body, headers=JSON)

    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    ("path", "template", "loc"),
    [
        (
            "/v1/admin/dead-letters/replay",
            '{"job_ids": ["gen_1"], "reason": "BAD"}',
            ["body", "reason"],
        ),
        (
            "/v1/admin/dead-letters/replay",
            '{"job_ids": ["gen_BAD"], "reason": "r"}',
            ["body", "job_ids", 0],
        ),
        ("/v1/admin/pause", '{"what": "BAD"}', ["body", "what"]),
    ],
)
async def test_every_route_with_a_body_refuses_invalid_text(
    hostile_client: Callable[..., httpx.AsyncClient],
    problem: Problem,
    path: str,
    template: str,
    loc: list[Any],
) -> None:
    response = await hostile_client(admin=True).post(path, content=raw_body(template), headers=JSON)

    problem = problem(response, 422, "invalid_request")
    assert [e["loc"] for e in problem["errors"]] == [loc]


@pytest.mark.parametrize(
    ("task", "field", "limit"),
    [
        ("generate", "prompt", MAX_PROMPT_CHARS),
        ("generate", "system", MAX_SYSTEM_CHARS),
        ("classify_ticket", "ticket", MAX_TICKET_CHARS),
    ],
)
async def test_every_free_text_field_has_a_length_limit(
    hostile_client: Callable[..., httpx.AsyncClient],
    problem: Problem,
    task: str,
    field: str,
    limit: int,
) -> None:
    def body(length: int) -> dict[str, Any]:
        given = {"prompt": "hi"} if task == "generate" else {}
        return {"task": task, "input": {**given, field: "x" * length}}

    client = hostile_client()
    at_limit = await client.post("/v1/generations", json=body(limit))
    over = await client.post("/v1/generations", json=body(limit + 1))

    assert at_limit.status_code == 202, at_limit.text
    problem = problem(over, 422, "invalid_request")
    assert [e["loc"] for e in problem["errors"]] == [["body", "input", field]]


async def test_a_non_ascii_idempotency_key_is_400(
    hostile_client: Callable[..., httpx.AsyncClient], problem: Problem
) -> None:
    response = await hostile_client().post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi"}},
        headers={"Idempotency-Key": "caf\xe9".encode("latin-1")},  # type: ignore[dict-item]
    )

    problem(response, 400, "invalid_idempotency_key")


async def test_an_unusable_correlation_id_or_traceparent_is_replaced_not_echoed(
    hostile_client: Callable[..., httpx.AsyncClient],
) -> None:
    response = await hostile_client().post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi"}},
        headers={
            "X-Correlation-Id": "bad\x1b[31mid",
            "traceparent": "00-" + "z" * 32 + "-" + "0" * 16 + "-01",
        },
    )

    assert response.status_code == 202, response.text
    assert response.headers["X-Correlation-Id"].startswith("cor_")
    assert response.json()["correlation_id"] == response.headers["X-Correlation-Id"]


@pytest.mark.parametrize("query", ["cursor=%ED%A0%80", "cursor=%00", "task=%ED%A0%80%00"])
async def test_undecodable_query_strings_are_never_a_server_error(
    hostile_client: Callable[..., httpx.AsyncClient], query: str
) -> None:
    response = await hostile_client().get(f"/v1/generations?{query}")

    assert response.status_code < 500, response.text
    json.loads(response.text)  # whatever the answer, it is JSON that encodes
