"""An API restart costs a client a wait, never a submission: a real `ferryman serve`
stops for ten seconds while the Python client keeps submitting, then comes back;
every submit ends in exactly one job. `ferryman submit` started while nothing
listens says so at once and exits 1 (a wrong address should not cost a minute)."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import TYPE_CHECKING

import httpx
import pytest

from ferryman.client import AsyncClient

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

SUBMITS = 40
DOWN_SECONDS = 10.0
STARTUP_TIMEOUT_SECONDS = 30
STOP_TIMEOUT_SECONDS = 30
# Generous: how long the CLI may take to start and say it cannot reach the API.
SAY_SO_TIMEOUT_SECONDS = 30
FINISH_TIMEOUT_SECONDS = 120


def env(**extra: str) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    return {**base, "FERRYMAN_TENANT_RATE_PER_SECOND": "0", **extra}


def ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(cwd: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        ferryman("serve", "--port", str(port)),
        cwd=cwd,
        env=env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, "ferryman serve exited during start-up"
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    process.kill()
    pytest.fail("ferryman serve did not become healthy in time")


def stop_server(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=STOP_TIMEOUT_SECONDS)


def submit_all_in_background(url: str, key: str) -> tuple[threading.Thread, list[object]]:
    """SUBMITS concurrent submits with the client's default retry budget; each ends as
    its job id or the exception it raised."""
    outcomes: list[object] = []

    async def one(client: AsyncClient, i: int) -> object:
        try:
            job = await client.submit("generate", {"prompt": f"restart {i}"})
        except Exception as exc:  # noqa: BLE001 - the outcome itself is under test
            return exc
        return job.job_id

    async def all_of_them() -> None:
        async with AsyncClient(url, key) as client:
            outcomes.extend(await asyncio.gather(*(one(client, i) for i in range(SUBMITS))))

    thread = threading.Thread(target=lambda: asyncio.run(all_of_them()), daemon=True)
    thread.start()
    return thread, outcomes


def test_submits_ride_out_an_api_restart_and_each_makes_exactly_one_job(tmp_path: Path) -> None:
    key = subprocess.run(
        ferryman("keys", "create", "--tenant", "acme"),
        cwd=tmp_path,
        env=env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start_server(tmp_path, port)
    stop_server(server)
    down_since = time.monotonic()

    cli = subprocess.run(
        ferryman("submit", "--task", "generate", "--input", '{"prompt": "cli"}', "--wait"),
        cwd=tmp_path,
        env=env(FERRYMAN_URL=url, FERRYMAN_API_KEY=key),
        capture_output=True,
        text=True,
        timeout=SAY_SO_TIMEOUT_SECONDS,
        check=False,
    )
    # Said at once, with the address and how to change it; no job, no silent retries.
    assert cli.returncode == 1
    assert cli.stdout == ""
    assert f"cannot reach ferryman at {url} (from FERRYMAN_URL)" in cli.stderr
    assert "--url" in cli.stderr

    submitter, outcomes = submit_all_in_background(url, key)
    server = None
    try:
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - down_since)))
        server = start_server(tmp_path, port)

        submitter.join(timeout=FINISH_TIMEOUT_SECONDS)
        assert not submitter.is_alive(), "the submits did not finish"
        failures = [o for o in outcomes if not isinstance(o, str)]
        assert failures == []
        assert len(set(outcomes)) == SUBMITS
        page = httpx.get(
            f"{url}/v1/generations",
            params={"limit": 200},
            headers={"Authorization": f"Bearer {key}"},
        ).json()
        assert len(page["data"]) == SUBMITS  # one job per submit
        assert page["next_cursor"] is None
    finally:
        if server is not None:
            stop_server(server)
