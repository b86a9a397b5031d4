"""The chaos harness, shared by every engine's run through the ``chaos`` fixture.

A run starts ``ferryman api`` processes and ``ferryman worker`` processes on one
database, submits jobs spread across the API processes, lets the workers crash
(os._exit) at random failpoints and restarts them as a process supervisor would,
optionally disrupts the database mid-load (terminated connections, a server
restart), and then asserts only the invariants: every job SUCCEEDED with exactly
one succeeded attempt, every attempt explained (none left open), crashes visible as
abandoned attempts, and each result is the right one for its prompt.

Clients behave as the API asks them to: a 503 or a dropped connection is retried
with the same Idempotency-Key, which may land on another API process.

PostgreSQL runs use a fresh database on the server FERRYMAN_TEST_POSTGRES_URL names
(default: the local one, user postgres); a missing server skips locally and fails
under CI=true, the same rule as the contract suite's. The run that restarts the server
restarts one of its own (throwaway_postgres.py), never that shared one.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
from throwaway_postgres import ServerUnavailableError, ThrowawayPostgres, throwaway_postgres

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
FAILPOINTS = (
    "after_receive=crash@0.02,after_claim=crash@0.05,after_invoke=crash@0.05,"
    "after_result_put=crash@0.03,after_publish=crash@0.05,before_ack=crash@0.05"
)
CRASH_EXIT_CODE = 86
DEADLINE_SECONDS = 300
STOP_TIMEOUT_SECONDS = 30
# How long a client keeps retrying one request through an outage (a server restart
# takes seconds; this only bounds a broken run).
RETRY_SECONDS = 90
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


def base_env(engine: dict[str, str], **extra: str) -> dict[str, str]:
    """Short leases and timeouts, so crashed attempts are recovered within seconds."""
    env = dict(os.environ)
    env.update(
        {
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
            # Jobs script the sim model's latency (input.simulate).
            "FERRYMAN_SIM_SCRIPTS": "true",
        }
    )
    env.update(engine)
    env.update(extra)
    return env


class Fleet:
    """A supervisor: restarts any worker that dies, counting the crashes.

    Crashes are counted from exit codes, and the failpoints that fired from the
    workers' logs; the two agree only once no worker runs any more (a worker can
    crash on a stray message after the last job finished), so ``stop`` ends every
    worker and reaps it before the counts are compared.
    """

    def __init__(self, tmp: Path, env: dict[str, str]) -> None:
        self._tmp = tmp
        self._env = env
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
                env={**self._env, "FERRYMAN_FAILPOINTS": FAILPOINTS},
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

    def failpoints_fired(self) -> dict[str, int]:
        fired: dict[str, int] = {}
        for log in self._tmp.glob("worker-*.log"):
            for line in log.read_text(errors="replace").splitlines():
                if line.startswith("ferryman: failpoint "):
                    point = line.split()[2]
                    fired[point] = fired.get(point, 0) + 1
        return fired


class Clients:
    """One HTTP client per API process; request ``i`` goes to process ``i mod n``, and a
    retry after a 503 or a dropped connection goes to the next one."""

    def __init__(self, base_urls: list[str], key: str) -> None:
        headers = {"Authorization": f"Bearer {key}"}
        self._clients = [httpx.Client(base_url=u, headers=headers, timeout=10) for u in base_urls]
        self.retries = 0

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def request(self, i: int, method: str, path: str, **kwargs: Any) -> httpx.Response:
        deadline = time.monotonic() + RETRY_SECONDS
        turn = i
        while True:
            client = self._clients[turn % len(self._clients)]
            try:
                response = client.request(method, path, **kwargs)
                if response.status_code != 503:
                    return response
                reason = response.text
            except httpx.TransportError as exc:
                reason = repr(exc)
            assert time.monotonic() < deadline, f"{method} {path} kept failing: {reason}"
            self.retries += 1
            turn += 1
            time.sleep(0.2)


@dataclass
class Scenario:
    """One run: how many processes, how many jobs, and what happens to the database.

    ``disrupt`` is called once for each entry of ``disrupt_after``: after that many
    jobs were submitted (``jobs`` itself means right after the last submit, while the
    workers drain the queue)."""

    engine: dict[str, str]
    apis: int = 1
    workers: int = 3
    jobs: int = 120
    disrupt: Callable[[], None] | None = None
    disrupt_after: tuple[int, ...] = ()


@dataclass
class Report:
    jobs: int
    crashes: int
    abandoned: int
    seconds: float
    client_retries: int
    fired: dict[str, int] = field(default_factory=dict)
    # Messages the sweeper re-sent (REDISPATCHED events): only for jobs whose message
    # was gone, so few even when many workers crash.
    redispatched: int = 0

    def line(self, name: str) -> str:
        return (
            f"chaos[{name}]: {self.jobs} jobs SUCCEEDED once, {self.crashes} worker crashes, "
            f"{self.abandoned} abandoned attempts, {self.redispatched} re-sent messages, "
            f"{self.client_retries} client retries, "
            f"{self.seconds:.1f} s (first submit to last SUCCEEDED)"
        )


def _wait_healthy(base_url: str, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, "ferryman api exited during start-up"
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("ferryman api did not become healthy")


class Disruption:
    """One disruption running in a thread beside the load; ``join`` re-raises its error."""

    def __init__(self, action: Callable[[], None]) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(action,), daemon=True)
        self._thread.start()

    def _run(self, action: Callable[[], None]) -> None:
        try:
            action()
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread by join()
            self._error = exc

    def join(self) -> None:
        self._thread.join(timeout=RETRY_SECONDS)
        assert not self._thread.is_alive(), "a disruption did not finish"
        if self._error is not None:
            raise self._error


class ChaosRun:
    def __init__(self, tmp: Path) -> None:
        self._tmp = tmp
        self._disruptions: list[Disruption] = []

    def __call__(self, scenario: Scenario) -> Report:
        env = base_env(scenario.engine)
        subprocess.run(_ferryman("migrate"), env=env, check=True, capture_output=True, timeout=60)
        key = (
            subprocess.run(
                _ferryman("keys", "create", "--tenant", "chaos"),
                env=env,
                capture_output=True,
                check=True,
                timeout=60,
            )
            .stdout.decode()
            .strip()
        )
        apis: list[subprocess.Popen[bytes]] = []
        fleet = Fleet(self._tmp, env)
        try:
            urls = [self._start_api(env, n, apis) for n in range(scenario.apis)]
            clients = Clients(urls, key)
            try:
                report = self._load(scenario, fleet, clients, apis)
            finally:
                clients.close()
            fleet.stop()  # every worker gone: no crash can land between the two counts
            self._assert_crashes_explained(fleet, report)
            return report
        finally:
            fleet.stop()
            for api in apis:
                api.kill()
                api.wait(timeout=10)

    def _start_api(self, env: dict[str, str], n: int, apis: list[subprocess.Popen[bytes]]) -> str:
        port = _free_port()
        with (self._tmp / f"api-{n}.log").open("wb") as log:  # the child keeps its own descriptor
            apis.append(
                subprocess.Popen(
                    _ferryman("api", "--port", str(port)), env=env, stdout=log, stderr=log
                )
            )
        url = f"http://127.0.0.1:{port}"
        _wait_healthy(url, apis[-1])
        return url

    def _load(
        self,
        scenario: Scenario,
        fleet: Fleet,
        clients: Clients,
        apis: list[subprocess.Popen[bytes]],
    ) -> Report:
        for _ in range(scenario.workers):
            fleet.start()
        started = time.monotonic()
        try:
            prompts = self._submit_all(scenario, fleet, clients)
            final = self._wait_all_terminal(clients, fleet, list(prompts))
            seconds = time.monotonic() - started
        finally:
            for disruption in self._disruptions:
                disruption.join()
        assert all(api.poll() is None for api in apis), "an API process exited under load"
        abandoned, redispatched = _assert_invariants(clients, prompts, final)
        return Report(
            jobs=len(final),
            crashes=0,
            abandoned=abandoned,
            seconds=seconds,
            client_retries=clients.retries,
            redispatched=redispatched,
        )

    def _submit_all(self, scenario: Scenario, fleet: Fleet, clients: Clients) -> dict[str, str]:
        prompts: dict[str, str] = {}
        for i in range(scenario.jobs):
            self._maybe_disrupt(scenario, i)
            prompt = f"chaos prompt number {i}"
            body: dict[str, Any] = {"task": "generate", "input": {"prompt": prompt}}
            if i % 3 == 0:
                body["input"]["simulate"] = {"latency_ms": 100}
            response = clients.request(
                i, "POST", "/v1/generations", json=body, headers={"Idempotency-Key": f"chaos-{i}"}
            )
            assert response.status_code == 202, response.text
            prompts[response.json()["job_id"]] = prompt
            fleet.supervise()
        self._maybe_disrupt(scenario, scenario.jobs)
        assert len(prompts) == scenario.jobs
        return prompts

    def _maybe_disrupt(self, scenario: Scenario, submitted: int) -> None:
        """Start the disruption beside the load (submits go on meanwhile)."""
        if scenario.disrupt is not None:
            for _ in range(scenario.disrupt_after.count(submitted)):
                self._disruptions.append(Disruption(scenario.disrupt))

    @staticmethod
    def _wait_all_terminal(clients: Clients, fleet: Fleet, job_ids: list[str]) -> dict[str, Any]:
        deadline = time.monotonic() + DEADLINE_SECONDS
        final: dict[str, Any] = {}
        while time.monotonic() < deadline:
            fleet.supervise()
            for i, job_id in enumerate(job_ids):
                if job_id in final:
                    continue
                response = clients.request(i, "GET", f"/v1/generations/{job_id}")
                assert response.status_code == 200, response.text
                job = response.json()
                if job["status"] in TERMINAL:
                    final[job_id] = job
            if len(final) == len(job_ids):
                return final
            time.sleep(0.5)
        stuck = sorted(set(job_ids) - set(final))
        raise AssertionError(f"{len(stuck)} jobs did not finish, e.g. {stuck[:3]}")

    @staticmethod
    def _assert_crashes_explained(fleet: Fleet, report: Report) -> None:
        assert fleet.other_exits == [], "workers must only exit by injected crashes"
        fired = fleet.failpoints_fired()
        assert sum(fired.values()) == fleet.crashes > 0, (fired, fleet.crashes)
        # A crash after the claim and before the outcome leaves an open attempt; each
        # must have become visible as abandoned (a crash also abandons the other
        # attempts that worker had in flight, hence >=). Once every job is finished no
        # claim can succeed, so no such crash can come after the attempts were read.
        mid_attempt = sum(
            fired.get(p, 0) for p in ("after_claim", "after_invoke", "after_result_put")
        )
        assert mid_attempt > 0, f"no crash landed mid-attempt: {fired}"
        assert report.abandoned >= mid_attempt, (report.abandoned, fired)
        report.crashes = fleet.crashes
        report.fired = fired


def _assert_invariants(
    clients: Clients, prompts: dict[str, str], final: dict[str, Any]
) -> tuple[int, int]:
    """Check every job; return how many attempts were recorded as abandoned, and how
    many messages the sweeper re-sent."""
    abandoned_total = redispatched = 0
    for i, (job_id, job) in enumerate(final.items()):
        assert job["status"] == "SUCCEEDED", (job_id, job["error"])
        assert prompts[job_id] in job["result"]["text"]
        response = clients.request(i, "GET", f"/v1/generations/{job_id}/events")
        assert response.status_code == 200, response.text
        history = response.json()
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
        # A finished job's history ends with its terminal event: nothing after it.
        assert kinds[-1] == "SUCCEEDED", (job_id, kinds)
        redispatched += kinds.count("REDISPATCHED")
    return abandoned_total, redispatched


@pytest.fixture
def chaos(tmp_path: Path) -> ChaosRun:
    """Runs a Scenario end to end and returns its figures, having asserted the invariants."""
    return ChaosRun(tmp_path)


@pytest.fixture
def sqlite_engine(tmp_path: Path) -> dict[str, str]:
    return {
        "FERRYMAN_DATABASE_URL": f"sqlite:///{tmp_path / 'chaos.db'}",
        "FERRYMAN_RESULTS_URL": f"file://{tmp_path / 'results'}",
    }


@dataclass(frozen=True)
class PostgresDatabase:
    """A scratch database for one run, and the ways to disrupt it."""

    server: str
    url: str
    name: str

    @property
    def engine(self) -> dict[str, str]:
        # Small pools: 6 processes share a server that other suites use at the same time.
        return {
            "FERRYMAN_DATABASE_URL": self.url,
            "FERRYMAN_POSTGRES_POOL_MAX_SIZE": "4",
        }

    def terminate_backends(self) -> None:
        """End every connection to this database but our own, as an operator or a
        failover would; asserts that ferryman had connections to lose."""
        import psycopg

        with psycopg.connect(self.server, autocommit=True) as admin:
            rows = admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (self.name,),
            ).fetchall()
        assert rows, "no ferryman connection to terminate"


def _database_url(server_url: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(server_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + dbname))


def _server_answers(server: str) -> str | None:
    """None when the server accepts a connection, else the first line of why not."""
    import psycopg

    try:
        psycopg.connect(server, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return None


@pytest.fixture
def postgres_database(
    require_service: Callable[[str, str], NoReturn],
) -> Iterator[PostgresDatabase]:
    """A fresh database on the test server, dropped (its sessions ended) after the test."""
    import psycopg

    server = os.environ.get("FERRYMAN_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    why = _server_answers(server)
    if why is not None:
        require_service("postgresql", f"{server}: {why}")
    name = f"ferryman_chaos_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PostgresDatabase(server=server, url=_database_url(server, name), name=name)
    finally:
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class RestartablePostgres:
    """A server of the test's own (throwaway_postgres.py) and the way to restart it."""

    server: ThrowawayPostgres

    @property
    def engine(self) -> dict[str, str]:
        return {
            "FERRYMAN_DATABASE_URL": self.server.url,
            "FERRYMAN_POSTGRES_POOL_MAX_SIZE": "4",
        }

    def restart(self) -> None:
        """Fast shutdown (every session ends) and start; returns once a new postmaster
        answers a query."""
        self.server.restart()
        why = _server_answers(self.server.url)
        assert why is None, f"the restarted server does not answer: {why}"


@pytest.fixture
def restartable_postgres(
    require_service: Callable[[str, str], NoReturn],
) -> Iterator[RestartablePostgres]:
    """A throwaway PostgreSQL server (initdb into a temporary directory, a free port of
    127.0.0.1) that the test may restart; stopped and deleted after it, even on failure.
    The machine's server is never touched. Without the server binaries the test skips
    locally and fails under CI=true."""
    with ExitStack() as stack:
        try:
            server = stack.enter_context(throwaway_postgres())
        except ServerUnavailableError as exc:
            require_service("a PostgreSQL server of the test's own", str(exc))
        yield RestartablePostgres(server)


@pytest.fixture
def scenario() -> type[Scenario]:
    """The Scenario class, for tests (which cannot import conftest) to describe a run."""
    return Scenario
