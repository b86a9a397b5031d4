"""Real processes killed at failpoints: every accepted job still finishes exactly once.

`ferryman api` and several `ferryman worker` processes share one SQLite file. The
workers crash (os._exit) at random failpoints and are restarted, as a process
supervisor would. The test asserts only the invariants: every job SUCCEEDED with
exactly one succeeded attempt, every attempt explained (none left open), crashes
visible as abandoned attempts, and each result is the right one for its prompt.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

JOBS = 120
WORKERS = 3
FAILPOINTS = (
    "after_receive=crash@0.02,after_claim=crash@0.05,after_invoke=crash@0.05,"
    "after_result_put=crash@0.03,after_publish=crash@0.05,before_ack=crash@0.05"
)
CRASH_EXIT_CODE = 86
DEADLINE_SECONDS = 300
STOP_TIMEOUT_SECONDS = 30


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "FERRYMAN_DATABASE_URL": f"sqlite:///{tmp / 'chaos.db'}",
            "FERRYMAN_RESULTS_URL": f"file://{tmp / 'results'}",
            "FERRYMAN_LEASE_SECONDS": "3",
            "FERRYMAN_VISIBILITY_TIMEOUT_SECONDS": "3",
            "FERRYMAN_HEARTBEAT_INTERVAL_SECONDS": "0.5",
            "FERRYMAN_PROVIDER_TIMEOUT_SECONDS": "1",
            "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS": "2",
            "FERRYMAN_MAX_RECEIVES": "40",
            "FERRYMAN_SWEEP_INTERVAL_SECONDS": "1",
            "FERRYMAN_STALLED_AFTER_SECONDS": "8",
            "FERRYMAN_RECEIVE_WAIT_SECONDS": "0.2",
            "FERRYMAN_SHUTDOWN_GRACE_SECONDS": "1",
            "FERRYMAN_TENANT_RATE_PER_SECOND": "0",
            "FERRYMAN_LOG_LEVEL": "WARNING",
        }
    )
    env.update(extra)
    return env


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


class Fleet:
    """A supervisor: restarts any worker that dies, counting the crashes.

    Crashes are counted from exit codes, and the failpoints that fired from the
    workers' logs; the two agree only once no worker runs any more (a worker can
    crash on a stray message after the last job finished), so ``stop`` ends every
    worker and reaps it before the counts are compared.
    """

    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self.workers: list[subprocess.Popen[bytes]] = []
        self.crashes = 0
        self.other_exits: list[int] = []
        self._spawned = 0
        self._stopped = False

    def start(self) -> None:
        self.workers.append(self._spawn())

    def _spawn(self) -> subprocess.Popen[bytes]:
        self._spawned += 1
        with (self._tmp / f"worker-{self._spawned}.log").open("wb") as log:
            return subprocess.Popen(
                _ferryman("worker", "--concurrency", "8"),
                env=_env(self._tmp, FERRYMAN_FAILPOINTS=FAILPOINTS),
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def _count(self, code: int) -> None:
        if code == CRASH_EXIT_CODE:
            self.crashes += 1
        else:
            self.other_exits.append(code)

    def supervise(self) -> None:
        for i, proc in enumerate(self.workers):
            code = proc.poll()
            if code is None:
                continue
            self._count(code)  # a worker never exits by itself, not even with 0
            self.workers[i] = self._spawn()

    def stop(self) -> None:
        """SIGTERM every worker and reap it. A failpoint crash still exits 86 (counted);
        a graceful stop exits 0. SIGTERM cannot cut a failpoint between its log line
        and its exit, as a kill could (the handler only sets an event on the loop), so
        every logged crash is a counted one."""
        if self._stopped:
            return
        self._stopped = True
        for proc in self.workers:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.workers:
            try:
                code = proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait(timeout=STOP_TIMEOUT_SECONDS)
            # -SIGTERM: a worker just restarted, stopped before it installed its handler.
            if code not in (0, -signal.SIGTERM):
                self._count(code)


def _wait_healthy(base_url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ferryman api exited during start-up"
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("ferryman api did not become healthy")


def _submit_all(client: httpx.Client) -> dict[str, str]:
    prompts: dict[str, str] = {}
    for i in range(JOBS):
        prompt = f"chaos prompt number {i}"
        body: dict[str, Any] = {"task": "generate", "input": {"prompt": prompt}}
        if i % 3 == 0:
            body["input"]["simulate"] = {"latency_ms": 100}
        response = client.post(
            "/v1/generations", json=body, headers={"Idempotency-Key": f"chaos-{i}"}
        )
        assert response.status_code == 202, response.text
        prompts[response.json()["job_id"]] = prompt
    assert len(prompts) == JOBS
    return prompts


def _wait_all_terminal(client: httpx.Client, fleet: Fleet, job_ids: list[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_SECONDS
    final: dict[str, Any] = {}
    while time.monotonic() < deadline:
        fleet.supervise()
        for job_id in job_ids:
            if job_id in final:
                continue
            job = client.get(f"/v1/generations/{job_id}").json()
            if job["status"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
                final[job_id] = job
        if len(final) == len(job_ids):
            return final
        time.sleep(0.5)
    stuck = sorted(set(job_ids) - set(final))
    raise AssertionError(f"{len(stuck)} jobs did not finish, e.g. {stuck[:3]}")


def test_workers_crashing_at_every_failpoint_lose_nothing_and_publish_once(tmp_path: Path) -> None:
    key = (
        subprocess.run(
            _ferryman("keys", "create", "--tenant", "chaos"),
            env=_env(tmp_path),
            capture_output=True,
            check=True,
            timeout=60,
        )
        .stdout.decode()
        .strip()
    )
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    with (tmp_path / "api.log").open("wb") as api_log:  # the child keeps its own descriptor
        api = subprocess.Popen(
            _ferryman("api", "--port", str(port)),
            env=_env(tmp_path),
            stdout=api_log,
            stderr=subprocess.STDOUT,
        )
    fleet = Fleet(tmp_path)
    try:
        _wait_healthy(base_url, api)
        with httpx.Client(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=10
        ) as client:
            prompts = _submit_all(client)
            for _ in range(WORKERS):
                fleet.start()
            final = _wait_all_terminal(client, fleet, list(prompts))
            abandoned = _assert_invariants(client, prompts, final)
        fleet.stop()  # every worker gone: no crash can land between the two counts
        assert fleet.other_exits == [], "workers must only exit by injected crashes"
        fired = _failpoints_fired(tmp_path)
        assert sum(fired.values()) == fleet.crashes > 0, (fired, fleet.crashes)
        # A crash after the claim and before the outcome leaves an open attempt; each
        # must have become visible as abandoned (a crash also abandons the other
        # attempts that worker had in flight, hence >=). Once every job is finished no
        # claim can succeed, so no such crash can come after the attempts were read.
        mid_attempt = sum(
            fired.get(p, 0) for p in ("after_claim", "after_invoke", "after_result_put")
        )
        assert mid_attempt > 0, f"no crash landed mid-attempt: {fired}"
        assert abandoned >= mid_attempt, (abandoned, fired)
    finally:
        fleet.stop()
        api.kill()
        api.wait(timeout=10)


def _failpoints_fired(tmp: Path) -> dict[str, int]:
    fired: dict[str, int] = {}
    for log in tmp.glob("worker-*.log"):
        for line in log.read_text(errors="replace").splitlines():
            if line.startswith("ferryman: failpoint "):
                point = line.split()[2]
                fired[point] = fired.get(point, 0) + 1
    return fired


def _assert_invariants(client: httpx.Client, prompts: dict[str, str], final: dict[str, Any]) -> int:
    """Check every job; return how many attempts were recorded as abandoned."""
    abandoned_total = 0
    for job_id, job in final.items():
        assert job["status"] == "SUCCEEDED", (job_id, job["error"])
        assert prompts[job_id] in job["result"]["text"]
        history = client.get(f"/v1/generations/{job_id}/events").json()
        attempts = history["attempts"]
        outcomes = [a["outcome"] for a in attempts]
        assert outcomes.count("succeeded") == 1, (job_id, outcomes)
        assert None not in outcomes, f"{job_id}: an attempt left unexplained: {outcomes}"
        assert set(outcomes) <= {"succeeded", "abandoned", "lease_lost"}, outcomes
        assert [a["attempt_no"] for a in attempts] == sorted({a["attempt_no"] for a in attempts})
        assert job["attempt_count"] == len(attempts)
        abandoned_total += outcomes.count("abandoned")
        kinds = [e["kind"] for e in history["events"]]
        assert kinds.count("SUCCEEDED") == 1, kinds
    return abandoned_total
