"""A batch body is parsed off the event loop, a few at a time, and charged by its size
(issue 18, item 8).

The parse is held at a gate (a threading.Event) inside its thread while the test
asks the app for something else: what answers meanwhile shows the loop was free.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import TYPE_CHECKING, Any

from ferryman.http import batch_bodies
from ferryman.http.batch_bodies import BatchParser, parse_batch

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    import pytest
    from fastapi import FastAPI
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck

BATCH = "/v1/generations/batch"
# A gate never waits longer than this, so a test that fails cannot hang.
GATE_SECONDS = 30.0


def job(prompt: str = "hi") -> dict[str, Any]:
    return {"task": "generate", "input": {"prompt": prompt}}


async def eventually(condition: Callable[[], bool]) -> None:
    for _ in range(int(GATE_SECONDS / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"not true within {GATE_SECONDS} s")


class Gate:
    """Holds the first ``held`` callers until released; counts who is inside."""

    def __init__(self, held: int = 1) -> None:
        self.held = held
        self.inside = 0
        self.arrived = threading.Semaphore(0)
        self.release = threading.Event()
        self._lock = threading.Lock()

    def pass_through(self) -> None:
        with self._lock:
            self.inside += 1
            hold = self.held > 0
            self.held -= 1
        self.arrived.release()
        if hold:
            self.release.wait(GATE_SECONDS)
        with self._lock:
            self.inside -= 1

    async def wait_arrivals(self, count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(self.arrived.acquire, True, GATE_SECONDS)


async def test_a_batch_being_parsed_leaves_the_loop_to_other_requests(
    http_client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate()
    real = batch_bodies._item

    def gated_item(*args: Any, **kwargs: Any) -> Any:
        gate.pass_through()  # the first job's reading waits at the gate
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_bodies, "_item", gated_item)
    batch = asyncio.create_task(http_client.post(BATCH, json={"jobs": [job("a"), job("b")]}))
    await gate.wait_arrivals(1)

    health = await http_client.get("/healthz")
    submitted = await http_client.post("/v1/generations", json=job("single"))

    assert health.status_code == 200
    assert submitted.status_code == 202
    assert not batch.done()  # still held inside its parse
    gate.release.set()
    assert (await batch).status_code == 200


async def test_only_so_many_bodies_are_parsed_at_once(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    app = http_stack.app(batch_turns=2)
    gate = Gate(held=4)

    def gated_parse(raw: bytes, max_item_bytes: int) -> Any:
        gate.pass_through()
        return parse_batch(raw, max_item_bytes)

    parser = app.state.batch_parser = BatchParser(at_once=2, parse=gated_parse)
    client = http_open_client(app, http_keys.acme)
    batches = [
        asyncio.create_task(client.post(BATCH, json={"jobs": [job(str(i))]})) for i in range(4)
    ]

    await gate.wait_arrivals(2)
    await eventually(lambda: parser.waiting == 2)  # the other two wait for a slot

    assert gate.inside == 2
    gate.release.set()
    assert [r.status_code for r in await asyncio.gather(*batches)] == [200] * 4


def _app(stack: HttpStack, **overrides: Any) -> FastAPI:
    settings: dict[str, Any] = {
        "max_body_bytes": 1000,
        "tenant_rate_per_second": 1.0,
        "tenant_burst": 100,
    }
    return stack.app(**(settings | overrides))


def _remaining(response: httpx.Response) -> int:
    return int(response.headers["RateLimit"].split("r=")[1].split(";")[0])


async def test_a_batch_costs_its_jobs_or_its_bytes_whichever_is_more(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    client = http_open_client(_app(http_stack), http_keys.acme)

    # Two jobs padded to 4,9xx bytes: five single bodies' worth of bytes.
    two = json.dumps(job("w" * 900))
    body = f'{{"jobs": [{two},{" " * 3000}{two}]}}'.encode()
    assert 4000 < len(body) <= 5000
    large = await client.post(BATCH, content=body, headers={"Content-Type": "application/json"})
    assert large.status_code == 200
    assert len(large.json()["results"]) == 2
    assert _remaining(large) == 100 - 5
    # Twenty small jobs in a few hundred bytes: twenty.
    many = await client.post(BATCH, json={"jobs": [job(str(i)) for i in range(20)]})
    assert many.status_code == 200
    assert _remaining(many) == 95 - 20


async def test_a_refused_batch_still_costs_its_bytes(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    client = http_open_client(_app(http_stack), http_keys.acme)
    garbage = b"[" + b"0," * 5_000 + b"0]"  # 10,003 bytes, not a batch

    refused = await client.post(
        BATCH, content=garbage, headers={"Content-Type": "application/json"}
    )
    not_json = await client.post(
        BATCH, content=b"{" * 2_500, headers={"Content-Type": "application/json"}
    )

    http_problem(refused, 422, "invalid_request")
    assert _remaining(refused) == 100 - 11
    http_problem(not_json, 422, "invalid_request")
    assert _remaining(not_json) == 89 - 3


async def test_a_batch_whose_bytes_the_budget_lacks_is_not_parsed(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    app = _app(http_stack, tenant_burst=10, max_batch_body_bytes=100_000)
    parsed: list[int] = []

    def counting_parse(raw: bytes, max_item_bytes: int) -> Any:
        parsed.append(len(raw))
        return parse_batch(raw, max_item_bytes)

    app.state.batch_parser = BatchParser(parse=counting_parse)
    client = http_open_client(app, http_keys.acme)
    assert (await client.post(BATCH, json={"jobs": [job()] * 8})).status_code == 200
    body = json.dumps({"jobs": [job("w" * 900) for _ in range(5)]}).encode()

    refused = await client.post(BATCH, content=body, headers={"Content-Type": "application/json"})

    http_problem(refused, 429, "rate_limited")
    assert len(parsed) == 1  # the first batch only
