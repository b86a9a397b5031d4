"""A cancel reaches the worker in another process at once, on every shared engine.

``ferryman api`` and ``ferryman worker`` run as separate processes over one database
(a SQLite file; a PostgreSQL database). The worker's periodic cancel check, its
heartbeat and the call's timeout are set far beyond the test's deadline, so a call
stopped within the deadline was stopped by the cancel hint the api process sent (a
datagram beside the SQLite file; NOTIFY on PostgreSQL), and by nothing else.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

# Neither the periodic check, the heartbeat nor the call's timeout comes within the test.
PERIODIC_CHECK_SECONDS = 600
# Generous against a loaded machine, far inside all of those.
CANCEL_DEADLINE_SECONDS = 20
STARTUP_SECONDS = 60
SLOW_CALL_MS = 600_000


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # A unix socket path must stay short: pytest's tmp_path can be too long for one.
    path = Path(tempfile.mkdtemp(prefix="fm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgresql"])
def database(request: pytest.FixtureRequest, short_dir: Path) -> dict[str, str]:
    """The settings that put both processes on one database of the engine."""
    if request.param == "sqlite":
        return {
            "FERRYMAN_DATABASE_URL": f"sqlite:///{short_dir / 'f.db'}",
            "FERRYMAN_RESULTS_URL": f"file://{short_dir / 'results'}",
        }
    scratch: Callable[[], str] = request.getfixturevalue("postgres_scratch")
    return {"FERRYMAN_DATABASE_URL": scratch(), "FERRYMAN_RESULTS_URL": "db"}


def _env(database: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(database)
    env.update(
        FERRYMAN_CANCEL_CHECK_SECONDS=str(PERIODIC_CHECK_SECONDS),
        FERRYMAN_HEARTBEAT_INTERVAL_SECONDS=str(PERIODIC_CHECK_SECONDS),
        FERRYMAN_LEASE_SECONDS=str(PERIODIC_CHECK_SECONDS * 2),
        FERRYMAN_VISIBILITY_TIMEOUT_SECONDS=str(PERIODIC_CHECK_SECONDS * 2),
        FERRYMAN_PROVIDER_TIMEOUT_SECONDS=str(PERIODIC_CHECK_SECONDS),
        FERRYMAN_LOG_LEVEL="WARNING",
        FERRYMAN_SIM_SCRIPTS="true",  # slow calls are scripted (input.simulate)
    )
    return env


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


def _start(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        _ferryman(*args),
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _stop(process: subprocess.Popen[str]) -> str:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        _, err = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        _, err = process.communicate(timeout=30)
    return err


def _until(check: Callable[[], bool], *, seconds: float, what: str) -> float:
    """Poll ``check`` until true; how long it took."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < seconds, f"{what} not within {seconds} s"
        time.sleep(0.02)
    return time.monotonic() - started


def _ready(client: httpx.Client, api: subprocess.Popen[str]) -> bool:
    assert api.poll() is None, f"the api exited early: {_stop(api)}"
    try:
        return client.get("/readyz").status_code == 200
    except httpx.TransportError:
        return False


def _status(client: httpx.Client, job_id: str) -> str:
    return str(client.get(f"/v1/generations/{job_id}").json()["status"])


def _at(text: str) -> float:
    return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def test_a_cancel_stops_the_call_in_the_worker_process_long_before_its_periodic_check(
    database: dict[str, str], short_dir: Path
) -> None:
    env = _env(database)
    made = subprocess.run(
        _ferryman("keys", "create", "--tenant", "me"),
        cwd=short_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    port = _free_port()
    api = _start(short_dir, env, "api", "--port", str(port))
    worker = _start(short_dir, env, "worker", "--concurrency", "4", "--no-sweeper")
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {made.stdout.strip()}"},
            timeout=10,
        ) as client:
            _until(lambda: _ready(client, api), seconds=STARTUP_SECONDS, what="api ready")
            body = {"prompt": "hold", "simulate": {"latency_ms": SLOW_CALL_MS}}
            submitted = client.post("/v1/generations", json={"task": "generate", "input": body})
            assert submitted.status_code == 202, submitted.text
            job_id = submitted.json()["job_id"]
            _until(
                lambda: _status(client, job_id) == "PROCESSING",
                seconds=STARTUP_SECONDS,
                what="the worker's claim",
            )

            cancelled = client.post(f"/v1/generations/{job_id}/cancel")
            assert cancelled.status_code == 200, cancelled.text
            assert cancelled.json()["status"] == "PROCESSING"  # the worker must stop it
            _until(
                lambda: _status(client, job_id) == "CANCELLED",
                seconds=CANCEL_DEADLINE_SECONDS,
                what="CANCELLED",
            )
            history = client.get(f"/v1/generations/{job_id}/events").json()
    finally:
        worker_err = _stop(worker)
        api_err = _stop(api)
    [attempt] = history["attempts"]
    # The call itself was stopped (it had ten minutes to go), by the worker, at once.
    assert (attempt["outcome"], attempt["error_code"]) == ("cancelled", None), worker_err
    assert attempt["latency_ms"] < CANCEL_DEADLINE_SECONDS * 1000
    requested = next(e for e in history["events"] if e["kind"] == "CANCEL_REQUESTED")
    assert _at(attempt["ended_at"]) - _at(requested["at"]) < CANCEL_DEADLINE_SECONDS
    assert worker.returncode == 0, worker_err
    assert api.returncode == 0, api_err
