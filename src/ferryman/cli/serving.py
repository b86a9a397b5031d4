"""Long-running processes: the API, workers and the sweeper, on one asyncio loop.

SIGTERM or SIGINT sets one ``stop`` event: workers stop receiving and let calls
in flight finish within the shutdown grace, uvicorn stops accepting and drains
its connections, and the process exits 0. uvicorn's own signal capture is turned
off, since it would re-raise the signal after a graceful stop and turn exit 0
into death by SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import signal
import socket
from dataclasses import dataclass
from typing import TYPE_CHECKING

import uvicorn
from rich.text import Text

from ferryman.cli.common import EXIT_FAILED, err_console, fail
from ferryman.http.app import AppDeps, create_app
from ferryman.http.connections import ConnectionLimits, protocol_with
from ferryman.http.views import webhook_event_body

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Generator
    from typing import Any

    from fastapi import FastAPI

    from ferryman.wiring import Runtime


class _EmbeddedServer(uvicorn.Server):
    """A uvicorn server that leaves signal handling to the command."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


@dataclass(frozen=True, slots=True)
class Roles:
    api: bool
    worker: bool
    sweeper: bool
    concurrency: int | None = None


def app_deps(runtime: Runtime) -> AppDeps:
    s = runtime.settings
    return AppDeps(
        intake=runtime.intake,
        jobs=runtime.jobs,
        operations=runtime.operations,
        api_keys=runtime.api_keys,
        usage=runtime.usage,
        clock=runtime.clock,
        max_body_bytes=s.http.max_body_bytes,
        max_batch_body_bytes=s.http.max_batch_body_bytes,
        body_timeout_seconds=s.http.body_timeout_seconds,
        tenant_rate_per_second=s.tenants.rate_per_second,
        tenant_burst=s.tenants.burst,
        tenant_read_rate_per_second=s.tenants.read_rate_per_second,
        tenant_read_burst=s.tenants.read_burst,
        tasks=runtime.tasks,
        shared_limits=runtime.shared_limits,
        webhook_secrets=runtime.webhook_secrets,
    )


def connection_limits(runtime: Runtime) -> ConnectionLimits:
    s = runtime.settings
    return ConnectionLimits(
        header_timeout_seconds=s.http.header_timeout_seconds,
        keepalive_timeout_seconds=s.http.keepalive_timeout_seconds,
        max_connections=s.http.max_connections,
        max_slow_heads=s.http.max_slow_heads,
        max_slow_heads_per_client=s.http.max_slow_heads_per_client,
    )


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """uvloop's event loop for the long-running processes: its transports and
    scheduling cost about half of asyncio's per request (docs/benchmarks.md); asyncio's
    own where uvloop is not built (Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


def bind(host: str, port: int) -> socket.socket:
    """Listen before anything starts, so a taken port is a clear error, not a stack trace."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY on accepted sockets only when
    # the listener says it is TCP; without it every keep-alive response waits ~40 ms
    # for the client's delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        fail(f"cannot listen on {host}:{port}: {exc.strerror}", EXIT_FAILED)
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _install_signal_handlers(stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


def _server(runtime: Runtime) -> _EmbeddedServer:
    config = server_config(
        create_app(app_deps(runtime)),
        connection_limits(runtime),
        shutdown_grace_seconds=runtime.settings.worker.shutdown_grace_seconds,
    )
    return _EmbeddedServer(config)


def server_config(
    app: FastAPI,
    limits: ConnectionLimits,
    *,
    shutdown_grace_seconds: float,
    parser: str = "httptools",
) -> uvicorn.Config:
    """How the API is served (the benchmarks serve it the same way)."""
    return uvicorn.Config(
        app,
        # llhttp with the header timeout, head bound and connection cap uvicorn lacks
        # (http/connections.py).
        http=protocol_with(limits, parser),
        # No log_config: uvicorn's records reach the root logger, which
        # configure_logging routes through the same sanitising rules as ours.
        log_config=None,
        log_level="warning",
        lifespan="auto",
        timeout_graceful_shutdown=max(1, math.ceil(shutdown_grace_seconds)),
        access_log=False,
        # ferryman reads neither the client address nor the scheme, so it trusts no
        # X-Forwarded-* header, and it does not advertise what it runs on.
        proxy_headers=False,
        server_header=False,
    )


async def run_roles(runtime: Runtime, roles: Roles, sock: socket.socket | None) -> int:
    """Run the chosen roles until a signal (exit 0) or one of them dies (exit 1)."""
    stop = asyncio.Event()
    _install_signal_handlers(stop)
    jobs: list[Coroutine[Any, Any, None]] = []
    server: _EmbeddedServer | None = None
    if roles.api and sock is not None:
        server = _server(runtime)
        jobs.append(server.serve(sockets=[sock]))
    if roles.worker:
        jobs.append(runtime.new_worker(roles.concurrency).run(stop))
    if roles.sweeper:
        jobs.append(runtime.new_sweeper().run(stop))
        # Completion webhooks are sent where the sweeper runs: every worker process.
        jobs.append(runtime.new_webhook_dispatcher(webhook_event_body).run(stop))
    # Everything made so far (modules, the app, the runtime) lives as long as the
    # process: out of the collector's sight, a full collection walks only what requests
    # and jobs make, so it stalls the loop for a fraction of the time (with thousands of
    # waits held, ~300 ms without this).
    gc.freeze()
    tasks = [asyncio.create_task(job) for job in jobs]
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
    signalled = stop.is_set()
    stop.set()
    if server is not None:
        server.should_exit = True
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    stopper.cancel()
    return _exit_code(signalled, outcomes)


def _exit_code(signalled: bool, outcomes: list[BaseException | None]) -> int:
    errors = [o for o in outcomes if isinstance(o, BaseException)]
    for error in errors:
        err_console.print(Text(f"stopped by an error: {type(error).__name__}: {error}", "red"))
    if errors or not signalled:
        # A role that ends by itself, with no signal, is a failure too.
        return EXIT_FAILED
    return 0


def banner(runtime: Runtime, host: str, port: int, roles: Roles) -> None:
    """Where things are and what to type next, on stderr (stdout stays for output)."""
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    lines = [("ferryman is running", "bold green")]
    if roles.api:
        lines.append((f"  API          {url}", ""))
    if roles.worker:
        concurrency = roles.concurrency or runtime.settings.worker.concurrency
        lines.append((f"  workers      {concurrency} calls in flight at most", ""))
    lines += [
        (f"  database     {runtime.database_path}", ""),
        (f"  results      {runtime.results_location}", ""),
    ]
    if roles.api:
        lines += _next_steps(url, runtime.settings.client.url)
    lines.append(("Stop with Ctrl+C (or SIGTERM): calls in flight finish first.", "dim"))
    for text, style in lines:
        err_console.print(Text(text, style=style))


def _next_steps(url: str, configured_url: str) -> list[tuple[str, str]]:
    steps = [
        ("Next:", "bold"),
        ("  export FERRYMAN_API_KEY=$(ferryman keys create --tenant me)", ""),
    ]
    if url.rstrip("/") != configured_url.rstrip("/"):
        steps.append((f"  export FERRYMAN_URL={url}", ""))
    steps.append(('  ferryman submit --task generate --input \'{"prompt": "hi"}\' --wait', ""))
    return steps
