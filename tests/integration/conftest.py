"""Fixtures for the HTTP tests (prefixed ``http_``): the real app over real services
and SQLite in tmp_path, a FakeClock, and an in-process worker when jobs must finish."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.core.clock import FakeClock
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.engines import EngineOptions, open_engine
from ferryman.http.app import AppDeps, create_app
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.access import ApiKeys
from ferryman.services.attempt import attempt_timeouts
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.operations import Operations
from ferryman.services.results import ResultWriter
from ferryman.services.sweeper import Sweeper
from ferryman.services.usage import UsageReports
from ferryman.services.worker import Worker, compose_worker
from ferryman.services.worker_parts import WorkerOptions, WorkerParts
from ferryman.tasks import builtin_tasks
from ferryman.wiring import process_observers
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

    from fastapi import FastAPI

    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.provider import ModelRequest, ModelResponse
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.tasks import TaskRegistry

    ProblemCheck = Callable[[httpx.Response, int, str], dict[str, Any]]

HTTP_MAX_RECEIVES = 3


class HttpCountingProvider:
    """The sim, counting model invocations (each one is billed in real life)."""

    def __init__(self) -> None:
        self._inner = SimulatedProvider()
        self.invocations = 0

    @property
    def name(self) -> str:
        return self._inner.name

    async def check(self) -> None:
        await self._inner.check()

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        self.invocations += 1
        return await self._inner.invoke(request, timeout_seconds=timeout_seconds)


@dataclass
class HttpStack:
    """Every service over one SQLite file, as `ferryman serve` would build it. ``db`` is
    the engine's database handle (``Engine.database``), for tests that write or close
    underneath the ports."""

    clock: FakeClock
    db: SqliteDatabase
    store: JobLedger
    queue: JobQueue
    results: ResultStore
    control: ControlStore
    keys: ApiKeyStore
    tasks: TaskRegistry
    intake: Intake
    jobs: JobQueries
    operations: Operations
    api_keys: ApiKeys
    provider: HttpCountingProvider = field(default_factory=HttpCountingProvider)

    def deps(self, **overrides: Any) -> AppDeps:
        options: dict[str, Any] = {
            "intake": self.intake,
            "jobs": self.jobs,
            "operations": self.operations,
            "api_keys": self.api_keys,
            "usage": UsageReports(store=self.store, clock=self.clock),
            "clock": self.clock,
            "tasks": self.tasks,
            # The clock here stands still, so a budget would never refill: these tests
            # run without budgets unless one sets them (AppDeps' own are Settings').
            "tenant_rate_per_second": 0.0,
            "tenant_read_rate_per_second": 0.0,
        }
        options.update(overrides)
        return AppDeps(**options)

    def app(self, **overrides: Any) -> FastAPI:
        return create_app(self.deps(**overrides))

    def worker(self) -> Worker:
        parts = WorkerParts(
            store=self.store,
            queue=self.queue,
            results=ResultWriter(self.results),
            control=self.control,
            catalog=ModelCatalog.serving_own_names([self.provider]),
            tasks=self.tasks,
            clock=self.clock,
            observers=self.store.observers,
        )
        settings = WorkerOptions(
            worker_id="http-test-worker",
            concurrency=8,
            lease=LeasePolicy(lease_seconds=60.0, visibility_timeout_seconds=60.0),
            retry=RetryPolicy(max_attempts=2),
            shutdown_grace_seconds=0.05,
            receive_wait_seconds=0.0,
        )
        return compose_worker(parts, settings, timeouts=attempt_timeouts(5.0))

    async def run_worker(self) -> int:
        """Handle every visible message to its end; return how many were handled."""
        return await self.worker().run_until_idle()

    async def dead_letter(self, job_id: str) -> None:
        """Strand a job the way a crash loop does: receive its message past max_receives
        without any outcome, then let the sweeper fail it as dead_lettered."""
        for _ in range(HTTP_MAX_RECEIVES + 1):
            await self.queue.receive(max_messages=10, visibility_timeout_seconds=1.0)
            self.clock.advance(2.0)
        await Sweeper(
            store=self.store, ledger=self.store, queue=self.queue, clock=self.clock
        ).sweep_once()
        job = await self.store.get(job_id)
        assert job is not None
        assert job.error is not None
        assert job.error.code == "dead_lettered"


@pytest.fixture
async def http_stack(tmp_path: Path) -> AsyncIterator[HttpStack]:
    clock = FakeClock()
    options = EngineOptions(max_receives=HTTP_MAX_RECEIVES, sqlite_synchronous="NORMAL")
    url = f"sqlite:///{tmp_path / 'ferryman.db'}"
    async with open_engine(url, clock=clock, options=options) as engine:
        assert isinstance(engine.database, SqliteDatabase)
        store = LedgerWithReads(engine.store, observers=process_observers())
        tasks = builtin_tasks()
        yield HttpStack(
            clock=clock,
            db=engine.database,
            store=store,
            queue=engine.queue,
            results=engine.results,
            control=engine.control,
            keys=engine.keys,
            tasks=tasks,
            intake=Intake(
                store=store,
                ledger=store,
                queue=engine.queue,
                tasks=tasks,
                control=engine.control,
                clock=clock,
                idempotency_retention_seconds=86_400.0,
                # Tests script the sim model (input.simulate); deployments default to off.
                sim_scripts=True,
            ),
            jobs=JobQueries(store=store, ledger=store, results=engine.results, clock=clock),
            operations=Operations(
                store=store, ledger=store, queue=engine.queue, control=engine.control, clock=clock
            ),
            api_keys=ApiKeys(engine.keys, clock),
        )


@dataclass(frozen=True)
class HttpKeys:
    acme: str
    globex: str
    admin: str

    @staticmethod
    def bearer(key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def http_keys(http_stack: HttpStack) -> HttpKeys:
    return HttpKeys(
        acme=await http_stack.api_keys.create("acme"),
        globex=await http_stack.api_keys.create("globex"),
        admin=await http_stack.api_keys.create("ops", admin=True),
    )


@pytest.fixture
async def http_open_client() -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """Factory: an AsyncClient over an app (no lifespan, as ASGITransport runs it),
    optionally sending ``key`` as its Bearer token; closed at teardown."""
    clients: list[httpx.AsyncClient] = []

    def open_client(app: FastAPI, key: str | None = None) -> httpx.AsyncClient:
        headers = HttpKeys.bearer(key) if key is not None else {}
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers
        )
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.aclose()


@pytest.fixture
def http_client(
    http_stack: HttpStack, http_keys: HttpKeys, http_open_client: Callable[..., httpx.AsyncClient]
) -> httpx.AsyncClient:
    """A client of the default app, authenticated as tenant acme."""
    return http_open_client(http_stack.app(), http_keys.acme)


@pytest.fixture
def http_generate_body() -> Callable[..., dict[str, Any]]:
    def make(prompt: str = "Hello there", **overrides: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"task": "generate", "input": {"prompt": prompt}}
        body.update(overrides)
        return body

    return make


def http_check_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem with this status and code; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    problem: dict[str, Any] = response.json()
    assert problem["status"] == status
    assert problem["code"] == code
    assert problem["type"] == f"https://ferryman.dev/problems/{code}"
    assert problem["title"]
    assert problem["detail"]
    return problem


@pytest.fixture
def http_problem() -> Callable[[httpx.Response, int, str], dict[str, Any]]:
    return http_check_problem


@pytest.fixture
def ferryman_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``ferryman_cli(cwd, *args, env=None)``: the CLI as a user runs it, in a subprocess,
    with no FERRYMAN_* variable of this process leaking in."""

    def run(
        cwd: Path, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
        return subprocess.run(
            [sys.executable, "-m", "ferryman.cli.main", *args],
            cwd=cwd,
            env=env if env is not None else clean,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    return run


@dataclass
class LiveServer:
    """A real ``ferryman serve`` (API, worker, sweeper) on a free port in its own
    directory, shared by a test module; each test takes keys of its own tenant."""

    cwd: Path
    url: str
    process: subprocess.Popen[bytes]
    tenants: int = 0

    def env(self, **extra: str) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
        return {**base, "FERRYMAN_URL": self.url, **extra}

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        """The CLI in the server's directory (so it shares its database)."""
        return subprocess.run(
            [sys.executable, "-m", "ferryman", *args],
            cwd=self.cwd,
            env=self.env(**env),
            capture_output=True,
            text=True,
            timeout=LIVE_COMMAND_TIMEOUT_SECONDS,
            check=False,
        )

    def new_key(self, *, admin: bool = False) -> str:
        """A key of a tenant no other test uses."""
        self.tenants += 1
        args = ["keys", "create", "--tenant", f"t{self.tenants}"] + (["--admin"] if admin else [])
        done = self.cli(*args)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


LIVE_COMMAND_TIMEOUT_SECONDS = 60
LIVE_STARTUP_TIMEOUT_SECONDS = 30


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    cwd = tmp_path_factory.mktemp("served")
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(
        FERRYMAN_TENANT_RATE_PER_SECOND="0",
        FERRYMAN_TENANT_READ_RATE_PER_SECOND="0",
        FERRYMAN_SHUTDOWN_GRACE_SECONDS="1",
        FERRYMAN_SIM_SCRIPTS="true",  # the tests script the sim model (input.simulate)
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "ferryman", "serve", "--port", str(port)],
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LIVE_STARTUP_TIMEOUT_SECONDS
        while True:
            assert process.poll() is None, "ferryman serve exited during start-up"
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "ferryman serve did not become healthy"
            time.sleep(0.1)
        yield LiveServer(cwd=cwd, url=url, process=process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=LIVE_COMMAND_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=LIVE_COMMAND_TIMEOUT_SECONDS)
