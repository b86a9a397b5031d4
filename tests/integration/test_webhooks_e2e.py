"""Completion webhooks end to end: real ``ferryman api`` and ``ferryman worker``
processes on one SQLite file, delivering to a local receiver that verifies every
signature with the ``standardwebhooks`` reference library.

The receiver's host is allowed by FERRYMAN_WEBHOOK_ALLOWED_HOSTS (it is on loopback,
which the guard refuses otherwise) and the retry schedule is shortened so retries are
seen within seconds. Every wait is on a condition, bounded by a deadline.
"""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from cryptography.fernet import Fernet
from standardwebhooks import Webhook

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.slow

DEADLINE_SECONDS = 60
CRASH_EXIT_CODE = 86


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Receiver:
    """Verifies and records every delivery; answers each job's attempts as scripted
    (``script[job_id]``: status codes in order, "hang" to answer after the sender gave
    up; 204 once the script is spent)."""

    secret: str = ""
    script: dict[str, list[Any]] = field(default_factory=dict)
    deliveries: list[dict[str, Any]] = field(default_factory=list)
    bad_signatures: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    release: threading.Event = field(default_factory=threading.Event)

    def handle(self, headers: dict[str, str], body: bytes) -> int | str:
        try:
            event = Webhook(self.secret).verify(body, headers)
        except Exception:  # noqa: BLE001 - any failure to verify is counted as one
            with self.lock:
                self.bad_signatures += 1
            return 400
        job_id = event["data"]["job_id"]
        with self.lock:
            self.deliveries.append({"id": headers["webhook-id"], "job_id": job_id, **event})
            answers = self.script.get(job_id, [])
            return answers.pop(0) if answers else 204

    def ids(self) -> Counter[str]:
        with self.lock:
            return Counter(d["id"] for d in self.deliveries)

    def for_job(self, job_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [d for d in self.deliveries if d["job_id"] == job_id]


def _serve(receiver: Receiver) -> tuple[http.server.ThreadingHTTPServer, int]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            answer = receiver.handle({k.lower(): v for k, v in self.headers.items()}, body)
            if answer == "hang":
                receiver.release.wait(30)  # past the sender's 10 s
                answer = 204
            self.send_response(int(answer))
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@dataclass
class Deployment:
    tmp: Path
    env: dict[str, str]
    url: str
    receiver: Receiver
    hook_url: str
    api: subprocess.Popen[bytes] | None = None
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)
    client: httpx.Client | None = None

    def cli(self, *args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "ferryman.cli.main", *args],
            cwd=self.tmp,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    def start_worker(self, failpoints: str = "") -> subprocess.Popen[bytes]:
        n = len(self.workers) + 1
        with (self.tmp / f"worker-{n}.log").open("wb") as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "ferryman.cli.main", "worker", "--concurrency", "4"],
                cwd=self.tmp,
                env={**self.env, "FERRYMAN_FAILPOINTS": failpoints},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.workers.append(worker)
        return worker

    def submit(self, n: int, **input_: Any) -> list[str]:
        assert self.client is not None
        ids = []
        for i in range(n):
            body = {
                "task": "generate",
                "input": {"prompt": f"job {i}", **input_},
                "webhook_url": self.hook_url,
            }
            answer = self.client.post("/v1/generations", json=body)
            assert answer.status_code == 202, answer.text
            ids.append(answer.json()["job_id"])
        return ids

    def events(self, job_id: str) -> list[dict[str, Any]]:
        assert self.client is not None
        answer = self.client.get(f"/v1/generations/{job_id}/events")
        assert answer.status_code == 200, answer.text
        return [e for e in answer.json()["events"] if e["kind"].startswith("WEBHOOK")]


def _until(
    condition: Callable[[], bool], what: str, *, tick: Callable[[], None] = lambda: None
) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        tick()
        assert time.monotonic() < deadline, f"not within {DEADLINE_SECONDS} s: {what}"
        time.sleep(0.05)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    receiver = Receiver()
    server, hook_port = _serve(receiver)
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(
        FERRYMAN_URL=f"http://127.0.0.1:{port}",
        FERRYMAN_WEBHOOK_ALLOWED_HOSTS=f"127.0.0.1:{hook_port}",
        FERRYMAN_WEBHOOK_RETRY_SCHEDULE="0.5,0.5,0.5",
        FERRYMAN_SECRET_KEY=Fernet.generate_key().decode(),
        FERRYMAN_SIM_SCRIPTS="true",
        FERRYMAN_TENANT_RATE_PER_SECOND="0",
        FERRYMAN_TENANT_READ_RATE_PER_SECOND="0",
        FERRYMAN_SWEEP_INTERVAL_SECONDS="0.5",
        FERRYMAN_LEASE_SECONDS="3",
        FERRYMAN_VISIBILITY_TIMEOUT_SECONDS="3",
        FERRYMAN_HEARTBEAT_INTERVAL_SECONDS="0.5",
        FERRYMAN_PROVIDER_TIMEOUT_SECONDS="1",
        FERRYMAN_ATTEMPT_TIMEOUT_SECONDS="2",
        FERRYMAN_SHUTDOWN_GRACE_SECONDS="1",
        FERRYMAN_LOG_LEVEL="WARNING",
    )
    deployment = Deployment(
        tmp=tmp_path,
        env=env,
        url=f"http://127.0.0.1:{port}",
        receiver=receiver,
        hook_url=f"http://127.0.0.1:{hook_port}/ferryman",
    )
    key = deployment.cli("keys", "create", "--tenant", "acme")
    with (tmp_path / "api.log").open("wb") as log:
        deployment.api = subprocess.Popen(
            [sys.executable, "-m", "ferryman.cli.main", "api", "--port", str(port)],
            cwd=tmp_path,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    deployment.client = httpx.Client(
        base_url=deployment.url, headers={"Authorization": f"Bearer {key}"}, timeout=10
    )

    def ready() -> bool:
        try:
            return deployment.client.get("/readyz").status_code == 200  # type: ignore[union-attr]
        except httpx.TransportError:
            return False

    _until(ready, "the API answers")
    created = deployment.client.post("/v1/webhooks/secret")
    assert created.status_code == 201 and created.headers["cache-control"] == "no-store"
    receiver.secret = created.json()["secret"]
    try:
        yield deployment
    finally:
        receiver.release.set()
        deployment.client.close()
        for proc in [deployment.api, *deployment.workers]:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in [deployment.api, *deployment.workers]:
            if proc is not None:
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    proc.kill()
        server.shutdown()
        server.server_close()


def test_each_finished_job_is_delivered_once_retried_after_failures_and_never_after_gone(
    deployment: Deployment,
) -> None:
    jobs = deployment.submit(6)
    failing, timing_out, gone = jobs[0], jobs[1], jobs[2]
    deployment.receiver.script = {failing: [500, 503], timing_out: ["hang"], gone: [410]}
    # A failed job and a cancelled one are announced too; the cancel, made by the API
    # process before any worker runs, is sent by a worker's dispatcher.
    (failed,) = deployment.submit(1, simulate={"script": ["bad_request"]})
    (cancelled,) = deployment.submit(1)
    assert deployment.client is not None
    assert deployment.client.post(f"/v1/generations/{cancelled}/cancel").status_code == 200
    deployment.start_worker()

    everyone = [*jobs, failed, cancelled]
    delivered = {j for j in everyone if j != gone}
    _until(
        lambda: all(
            any(e["kind"] == "WEBHOOK_DELIVERED" for e in deployment.events(j)) for j in delivered
        ),
        "every notification delivered",
    )
    receiver = deployment.receiver
    assert receiver.bad_signatures == 0
    ids = receiver.ids()
    # One message id per job, retried under the same id.
    assert len(ids) == len(everyone)
    assert ids[receiver.for_job(failing)[0]["id"]] == 3
    assert ids[receiver.for_job(timing_out)[0]["id"]] == 2
    assert [e["kind"] for e in deployment.events(failing)] == [
        "WEBHOOK_FAILED",
        "WEBHOOK_FAILED",
        "WEBHOOK_DELIVERED",
    ]
    assert deployment.events(failing)[0]["detail"]["status_code"] == 500
    assert deployment.events(timing_out)[0]["detail"]["error"] == "timeout"
    for job_id in set(jobs) - {failing, timing_out, gone}:
        assert len(receiver.for_job(job_id)) == 1
    types = {receiver.for_job(j)[0]["type"] for j in jobs}
    assert types == {"generation.succeeded"}
    assert receiver.for_job(failed)[0]["type"] == "generation.failed"
    assert receiver.for_job(cancelled)[0]["type"] == "generation.cancelled"
    # data is the job as GET shows it, with its result.
    shown = deployment.client.get(f"/v1/generations/{jobs[3]}").json()
    assert receiver.for_job(jobs[3])[0]["data"] == shown
    # 410: one attempt, no more, whatever the schedule would allow.
    (gone_event,) = deployment.events(gone)
    assert gone_event["detail"]["status_code"] == 410
    assert gone_event["detail"]["next_attempt_at"] is None
    assert len(receiver.for_job(gone)) == 1


def _status(deployment: Deployment, job_id: str) -> str:
    assert deployment.client is not None
    return str(deployment.client.get(f"/v1/generations/{job_id}").json()["status"])


def test_a_worker_killed_between_publish_and_delivery_loses_no_notification(
    deployment: Deployment,
) -> None:
    failpoints = "after_publish=crash@0.4"
    deployment.start_worker(failpoints)
    jobs = deployment.submit(12)
    crashes = 0

    def supervise() -> None:
        nonlocal crashes
        for i, worker in enumerate(deployment.workers):
            if worker.poll() == CRASH_EXIT_CODE:
                crashes += 1
                deployment.workers[i] = deployment.start_worker(failpoints)
                deployment.workers.pop()

    _until(
        lambda: len(deployment.receiver.ids()) == len(jobs),
        "a notification for every job",
        tick=supervise,
    )
    assert crashes > 0, "no worker crashed after a publish: the test proved nothing"
    # The receiver answered before the attempt was recorded: wait for the records.
    _until(
        lambda: all(
            any(e["kind"] == "WEBHOOK_DELIVERED" for e in deployment.events(j)) for j in jobs
        ),
        "every delivery recorded",
        tick=supervise,
    )
    ids = deployment.receiver.ids()
    assert {d["job_id"] for d in deployment.receiver.deliveries} == set(jobs)
    for job_id in jobs:
        (delivered,) = [e for e in deployment.events(job_id) if e["kind"] == "WEBHOOK_DELIVERED"]
        # A message reaches the receiver twice only when a worker died between sending it
        # and recording it: each of its sends was an attempt of its own, claimed anew.
        received = ids[deployment.receiver.for_job(job_id)[0]["id"]]
        assert received <= delivered["detail"]["attempt"]
