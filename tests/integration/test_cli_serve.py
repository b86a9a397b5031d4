"""`ferryman serve` (and `api` + `worker`) as real processes, driven by the CLI client."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx
import pytest

from ferryman.config import Settings
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from ferryman.core.job import Attempt

pytestmark = pytest.mark.slow

COMMAND_TIMEOUT_SECONDS = 60
STARTUP_TIMEOUT_SECONDS = 30
STOP_TIMEOUT_SECONDS = 30


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def base_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(extra)
    return env


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


def start(cwd: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command(*args),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop(process: subprocess.Popen[str]) -> tuple[int, str, str]:
    """SIGTERM, then wait; kill if it does not go. Returns (exit code, stdout, stderr)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        out, err = process.communicate(timeout=STOP_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate(timeout=STOP_TIMEOUT_SECONDS)
    return process.returncode, out, err


def wait_healthy(url: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            _, err = process.communicate(timeout=STOP_TIMEOUT_SECONDS)
            pytest.fail(f"the server exited early ({process.returncode}): {err}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail("the server did not become healthy in time")


@dataclass
class Served:
    cwd: Path
    url: str
    env: dict[str, str]  # FERRYMAN_URL and FERRYMAN_API_KEY set for the client commands
    process: subprocess.Popen[str]

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.env['FERRYMAN_API_KEY']}"}

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            command(*args),
            cwd=self.cwd,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )


def create_key(cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        command("keys", "create", "--tenant", "me"),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT_SECONDS,
        check=True,
    )
    return done.stdout.strip()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    port = free_port()
    # A grace far longer than any call the tests make: SIGTERM must let them finish.
    env = base_env(FERRYMAN_SHUTDOWN_GRACE_SECONDS="60", FERRYMAN_SIM_SCRIPTS="true")
    process = start(tmp_path, env, "serve", "--port", str(port))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, process)
        client_env = {**env, "FERRYMAN_URL": url, "FERRYMAN_API_KEY": create_key(tmp_path, env)}
        yield Served(tmp_path, url, client_env, process)
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=STOP_TIMEOUT_SECONDS)


def test_serve_runs_a_job_end_to_end_and_stops_on_sigterm(served: Served) -> None:
    done = served.run("submit", "--task", "generate", "--input", '{"prompt": "hi"}', "--wait")
    assert done.returncode == 0, done.stderr
    assert "hi" in json.loads(done.stdout)["text"]

    code, out, err = stop(served.process)
    assert code == 0, err
    assert out == ""  # serve writes its banner and logs to stderr
    assert served.url in err
    assert "ferryman keys create --tenant me" in err
    assert "ferryman.db" in err


def test_submit_prints_the_job_and_status_finds_it(served: Served) -> None:
    done = served.run("submit", "--task", "generate", "--input", '{"prompt": "hi"}')
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert job["status"] == "QUEUED"

    shown = served.run("status", job["job_id"], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["job_id"] == job["job_id"]


def test_status_of_an_unknown_job_exits_1(served: Served) -> None:
    done = served.run("status", "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert done.returncode == 1
    assert "404" in done.stderr
    assert done.stdout == ""


def test_a_failed_job_prints_its_error_and_exits_1(served: Served) -> None:
    refused = '{"prompt": "hi", "simulate": {"script": ["refuse"]}}'
    done = served.run("submit", "--task", "generate", "--input", refused, "--wait")
    assert done.returncode == 1
    job = json.loads(done.stdout)
    assert job["status"] == "FAILED"
    assert job["error"]["class"] == "SAFETY_REJECTED"


def test_a_wait_that_runs_out_exits_3(served: Served) -> None:
    # The call outlasts the wait by far, however slowly this machine starts the CLI.
    slow = '{"prompt": "hi", "simulate": {"latency_ms": 20000}}'
    done = served.run("submit", "--task", "generate", "--input", slow, "--wait", "--timeout", "0.3")
    assert done.returncode == 3
    assert json.loads(done.stdout)["status"] in {"QUEUED", "PROCESSING"}


# Calls long enough to be seen running and signalled mid-call; a slower machine gets the
# next, longer one (each is well inside the shutdown grace and the provider timeout).
IN_FLIGHT_CALLS_MS = (3_000, 6_000, 12_000)
# Signal only while at least this much of the call is still to run.
SIGNAL_MARGIN_SECONDS = 1.0


def test_sigterm_lets_the_call_in_flight_finish(served: Served) -> None:
    # Race-free by construction: the job is watched over HTTP (not by a CLI process per
    # look, which on a loaded machine can take longer than the call), and the signal is
    # sent only once the attempt's own start time shows the call is still running.
    with httpx.Client(base_url=served.url, headers=served.headers(), timeout=30) as client:
        for latency_ms in IN_FLIGHT_CALLS_MS:
            job_id = submit_slow(client, latency_ms)
            started_at = wait_running(client, job_id)
            if started_at is None:
                continue  # it finished before it was seen running
            if time.time() < started_at + latency_ms / 1000 - SIGNAL_MARGIN_SECONDS:
                signalled_at = time.time()
                served.process.send_signal(signal.SIGTERM)
                break
            wait_finished(client, job_id)
        else:
            pytest.fail("no call was ever seen running early enough to signal mid-call")

    code, _, err = stop(served.process)
    assert code == 0, err
    status, attempts = stored_job(served.cwd, job_id)
    assert status == "SUCCEEDED"
    assert [str(a.outcome) for a in attempts] == ["succeeded"]  # finished, not given back
    assert attempts[0].ended_at is not None
    assert attempts[0].ended_at > signalled_at  # it was in flight when the signal came


POLL_DEADLINE_SECONDS = 60


def submit_slow(client: httpx.Client, latency_ms: int) -> str:
    body = {"task": "generate", "input": {"prompt": "hi", "simulate": {"latency_ms": latency_ms}}}
    response = client.post("/v1/generations", json=body)
    assert response.status_code == 202, response.text
    return str(response.json()["job_id"])


def wait_running(client: httpx.Client, job_id: str) -> float | None:
    """When the running attempt started (epoch seconds), or None if the job finished first."""
    deadline = time.monotonic() + POLL_DEADLINE_SECONDS
    while time.monotonic() < deadline:
        status = client.get(f"/v1/generations/{job_id}").json()["status"]
        if status == "PROCESSING":
            attempts = client.get(f"/v1/generations/{job_id}/events").json()["attempts"]
            started = attempts[-1]["started_at"].replace("Z", "+00:00")
            return dt.datetime.fromisoformat(started).timestamp()
        if status in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return None
        time.sleep(0.05)  # 20 looks a second: well inside the tenant's rate limit
    pytest.fail(f"{job_id} was never picked up")


def wait_finished(client: httpx.Client, job_id: str) -> None:
    deadline = time.monotonic() + POLL_DEADLINE_SECONDS
    while client.get(f"/v1/generations/{job_id}").json()["status"] == "PROCESSING":
        assert time.monotonic() < deadline, f"{job_id} never finished"
        time.sleep(0.05)


def stored_job(cwd: Path, job_id: str) -> tuple[str, list[Attempt]]:
    """Read the job and its attempts straight from the stopped server's database."""

    async def read() -> tuple[str, list[Attempt]]:
        settings = Settings(database_url=f"sqlite:///{cwd}/ferryman.db")
        async with open_runtime(settings) as runtime:
            job = await runtime.store.get(job_id)
            attempts = await runtime.store.store.attempts(job_id)
        assert job is not None
        return str(job.status), attempts

    return asyncio.run(read())


def test_api_and_worker_as_separate_processes(tmp_path: Path) -> None:
    port = free_port()
    env = base_env()
    api = start(tmp_path, env, "api", "--port", str(port))
    worker = None
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, api)
        worker = start(tmp_path, env, "worker", "--concurrency", "4", "--no-sweeper")
        client_env = {**env, "FERRYMAN_URL": url, "FERRYMAN_API_KEY": create_key(tmp_path, env)}
        done = subprocess.run(
            command("submit", "--task", "generate", "--input", '{"prompt": "yo"}', "--wait"),
            cwd=tmp_path,
            env=client_env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        assert "yo" in done.stdout
        worker_code, _, worker_err = stop(worker)
        api_code, _, api_err = stop(api)
        assert worker_code == 0, worker_err
        assert api_code == 0, api_err
    finally:
        for process in (api, worker):
            if process is not None and process.poll() is None:
                process.kill()
                process.communicate(timeout=STOP_TIMEOUT_SECONDS)


def test_a_server_refuses_sim_scripts_by_default_and_its_log_says_how(tmp_path: Path) -> None:
    port = free_port()
    env = base_env()  # no FERRYMAN_SIM_SCRIPTS: the default
    server = start(tmp_path, env, "serve", "--port", str(port))
    try:
        url = f"http://127.0.0.1:{port}"
        wait_healthy(url, server)
        client_env = {**env, "FERRYMAN_URL": url, "FERRYMAN_API_KEY": create_key(tmp_path, env)}
        scripted = '{"prompt": "hi", "simulate": {"latency_ms": 20000}}'
        refused = subprocess.run(
            command("submit", "--task", "generate", "--input", scripted),
            cwd=tmp_path,
            env=client_env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=False,
        )
        code, _, log = stop(server)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=STOP_TIMEOUT_SECONDS)
    # The tenant is told scripts are off here, and who can turn them on.
    assert refused.returncode == 1, refused.stderr
    assert "422" in refused.stderr
    assert "scripting the sim model (input.simulate) is turned off" in refused.stderr
    # The operator's log says how.
    assert code == 0, log
    [line] = [line for line in log.splitlines() if "intake.sim_script_refused" in line]
    assert "FERRYMAN_SIM_SCRIPTS=true" in line
