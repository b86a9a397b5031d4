"""A real `ferryman serve` whose active results segment is damaged between batches.

Truncated, changed in place, deleted: no GET ever answers with another job's output;
a damaged result answers 500 (`result_unreadable`); a list still serves every other
job; and jobs that finish after the damage are readable.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import pytest

from ferryman.core.errors import ResultUnreadableError
from ferryman.http.error_map import STATUS_TABLE

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

STARTUP_TIMEOUT_SECONDS = 30
FINISH_TIMEOUT_SECONDS = 60
BATCH = 10
# 500 `result_unreadable` once the HTTP layer maps the error; a bare 500 before.
UNREADABLE_CODES = {"result_unreadable"} | (
    set() if ResultUnreadableError in STATUS_TABLE else {"internal_error"}
)


@dataclass
class Server:
    url: str
    client: httpx.Client
    results: Path
    process: subprocess.Popen[str]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    # This test reads every job after every step; the per-tenant budgets are not its subject.
    env.update(FERRYMAN_TENANT_RATE_PER_SECOND="0", FERRYMAN_TENANT_READ_RATE_PER_SECOND="0")
    port = _free_port()
    process = subprocess.Popen(
        _ferryman("serve", "--port", str(port)),
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, process)
        key = subprocess.run(
            _ferryman("keys", "create", "--tenant", "me"),
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        with httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=30
        ) as client:
            yield Server(url, client, tmp_path / "ferryman-results", process)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate(timeout=30)


def _wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"serve exited early: {process.communicate(timeout=10)[1]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail("serve did not become healthy in time")


def _prompt(job_name: str) -> str:
    return f"the output of {job_name} and no other"


def _expected(job_name: str) -> dict[str, str]:
    return {"text": "echo: " + _prompt(job_name)}


def _run_batch(server: Server, label: str) -> dict[str, str]:
    """Submit a batch and wait until each job is finished; job_id -> job name."""
    jobs: dict[str, str] = {}
    for i in range(BATCH):
        name = f"{label}-{i}"
        response = server.client.post(
            "/v1/generations", json={"task": "generate", "input": {"prompt": _prompt(name)}}
        )
        assert response.status_code == 202, response.text
        jobs[response.json()["job_id"]] = name
    deadline = time.monotonic() + FINISH_TIMEOUT_SECONDS
    pending = set(jobs)
    while pending:
        assert time.monotonic() < deadline, f"jobs still unfinished: {pending}"
        for job_id in list(pending):
            response = server.client.get(f"/v1/generations/{job_id}")
            if response.status_code != 200 or response.json()["status"] == "SUCCEEDED":
                pending.discard(job_id)
        time.sleep(0.05)
    return jobs


def _check_reads(server: Server, jobs: dict[str, str], *, unreadable: set[str]) -> None:
    """Each job answers its own output, or 500 when it is one of ``unreadable``."""
    for job_id, name in jobs.items():
        response = server.client.get(f"/v1/generations/{job_id}")
        if job_id in unreadable:
            assert response.status_code == 500, (name, response.text)
            assert response.json()["code"] in UNREADABLE_CODES
        else:
            assert response.status_code == 200, (name, response.text)
            body = response.json()
            assert (body["status"], body["result"]) == ("SUCCEEDED", _expected(name))


def _active_segment(server: Server) -> Path:
    return max(server.results.glob("*.results"), key=lambda path: path.name)


def test_a_damaged_segment_never_serves_another_job_s_result(server: Server) -> None:
    first = _run_batch(server, "a")
    _check_reads(server, first, unreadable=set())

    # Truncated under the writer: what it held is gone; what comes next is readable.
    os.truncate(_active_segment(server), 0)
    second = _run_batch(server, "b")
    _check_reads(server, first, unreadable=set(first))
    _check_reads(server, second, unreadable=set())

    # Bytes changed in place (same length, same file): that one job is unreadable.
    segment = _active_segment(server)
    victim_id, victim = next(iter(second.items()))
    content = segment.read_bytes()
    needle = ("echo: " + _prompt(victim)).encode()
    at = content.index(needle)
    with segment.open("r+b") as handle:
        handle.seek(at)
        handle.write(needle.upper())
    third = _run_batch(server, "c")
    _check_reads(server, second, unreadable={victim_id})
    _check_reads(server, third, unreadable=set())

    # Deleted under the writer: its jobs are unreadable, new jobs land somewhere readable.
    segment.unlink()
    fourth = _run_batch(server, "d")
    _check_reads(server, {**second, **third}, unreadable=set(second) | set(third))
    _check_reads(server, fourth, unreadable=set())

    # A list serves everyone, each damaged item carrying its own error.
    everyone = {**first, **second, **third, **fourth}
    listed = server.client.get("/v1/generations", params={"limit": 200})
    assert listed.status_code == 200
    items = {item["job_id"]: item for item in listed.json()["data"]}
    assert set(items) == set(everyone)
    for job_id, item in items.items():
        if job_id in fourth:
            assert item["result"] == _expected(everyone[job_id])
            assert item["result_error"] is None
        else:
            assert item["result"] is None, everyone[job_id]
            assert item["result_error"]["code"] == "result_unreadable"

    # What the store made is the owner's alone.
    assert stat.S_IMODE(server.results.stat().st_mode) == 0o700
    for path in server.results.glob("*.results"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
