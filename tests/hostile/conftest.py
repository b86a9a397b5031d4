"""The hostile suite: ferryman as deployed, tried by clients that mean harm or are broken.

Each test keeps one promise of issue 5 as a regression. Two kinds of fixture:

- ``hostile_app``: the app exactly as ``ferryman serve`` builds it (wiring and
  ``app_deps`` from the real Settings defaults, rate limits included) over SQLite in
  tmp_path, driven in-process through httpx.ASGITransport; ``hostile_keys`` holds
  a tenant key and an admin key for it.
- ``start_server``: a real ``ferryman serve`` process (FERRYMAN_* settings as
  keyword arguments), its log written to a file the test can read, for what only
  real sockets show: disconnects, slow clients, connection caps.

Timing rules: every wait polls with a generous deadline; measurements that could
flake on a loaded 2-core machine are repeated, never loosened.
"""

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

from ferryman.cli.serving import app_deps
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

    from fastapi import FastAPI

    from ferryman.wiring import Runtime

STARTUP_TIMEOUT_SECONDS = 30.0
STOP_TIMEOUT_SECONDS = 30.0
COMMAND_TIMEOUT_SECONDS = 60.0


# --- in-process: the served app --------------------------------------------------


@dataclass(frozen=True)
class HostileKeys:
    tenant: str
    admin: str


@pytest.fixture
async def hostile_runtime(tmp_path: Path) -> AsyncIterator[Runtime]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/results",
        receive_wait_seconds=0,
        sim_scripts=True,  # the tests script the sim model (input.simulate)
    )
    async with open_runtime(settings) as runtime:
        yield runtime


@pytest.fixture
def hostile_app(hostile_runtime: Runtime) -> FastAPI:
    return create_app(app_deps(hostile_runtime))


@pytest.fixture
async def hostile_keys(hostile_runtime: Runtime) -> HostileKeys:
    return HostileKeys(
        tenant=await hostile_runtime.api_keys.create("acme"),
        admin=await hostile_runtime.api_keys.create("ops", admin=True),
    )


@pytest.fixture
async def hostile_client(
    hostile_app: FastAPI, hostile_keys: HostileKeys
) -> AsyncIterator[Callable[..., httpx.AsyncClient]]:
    """Factory: a client of the served app as the tenant (or ``admin=True``), or
    anonymous (``anonymous=True``)."""
    clients: list[httpx.AsyncClient] = []

    def open_client(*, admin: bool = False, anonymous: bool = False) -> httpx.AsyncClient:
        headers = {}
        if not anonymous:
            key = hostile_keys.admin if admin else hostile_keys.tenant
            headers["Authorization"] = f"Bearer {key}"
        client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=hostile_app),
            base_url="http://ferryman.test",
            headers=headers,
        )
        clients.append(client)
        return client

    yield open_client
    for client in clients:
        await client.aclose()


def check_problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """Assert an RFC 9457 problem with this status and code; return its body."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    problem: dict[str, Any] = response.json()
    assert (problem["status"], problem["code"]) == (status, code)
    return problem


@pytest.fixture
def problem() -> Callable[[httpx.Response, int, str], dict[str, Any]]:
    """``check_problem`` for tests: ``problem(response, status, code)``."""
    return check_problem


# --- real processes ---------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman.cli.main", *args]


@dataclass
class Server:
    """A running ``ferryman serve``: where it listens, a tenant key, its log."""

    host: str
    port: int
    key: str
    log_path: Path
    process: subprocess.Popen[bytes]
    _log_file: Any = field(repr=False)
    directory: Path | None = None
    env: dict[str, str] = field(default_factory=dict, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def connect(self, timeout_seconds: float = 15.0) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=timeout_seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def new_key(self, tenant: str, *, admin: bool = False) -> str:
        """A key of another tenant, made as an operator would (``ferryman keys create``)."""
        created = subprocess.run(
            _command("keys", "create", "--tenant", tenant, *(["--admin"] if admin else [])),
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_SECONDS,
            check=True,
        )
        return created.stdout.strip()

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_for_log(self, predicate: Callable[[str], bool], timeout_seconds: float = 30.0) -> str:
        deadline = time.monotonic() + timeout_seconds
        while True:
            text = self.log()
            if predicate(text):
                return text
            if time.monotonic() > deadline:
                pytest.fail(f"the server log never showed what was expected:\n{text[-4000:]}")
            time.sleep(0.05)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT_SECONDS)
        self._log_file.close()
        return self.process.returncode


def _env(settings: dict[str, Any]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update({f"FERRYMAN_{name.upper()}": str(value) for name, value in settings.items()})
    return env


def _wait_healthy(server: Server) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            pytest.fail(f"the server exited early ({server.process.returncode}):\n{server.log()}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    pytest.fail(f"the server did not become healthy in time:\n{server.log()}")


def launch(directory: Path, **settings: Any) -> Server:
    """Start ``ferryman serve`` in ``directory`` with these settings; wait until healthy."""
    directory.mkdir(parents=True, exist_ok=True)
    env = _env(settings)
    port = free_port()
    log_path = directory / "serve.log"
    log_file = log_path.open("wb")
    process = subprocess.Popen(
        _command("serve", "--port", str(port)),
        cwd=directory,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log_file,
    )
    server = Server("127.0.0.1", port, "", log_path, process, log_file, directory, env)
    try:
        _wait_healthy(server)
        server.key = server.new_key("hostile")
    except BaseException:
        server.stop()
        raise
    return server


def _servers(directory: Path) -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(**settings: Any) -> Server:
        server = launch(directory / f"server-{len(servers)}", **settings)
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Factory: ``start_server(**settings)`` runs ``ferryman serve``; stopped at teardown."""
    yield from _servers(tmp_path)


@pytest.fixture(scope="module")
def start_module_server(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Callable[..., Server]]:
    """``start_server`` for servers shared by a module's tests (stopped after them)."""
    yield from _servers(tmp_path_factory.mktemp("served"))
