"""The floor under a job submitted over HTTP: what this machine's Python HTTP stack costs
on its own, in the shape of the peers benchmark (bench/peers.py, ferryman-single and
ferryman-sequential), so ferryman's per-job cost can be split into the stack's and ours.

One server process and one producer process, N POSTs of a submission-sized JSON body
(``{"task": "generate", "input": {"prompt": ...}}`` with ``Authorization`` and
``Idempotency-Key`` headers), each answered 202 with a submission-shaped JSON. For each
pair: the producer's rate, and CPU-ms per request of the server's process tree and of
the producer's loop.

Servers (``--servers``):

bare              a bare ASGI app (reads the body, parses it, answers 202), served with
                  ferryman's own server configuration (cli/serving.py: uvicorn, llhttp,
                  the hardened protocol, uvloop)
starlette         the same answer from a Starlette route, same server
fastapi           the same answer from a FastAPI route taking a ``Request``, same server
granian           the bare app under granian (one worker, uvloop), if it is installed
ferryman-memory   ferryman's app and worker in one process on the memory engine (no SQLite)
ferryman-sqlite   ``ferryman serve`` on SQLite FULL, as the peers benchmark runs it
ferryman-sqlite-api  ``ferryman api`` on SQLite FULL, no worker: what accepting a job costs alone

Producers (``--producers``), each 32 in flight (``--concurrency``) and sequential:

ferryman   ``ferryman.AsyncClient`` (in flight) / ``ferryman.Client`` (sequential)
httpx      ``httpx.AsyncClient`` / ``httpx.Client`` posting the same request
raw        hand-written HTTP/1.1 over asyncio streams / a blocking socket: the least a
           producer can spend, so the server is measured with the most CPU left to it

The server's CPU is read from /proc over the producer's loop (plus 0.3 s for a
ferryman server's worker to finish what it was given). Settings of the ferryman rows
are the peers benchmark's (FERRYMAN_ENV of bench/peers.py).

Run: ``.venv/bin/python bench/http_floor.py [--requests 3000] [--json]``; a subset with
``--servers bare,ferryman-sqlite --producers raw,ferryman --modes concurrent``. Another
build of ferryman (a before/after pair) is measured by putting its ``src`` first on
``PYTHONPATH``: every process of the run imports it (``git archive <commit> src``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from fastapi import FastAPI, Request  # noqa: E402  (FastAPI resolves route annotations here)
from starlette.responses import Response  # noqa: E402

import peer_systems as peers  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

SERVERS = (
    "bare",
    "starlette",
    "fastapi",
    "granian",
    "ferryman-memory",
    "ferryman-sqlite",
    "ferryman-sqlite-api",
)
PRODUCERS = ("ferryman", "httpx", "raw")
MODES = ("concurrent", "sequential")
SUBMIT_PATH = "/v1/generations"
TENANT = "bench"
# The peers benchmark's settings for ferryman (bench/peers.py FERRYMAN_ENV).
FERRYMAN_ENV = {
    "FERRYMAN_SQLITE_SYNCHRONOUS": "FULL",
    "FERRYMAN_TENANT_RATE_PER_SECOND": "0",
    "FERRYMAN_TENANT_READ_RATE_PER_SECOND": "0",
    "FERRYMAN_LOG_LEVEL": "WARNING",
}
# The bare servers' API key: never checked, only sent.
BARE_KEY = "fm_000000000000_floorfloorfloorfloor"
SETTLE_SECONDS = 0.3


# --- the bare apps ------------------------------------------------------------------


def _answer(n: int) -> bytes:
    return json.dumps(
        {
            "job_id": f"gen_{n:026d}",
            "status": "QUEUED",
            "created_at": "2026-11-30T12:00:00.000000Z",
            "correlation_id": f"cor_{n:026d}",
        }
    ).encode()


_counter = 0


def _next_answer(body: bytes) -> bytes:
    global _counter
    json.loads(body)  # read like a submission is read
    _counter += 1
    return _answer(_counter)


_OK = b'{"status":"ok"}'
_JSON_HEADERS = [(b"content-type", b"application/json")]


async def bare_app(
    scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
) -> None:
    """Reads the whole body, parses it, answers 202 (POST) or 200 (GET, readiness)."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    body = b""
    more = True
    while more:
        message = await receive()
        body += message.get("body", b"")
        more = message.get("more_body", False)
    if scope["method"] == "POST":
        status, payload = 202, _next_answer(body)
    else:
        status, payload = 200, _OK
    headers = [*_JSON_HEADERS, (b"content-length", str(len(payload)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


def starlette_app() -> Any:
    from starlette.applications import Starlette
    from starlette.routing import Route

    async def submit(request: Request) -> Response:
        body = await request.body()
        return Response(_next_answer(body), status_code=202, media_type="application/json")

    async def ready(_request: Request) -> Response:
        return Response(_OK, media_type="application/json")

    return Starlette(routes=[Route(SUBMIT_PATH, submit, methods=["POST"]), Route("/readyz", ready)])


def fastapi_app() -> Any:
    app = FastAPI()

    @app.post(SUBMIT_PATH, status_code=202)
    async def submit(request: Request) -> Response:
        body = await request.body()
        return Response(_next_answer(body), status_code=202, media_type="application/json")

    @app.get("/readyz")
    async def ready() -> Response:
        return Response(_OK, media_type="application/json")

    return app


def _serve_uvicorn(app: Any, port: int) -> None:
    """Serve ``app`` exactly as ``ferryman serve`` serves ferryman's (cli/serving.py)."""
    from ferryman.cli.common import run
    from ferryman.cli.serving import _EmbeddedServer, bind, event_loop_factory, server_config
    from ferryman.http.connections import ConnectionLimits

    limits = ConnectionLimits(
        header_timeout_seconds=10.0, keepalive_timeout_seconds=5.0, max_connections=1024
    )
    server = _EmbeddedServer(server_config(app, limits, shutdown_grace_seconds=1.0))
    sock = bind("127.0.0.1", port)
    run(server.serve(sockets=[sock]), event_loop_factory())


async def _ferryman_memory(port: int, key_file: Path) -> int:
    """ferryman's app and worker in one process over the memory engine, the key written
    to ``key_file`` (the memory engine cannot be reached by ``ferryman keys create``)."""
    from ferryman.cli.common import settings
    from ferryman.cli.serving import Roles, bind, run_roles
    from ferryman.wiring import open_runtime

    sock = bind("127.0.0.1", port)
    async with open_runtime(settings()) as runtime:
        await runtime.prepare_storage()
        key = await runtime.api_keys.create(TENANT)
        await asyncio.to_thread(key_file.write_text, key)
        return await run_roles(runtime, Roles(api=True, worker=True, sweeper=True), sock)


def serve_main(kind: str, port: int, key_file: Path | None) -> int:
    if kind == "bare":
        _serve_uvicorn(bare_app, port)
    elif kind == "starlette":
        _serve_uvicorn(starlette_app(), port)
    elif kind == "fastapi":
        _serve_uvicorn(fastapi_app(), port)
    elif kind == "ferryman-memory":
        from ferryman.cli.common import run
        from ferryman.cli.serving import event_loop_factory

        assert key_file is not None
        return run(_ferryman_memory(port, key_file), event_loop_factory())
    else:
        raise SystemExit(f"unknown server {kind}")
    return 0


# --- the producers ------------------------------------------------------------------


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _prompt(i: int) -> dict[str, Any]:
    return {"prompt": f"benchmark job f-{i}"}


def _request_bytes(host: str, key: str, i: int) -> bytes:
    body = json.dumps({"task": "generate", "input": _prompt(i)}).encode()
    head = (
        f"POST {SUBMIT_PATH} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Idempotency-Key: {uuid.uuid4()}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise RuntimeError("an answer without Content-Length")


async def _raw_lane(url: str, key: str, numbers: Any) -> None:
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        for i in numbers:
            writer.write(_request_bytes(f"{host}:{port}", key, i))
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 202"):
                raise RuntimeError(f"answered {head[:40]!r}")
            await reader.readexactly(_content_length(head))
    finally:
        writer.close()


def _raw_sequential(url: str, key: str, n: int) -> None:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        stream = sock.makefile("rb")
        for i in range(n):
            sock.sendall(_request_bytes(f"{host}:{port}", key, i))
            head = b""
            while not head.endswith(b"\r\n\r\n"):
                line = stream.readline()
                if not line:
                    raise RuntimeError("the server closed the connection")
                head += line
            if not head.startswith(b"HTTP/1.1 202"):
                raise RuntimeError(f"answered {head[:40]!r}")
            stream.read(_content_length(head))


async def _concurrent(producer: str, url: str, key: str, n: int, concurrency: int) -> None:
    numbers = iter(range(n))
    if producer == "raw":
        await asyncio.gather(*(_raw_lane(url, key, numbers) for _ in range(concurrency)))
        return
    if producer == "ferryman":
        from ferryman import AsyncClient

        async with AsyncClient(url, key) as client:

            async def lane() -> None:
                for i in numbers:
                    await client.submit("generate", _prompt(i))

            await asyncio.gather(*(lane() for _ in range(concurrency)))
        return
    import httpx

    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:

        async def httpx_lane() -> None:
            for i in numbers:
                response = await http.post(
                    SUBMIT_PATH,
                    json={"task": "generate", "input": _prompt(i)},
                    headers={"Idempotency-Key": str(uuid.uuid4())},
                )
                if response.status_code != 202:
                    raise RuntimeError(f"answered {response.status_code}")
                response.json()

        await asyncio.gather(*(httpx_lane() for _ in range(concurrency)))


def _sequential(producer: str, url: str, key: str, n: int) -> None:
    if producer == "raw":
        _raw_sequential(url, key, n)
        return
    if producer == "ferryman":
        from ferryman import Client

        with Client(url, key) as client:
            for i in range(n):
                client.submit("generate", _prompt(i))
        return
    import httpx

    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}) as http:
        for i in range(n):
            response = http.post(
                SUBMIT_PATH,
                json={"task": "generate", "input": _prompt(i)},
                headers={"Idempotency-Key": str(uuid.uuid4())},
            )
            if response.status_code != 202:
                raise RuntimeError(f"answered {response.status_code}")
            response.json()


def produce_main(producer: str, mode: str, url: str, key: str, n: int, concurrency: int) -> int:
    """Print START before the loop and one JSON line after it (the orchestrator reads the
    server's CPU at those two moments)."""
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if mode == "concurrent" and importlib.util.find_spec("uvloop") is not None:
        import uvloop

        loop_factory = uvloop.new_event_loop
    print("START", flush=True)
    cpu, began = _cpu(), time.perf_counter()
    if mode == "concurrent":
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(_concurrent(producer, url, key, n, concurrency))
    else:
        _sequential(producer, url, key, n)
    seconds, cpu = time.perf_counter() - began, _cpu() - cpu
    print(json.dumps({"requests": n, "seconds": seconds, "cpu_s": cpu}), flush=True)
    return 0


# --- the orchestrator ---------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _self(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


@contextlib.contextmanager
def started(kind: str, root: Path) -> Any:
    """The server ``kind`` running; yields (url, api key, service)."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    path = os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(BENCH_DIR)]))
    env = {**os.environ, **FERRYMAN_ENV, "PYTHONPATH": path}
    ready = f"{url}/readyz"
    key = BARE_KEY
    if kind == "granian":
        argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--workers", "1", "--loop", "uvloop", "--no-ws"]
        argv += ["--log-level", "warning", "http_floor:bare_app"]
    elif kind in ("ferryman-sqlite", "ferryman-sqlite-api"):
        env["FERRYMAN_DATABASE_URL"] = f"sqlite:///{root / 'ferryman.db'}"
        env["FERRYMAN_RESULTS_URL"] = f"file://{root / 'results'}"
        made = subprocess.run(
            [sys.executable, "-m", "ferryman", "keys", "create", "--tenant", TENANT],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        key = made.stdout.strip().splitlines()[-1]
        command = "serve" if kind == "ferryman-sqlite" else "api"
        argv = [sys.executable, "-m", "ferryman", command, "--port", str(port)]
    elif kind == "ferryman-memory":
        env["FERRYMAN_DATABASE_URL"] = "memory://"
        key_file = root / "key"
        argv = _self("_serve", kind, "--port", str(port), "--key-file", str(key_file))
    else:
        argv = _self("_serve", kind, "--port", str(port))
    service = peers.Service(f"floor-{kind}", argv, env, root, ready_url=ready)
    with peers.running([service]):
        if kind == "ferryman-memory":
            key = (root / "key").read_text().strip()
        yield url, key, service


def measure(
    service: peers.Service, url: str, key: str, producer: str, mode: str, n: int, concurrency: int
) -> dict[str, Any]:
    argv = _self("_produce", producer, mode, "--url", url, "--key", key, "--requests", str(n))
    argv += ["--concurrency", str(concurrency)]
    assert service.process is not None
    roots = [service.process.pid]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, cwd=BENCH_DIR)
    assert process.stdout is not None
    before = after = 0.0
    report: dict[str, Any] = {}
    for line in process.stdout:
        if line.strip() == "START":
            before = peers.tree_cpu_seconds(roots)
        elif line.strip():
            if service.name.startswith("floor-ferryman"):
                time.sleep(SETTLE_SECONDS)
            after = peers.tree_cpu_seconds(roots)
            report = json.loads(line)
    if process.wait() != 0 or not report:
        raise RuntimeError(f"producer {producer} {mode} failed")
    service.check()
    requests = report["requests"]
    server_ms = (after - before) * 1000 / requests
    producer_ms = report["cpu_s"] * 1000 / requests
    return {
        "producer": producer,
        "mode": mode,
        "requests": requests,
        "per_s": requests / report["seconds"],
        "server_cpu_ms": server_ms,
        "producer_cpu_ms": producer_ms,
        "total_cpu_ms": server_ms + producer_ms,
    }


def run_all(args: argparse.Namespace, log: Callable[[str], None]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for kind in args.servers:
        if kind == "granian" and importlib.util.find_spec("granian") is None:
            log("granian is not installed: its row is left out")
            continue
        with (
            tempfile.TemporaryDirectory(prefix="http-floor-") as directory,
            started(kind, Path(directory)) as (url, key, service),
        ):
            for mode in args.modes:
                concurrency = args.concurrency if mode == "concurrent" else 1
                for producer in args.producers:
                    n = args.requests if mode == "concurrent" else args.sequential_requests
                    warm = max(50, n // 10)
                    measure(service, url, key, producer, mode, warm, concurrency)
                    row = {
                        "server": kind,
                        **measure(service, url, key, producer, mode, n, concurrency),
                    }
                    log(_line(row))
                    rows.append(row)
    return rows


def _line(row: dict[str, Any]) -> str:
    return (
        f"| {row['server']} | {row['producer']} | {row['mode']} | {row['per_s']:.0f} "
        f"| {row['server_cpu_ms']:.2f} | {row['producer_cpu_ms']:.2f} | {row['total_cpu_ms']:.2f} |"
    )


HEADER = (
    "| server | producer | mode | requests/s | server CPU-ms/req | producer CPU-ms/req "
    "| total CPU-ms/req |\n| --- | --- | --- | ---: | ---: | ---: | ---: |"
)


def _split(text: str, allowed: Sequence[str]) -> list[str]:
    chosen = [part.strip() for part in text.split(",") if part.strip()]
    unknown = sorted(set(chosen) - set(allowed))
    if unknown:
        raise SystemExit(f"unknown: {', '.join(unknown)} (choose from {', '.join(allowed)})")
    return chosen


def main(argv: Sequence[str]) -> int:
    if argv and argv[0] == "_serve":
        sub = argparse.ArgumentParser()
        sub.add_argument("kind")
        sub.add_argument("--port", type=int, required=True)
        sub.add_argument("--key-file", type=Path)
        a = sub.parse_args(argv[1:])
        return serve_main(a.kind, a.port, a.key_file)
    if argv and argv[0] == "_produce":
        sub = argparse.ArgumentParser()
        sub.add_argument("producer", choices=PRODUCERS)
        sub.add_argument("mode", choices=MODES)
        sub.add_argument("--url", required=True)
        sub.add_argument("--key", required=True)
        sub.add_argument("--requests", type=int, required=True)
        sub.add_argument("--concurrency", type=int, default=32)
        a = sub.parse_args(argv[1:])
        return produce_main(a.producer, a.mode, a.url, a.key, a.requests, a.concurrency)
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per run, 32 in flight")
    parser.add_argument(
        "--sequential-requests", type=int, default=None, help="per sequential run (--requests)"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--servers", default=",".join(SERVERS))
    parser.add_argument("--producers", default=",".join(PRODUCERS))
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    args.servers = _split(args.servers, SERVERS)
    args.producers = _split(args.producers, PRODUCERS)
    args.modes = _split(args.modes, MODES)
    args.sequential_requests = args.sequential_requests or args.requests

    def log(line: str) -> None:
        print(line, file=sys.stderr if args.json else sys.stdout, flush=True)

    load = os.getloadavg()[0]
    log(f"http floor: {args.requests} requests a run, load average {load:.2f} at the start")
    log(HEADER)
    rows = run_all(args, log)
    if args.json:
        print(
            json.dumps(
                {"load_average_start": load, "load_average_end": os.getloadavg()[0], "rows": rows}
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
