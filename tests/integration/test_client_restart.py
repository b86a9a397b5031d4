"""An API restart costs a client a wait, never a submission: a real `ferryman serve`
stops for ten seconds while the Python client and `ferryman submit --wait` keep
submitting, then comes back; every submit ends in exactly one job."""

from __future__ import annotations

import asyncio
import json
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

from ferryman.client import Client

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


class Lines:
    """Collects a pipe's lines on a thread, so the test can wait for one while it runs."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line.rstrip("\n"))

    def join(self) -> None:
        """Wait for the end of the stream (the process has exited)."""
        self._thread.join(timeout=STOP_TIMEOUT_SECONDS)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in self.lines):
                return True
            time.sleep(0.05)
        return False


def submit_all_in_background(url: str, key: str) -> tuple[threading.Thread, list[object]]:
    """SUBMITS concurrent submits with the client's default retry budget; each ends as
    its job id or the exception it raised."""
    outcomes: list[object] = []

    async def one(client: Client, i: int) -> object:
        try:
            job = await client.submit("generate", {"prompt": f"restart {i}"})
        except Exception as exc:  # noqa: BLE001 - the outcome itself is under test
            return exc
        return job["job_id"]

    async def all_of_them() -> None:
        async with Client(url, key) as client:
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

    cli = subprocess.Popen(
        ferryman("submit", "--task", "generate", "--input", '{"prompt": "cli"}', "--wait"),
        cwd=tmp_path,
        env=env(FERRYMAN_URL=url, FERRYMAN_API_KEY=key),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    submitter, outcomes = submit_all_in_background(url, key)
    server = None
    stderr = Lines(cli.stderr)
    try:
        # Said at once, while the API is still down, with where the address comes from.
        assert stderr.wait_for(f"cannot reach ferryman at {url}", SAY_SO_TIMEOUT_SECONDS), (
            stderr.lines
        )
        assert any("FERRYMAN_URL" in line for line in stderr.lines)
        time.sleep(max(0.0, DOWN_SECONDS - (time.monotonic() - down_since)))
        server = start_server(tmp_path, port)

        submitter.join(timeout=FINISH_TIMEOUT_SECONDS)
        assert not submitter.is_alive(), "the submits did not finish"
        assert cli.wait(timeout=FINISH_TIMEOUT_SECONDS) == 0, stderr.lines
        assert cli.stdout is not None
        assert json.loads(cli.stdout.read()) == {"text": "echo: cli"}
        assert any("SUCCEEDED" in line for line in stderr.lines)  # --wait showed progress

        failures = [o for o in outcomes if not isinstance(o, str)]
        assert failures == []
        assert len(set(outcomes)) == SUBMITS
        page = httpx.get(
            f"{url}/v1/generations",
            params={"limit": 200},
            headers={"Authorization": f"Bearer {key}"},
        ).json()
        assert len(page["data"]) == SUBMITS + 1  # one job per submit, the CLI's included
        assert page["next_cursor"] is None
    finally:
        if cli.poll() is None:
            cli.kill()
        cli.wait(timeout=STOP_TIMEOUT_SECONDS)
        stderr.join()
        with cli:  # closes its pipes
            pass
        if server is not None:
            stop_server(server)
