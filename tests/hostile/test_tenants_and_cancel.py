"""Real processes: one tenant's flood, a cancel mid-call, a broken results directory.

Each drives a real ``ferryman serve`` over HTTP, the way a hostile tenant or a bad
day would, and checks a promise of issue 5 (items 4, 7, 20) from outside.
"""

from __future__ import annotations

import os
import shutil
import time
from typing import TYPE_CHECKING, Any

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from tests.hostile.conftest import Server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

QUICK = {"task": "generate", "input": {"prompt": "quick"}}


def _slow(seconds: float, prompt: str = "slow") -> dict[str, Any]:
    return {
        "task": "generate",
        "input": {"prompt": prompt, "simulate": {"latency_ms": int(seconds * 1000)}},
    }


@pytest.fixture
def client_for() -> Iterator[Callable[[Server, str], httpx.Client]]:
    """Factory: an HTTP client of a server with a key; closed at teardown."""
    opened: list[httpx.Client] = []

    def open_client(server: Server, key: str) -> httpx.Client:
        client = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {key}"}, timeout=15
        )
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        client.close()


def _submit(client: httpx.Client, body: dict[str, Any]) -> str:
    response = client.post("/v1/generations", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def _until(check: Callable[[], bool], *, seconds: float, what: str) -> float:
    """Poll ``check`` until it holds; how long that took. Fails after ``seconds``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > seconds:
            pytest.fail(f"{what}: not within {seconds} s")
        time.sleep(0.05)
    return time.monotonic() - started


def _status(client: httpx.Client, job_id: str) -> str:
    return str(client.get(f"/v1/generations/{job_id}").json()["status"])


def test_a_tenants_slow_flood_leaves_another_tenants_quick_jobs_quick(
    start_server: Callable[..., Server], client_for: Callable[[Server, str], httpx.Client]
) -> None:
    server = start_server(
        worker_concurrency=16,
        tenant_rate_per_second=0,
        shutdown_grace_seconds=1,
        provider_timeout_seconds=40,
        attempt_timeout_seconds=50,
        lease_seconds=60,
        sim_scripts=True,  # the flood's calls are scripted to last 30 s
    )
    flood = client_for(server, server.key)
    other = client_for(server, server.new_key("other"))
    for i in range(90):
        _submit(flood, _slow(30, f"slow {i}"))
    _until(
        lambda: len(flood.get("/v1/generations?status=PROCESSING").json()["data"]) >= 8,
        seconds=30,
        what="the flood filling its share",
    )

    quick = [_submit(other, QUICK) for _ in range(20)]

    took = _until(
        lambda: all(_status(other, job_id) == "SUCCEEDED" for job_id in quick),
        seconds=15,
        what="the other tenant's 20 quick jobs",
    )
    processing = flood.get("/v1/generations?status=PROCESSING&limit=200").json()["data"]
    assert len(processing) <= 8  # half of the 16 slots, never more
    assert took < 15


def test_a_cancelled_call_ends_cancelled_within_two_seconds_with_no_result(
    start_server: Callable[..., Server], client_for: Callable[[Server, str], httpx.Client]
) -> None:
    server = start_server(shutdown_grace_seconds=1, sim_scripts=True)
    client = client_for(server, server.key)
    job_id = _submit(client, _slow(10))
    _until(lambda: _status(client, job_id) == "PROCESSING", seconds=20, what="the call starting")

    first = client.post(f"/v1/generations/{job_id}/cancel")
    asked = time.monotonic()
    assert first.status_code == 200
    again = client.post(f"/v1/generations/{job_id}/cancel")
    took = _until(lambda: _status(client, job_id) == "CANCELLED", seconds=10, what="cancelled")

    assert time.monotonic() - asked < 2.0, f"took {took:.2f} s"
    job = client.get(f"/v1/generations/{job_id}").json()
    assert job["result"] is None
    history = client.get(f"/v1/generations/{job_id}/events").json()
    kinds = [event["kind"] for event in history["events"]]
    assert kinds.count("CANCEL_REQUESTED") <= 1  # a repeated cancel records nothing
    assert again.status_code in (200, 409)  # 409 only if it was already CANCELLED
    assert [attempt["outcome"] for attempt in history["attempts"]] == ["cancelled"]
    late = client.post(f"/v1/generations/{job_id}/cancel")
    assert (late.status_code, late.json()["code"]) == (409, "already_terminal")


def test_a_cancel_after_the_result_is_published_is_refused(
    start_server: Callable[..., Server], client_for: Callable[[Server, str], httpx.Client]
) -> None:
    server = start_server()
    client = client_for(server, server.key)
    job_id = _submit(client, QUICK)
    _until(lambda: _status(client, job_id) == "SUCCEEDED", seconds=20, what="the job finishing")

    response = client.post(f"/v1/generations/{job_id}/cancel")

    assert (response.status_code, response.json()["code"]) == (409, "already_terminal")
    assert client.get(f"/v1/generations/{job_id}").json()["result"] is not None


def test_a_broken_results_directory_costs_no_extra_calls_and_stops_new_ones(
    start_server: Callable[..., Server], client_for: Callable[[Server, str], httpx.Client]
) -> None:
    server = start_server(shutdown_grace_seconds=1, lease_seconds=30)
    assert server.directory is not None
    results = server.directory / "ferryman-results"
    client = client_for(server, server.key)
    first = _submit(client, QUICK)
    _until(lambda: _status(client, first) == "SUCCEEDED", seconds=20, what="a first result")

    # Break it as a full or read-only disk would (the tests run as root, for whom
    # permissions are no obstacle): the directory is gone and its name is a file.
    shutil.move(results, server.directory / "results-aside")
    results.write_bytes(b"")
    jobs = [_submit(client, QUICK) for _ in range(10)]
    _until(
        lambda: httpx.get(f"{server.url}/readyz", timeout=5).status_code == 503,
        seconds=20,
        what="/readyz noticing",
    )
    time.sleep(2.0)  # time enough to burn calls, were any burned
    ready = httpx.get(f"{server.url}/readyz", timeout=5).json()
    assert ready["checks"]["results"]["ok"] is False

    os.remove(results)
    shutil.move(server.directory / "results-aside", results)
    _until(
        lambda: all(_status(client, job_id) == "SUCCEEDED" for job_id in jobs),
        seconds=60,
        what="every job after the repair",
    )
    for job_id in jobs:
        attempts = client.get(f"/v1/generations/{job_id}/events").json()["attempts"]
        assert [a["outcome"] for a in attempts] == ["succeeded"], job_id  # one paid call each
    assert httpx.get(f"{server.url}/readyz", timeout=5).status_code == 200
    log = server.log()
    assert "results.unavailable" in log and "worker.waiting_for_results" in log
