"""How soon does a waiting client learn that a job finished in another process?

``ferryman api`` and ``ferryman worker`` run as separate processes over one engine
(SQLite: one file; PostgreSQL with ``--postgres URL``: a scratch database made for the
run and dropped after it, on 127.0.0.1). This process is the clients: it holds
``--held`` waits (``GET /v1/generations/{id}?wait=60``, one connection each) on jobs
queued behind the measured ones, so they stay open the whole time, and ``--jobs``
more on the measured jobs, which the worker (``--concurrency`` slots, the sim model
answering after ``--latency-ms``) finishes at about concurrency / latency a second.

seen        a measured job's ``completed_at`` as the worker stored it -> the waiting
            client has the answer (both wall clocks of this machine): p50, p99, max.
waiters     the fewest waits open at once from the first measured answer to the last
            (``waiters_peak``: the most), all on the one API process.
other_get   meanwhile, a plain GET of a finished job every 20 ms on a connection of its
            own: its latency p50 / p99 / max, to show the watcher's reads of every
            watched job do not hold the API's event loop.

The API is started with ``FERRYMAN_MAX_CONNECTIONS`` above the waits (each wait holds a
connection) and the tenant read budget off (each wait spends one read); this process
and its children need a file descriptor per connection (``ulimit -n``).

    .venv/bin/python bench/wait_latency.py --json
    .venv/bin/python bench/wait_latency.py --postgres postgresql://postgres@127.0.0.1:5432/postgres
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from harness import TENANT, ferryman_command, fmt, free_port, percentile, print_table
from peer_systems import scratch_database

if TYPE_CHECKING:
    from collections.abc import Iterator

WAIT_SECONDS = 60
OPEN_AT_ONCE = 200
PROBE_EVERY_SECONDS = 0.02
HELD_LATENCY_MS = 600_000
HELD_AFTER_SECONDS = 3.0


def _raise_fd_limit() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return hard


def _epoch(rfc3339: str) -> float:
    return datetime.fromisoformat(rfc3339).timestamp()


# --- a minimal HTTP/1.1 client: thousands of connections cost this process little -----


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, port: int) -> Connection:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return cls(reader, writer)

    async def request(
        self, method: str, path: str, key: str, body: bytes | None = None
    ) -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\nAuthorization: Bearer {key}\r\n"
        if body is not None:
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.writer.write(head.encode() + b"\r\n" + (body or b""))
        await self.writer.drain()
        return await self.response()

    async def response(self) -> tuple[int, bytes]:
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split()[1])
        length = 0
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value)
        return status, await self.reader.readexactly(length)

    def close(self) -> None:
        self.writer.close()


@dataclass
class Run:
    port: int
    key: str
    open_waits: int = 0
    answered: int = 0
    min_open: int | None = None
    peak_open: int = 0
    measuring: bool = False
    seen_ms: list[float] = field(default_factory=list)
    probe_ms: list[float] = field(default_factory=list)
    # (when, ms) of each, to place the slowest in time.
    seen_at: list[tuple[float, float]] = field(default_factory=list)
    probe_at: list[tuple[float, float]] = field(default_factory=list)
    timeouts: int = 0
    retries: int = 0
    # When each wait's request now outstanding was sent, by job id.
    sent_at: dict[str, float] = field(default_factory=dict)

    def opened(self) -> None:
        self.open_waits += 1
        self.peak_open = max(self.peak_open, self.open_waits)

    def closed(self) -> None:
        self.open_waits -= 1

    def note_open(self) -> None:
        if self.measuring:
            self.min_open = (
                self.open_waits if self.min_open is None else min(self.min_open, self.open_waits)
            )


async def wait_on(run: Run, connection: Connection, job_id: str, *, measured: bool) -> None:
    """One client's wait: ask again while the job is unfinished (a wait timed out)."""
    path = f"/v1/generations/{job_id}?wait={WAIT_SECONDS}"
    run.opened()
    try:
        while True:
            run.sent_at[job_id] = time.monotonic()
            status, body = await connection.request("GET", path, run.key)
            answered_at = time.time()
            if status == 503:
                # A burst of thousands of reads can outrun a small connection pool (as
                # plain GETs would): try again, as ferryman's clients do.
                run.retries += 1
                await asyncio.sleep(0.5)
                continue
            if status != 200:
                raise RuntimeError(f"a wait answered {status}: {body[:200]!r}")
            job = json.loads(body)
            if job["status"] in {"SUCCEEDED", "FAILED", "CANCELLED"}:
                break
            run.timeouts += 1
    finally:
        run.sent_at.pop(job_id, None)
        run.closed()
        connection.close()
    if measured:
        if not run.measuring:
            run.measuring = True
        run.note_open()
        run.seen_ms.append((answered_at - _epoch(job["completed_at"])) * 1000)
        run.seen_at.append((answered_at, run.seen_ms[-1]))
        run.answered += 1
        run.note_open()


async def probe(run: Run, job_id: str, stop: asyncio.Event) -> None:
    connection = await Connection.open(run.port)
    try:
        while not stop.is_set():
            began = time.perf_counter()
            status, _ = await connection.request("GET", f"/v1/generations/{job_id}", run.key)
            if status == 200 and run.measuring:
                run.probe_ms.append((time.perf_counter() - began) * 1000)
                run.probe_at.append((time.time(), run.probe_ms[-1]))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), PROBE_EVERY_SECONDS)
    finally:
        connection.close()


async def submit(run: Run, count: int, latency_ms: int, label: str) -> list[str]:
    ids: list[str] = []
    connection = await Connection.open(run.port)
    try:
        for start in range(0, count, 1000):
            jobs = [
                {
                    "task": "generate",
                    "input": {"prompt": f"{label} {i}", "simulate": {"latency_ms": latency_ms}},
                }
                for i in range(start, min(count, start + 1000))
            ]
            body = json.dumps({"jobs": jobs}).encode()
            status, answer = await connection.request(
                "POST", "/v1/generations/batch", run.key, body
            )
            if status != 200:
                raise RuntimeError(f"the batch answered {status}: {answer[:200]!r}")
            ids += [item["job_id"] for item in json.loads(answer)["results"]]
    finally:
        connection.close()
    return ids


async def open_waits(
    run: Run, job_ids: list[str], *, measured: bool, tasks: list[asyncio.Task[None]]
) -> None:
    for start in range(0, len(job_ids), OPEN_AT_ONCE):
        chunk = job_ids[start : start + OPEN_AT_ONCE]
        connections = await asyncio.gather(*(Connection.open(run.port) for _ in chunk))
        tasks += [
            asyncio.create_task(wait_on(run, c, job_id, measured=measured))
            for c, job_id in zip(connections, chunk, strict=True)
        ]


def _raise_failed(tasks: list[asyncio.Task[None]]) -> None:
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            raise RuntimeError("a wait failed") from task.exception()


async def _ready(port: int) -> None:
    for _ in range(600):
        with contextlib.suppress(OSError):
            connection = await Connection.open(port)
            try:
                connection.writer.write(b"GET /readyz HTTP/1.1\r\nHost: bench\r\n\r\n")
                status, _ = await connection.response()
                if status == 200:
                    return
            finally:
                connection.close()
        await asyncio.sleep(0.05)
    raise RuntimeError("ferryman api did not become ready")


async def measure_engine(
    name: str, database_url: str, directory: Path, args: argparse.Namespace
) -> dict[str, Any]:
    port = free_port()
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": database_url,
        "FERRYMAN_LOG_LEVEL": "WARNING",
        "FERRYMAN_SIM_SCRIPTS": "true",
        "FERRYMAN_MAX_CONNECTIONS": str(args.held + args.jobs + 500),
        "FERRYMAN_TENANT_READ_RATE_PER_SECOND": "0",
        "FERRYMAN_TENANT_RATE_PER_SECOND": "0",
    }
    if name == "sqlite":
        env["FERRYMAN_RESULTS_URL"] = f"file://{directory / 'results'}"
    made = await asyncio.create_subprocess_exec(
        *ferryman_command("keys", "create", "--tenant", TENANT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await made.communicate()
    run = Run(port=port, key=out.decode().split()[-1])
    api = await asyncio.create_subprocess_exec(
        *ferryman_command("api", "--port", str(port)), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    worker = None
    tasks: list[asyncio.Task[None]] = []
    stop = asyncio.Event()
    try:
        await _ready(port)
        # The worker starts after every wait is open: the measured jobs finish only then.
        measured = await submit(run, args.jobs, args.latency_ms, "measured")
        # Queued behind the measured ones, and slow: unfinished while anything is measured.
        held = await submit(run, args.held, HELD_LATENCY_MS, "held")
        await open_waits(run, held, measured=False, tasks=tasks)
        await open_waits(run, measured, measured=True, tasks=tasks)
        # Every wait held by the server: its request outstanding for longer than a read
        # refused for want of a pooled connection takes to come back (2 s).
        total = len(held) + len(measured)
        while (
            len(run.sent_at) < total
            or time.monotonic() - max(run.sent_at.values()) < HELD_AFTER_SECONDS
        ):
            _raise_failed(tasks)
            await asyncio.sleep(0.1)
        opened_before_work = run.open_waits
        worker = await asyncio.create_subprocess_exec(
            *ferryman_command("worker", "--no-sweeper", "--concurrency", str(args.concurrency)),
            env=env,
            stderr=asyncio.subprocess.DEVNULL,
        )
        prober = asyncio.create_task(probe(run, measured[0], stop))
        while run.answered < args.jobs:
            _raise_failed(tasks)
            await asyncio.sleep(0.05)
        stop.set()
        await prober
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for process in (api, worker):
            if process is not None and process.returncode is None:
                process.terminate()
                await process.wait()
    return {
        "engine": name,
        "jobs": args.jobs,
        "seen_p50_ms": percentile(run.seen_ms, 50),
        "seen_p99_ms": percentile(run.seen_ms, 99),
        "seen_max_ms": max(run.seen_ms),
        "waiters": run.min_open,
        "waiters_peak": run.peak_open,
        "waiters_before_work": opened_before_work,
        "wait_timeouts": run.timeouts,
        "wait_retries_after_503": run.retries,
        "other_get_p50_ms": percentile(run.probe_ms, 50),
        "other_get_p99_ms": percentile(run.probe_ms, 99),
        "other_get_max_ms": max(run.probe_ms) if run.probe_ms else None,
        "other_gets": len(run.probe_ms),
        # The slowest of each, at seconds after the first measured answer.
        "seen_slowest": _slowest(run.seen_at),
        "other_get_slowest": _slowest(run.probe_at),
    }


def _slowest(timed: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if not timed:
        return []
    first = min(at for at, _ in timed)
    worst = sorted(timed, key=lambda pair: pair[1], reverse=True)[:5]
    return [(round(at - first, 2), round(ms, 1)) for at, ms in worst]


@contextlib.contextmanager
def _directory(args: argparse.Namespace) -> Iterator[Path]:
    # Short: the SQLite engine's wake-up sockets live beside the file (108-byte paths).
    path = Path(tempfile.mkdtemp(prefix="fm-wait-", dir=args.dir))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    engines: list[dict[str, Any]] = []
    if not args.skip_sqlite:
        with _directory(args) as directory:
            url = f"sqlite:///{directory / 'wait.db'}"
            engines.append(await measure_engine("sqlite", url, directory, args))
    if args.postgres:
        if urlsplit(args.postgres).hostname not in {"127.0.0.1", "localhost"}:
            raise SystemExit("--postgres must name a server on 127.0.0.1")
        name = f"ferryman_wait_{uuid.uuid4().hex[:8]}"
        parts = urlsplit(args.postgres)
        server = urlunsplit((parts.scheme, parts.netloc, "", "", ""))
        with _directory(args) as directory, scratch_database(server, name) as url:
            engines.append(await measure_engine("postgresql", url, directory, args))
    return {
        "engines": engines,
        "latency_ms": args.latency_ms,
        "concurrency": args.concurrency,
        "load_1m": os.getloadavg()[0],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="measured jobs (and waits)")
    parser.add_argument("--held", type=int, default=2000, help="waits held open throughout")
    parser.add_argument("--latency-ms", type=int, default=500, help="the sim's answer time")
    parser.add_argument("--concurrency", type=int, default=32, help="the worker's slots")
    parser.add_argument(
        "--postgres",
        default=os.environ.get("FERRYMAN_TEST_POSTGRES_URL"),
        help="postgresql://user@127.0.0.1:5432/any (default: FERRYMAN_TEST_POSTGRES_URL)",
    )
    parser.add_argument("--skip-sqlite", action="store_true")
    parser.add_argument("--dir", default="/tmp", help="where the temporary directory goes")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args()
    _raise_fd_limit()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
        return
    for engine in result["engines"]:
        print_table(
            f"wait latency, {engine['engine']}: api and worker in separate processes",
            [
                (
                    "seen p50 / p99 / max",
                    f"{fmt(engine['seen_p50_ms'])} / "
                    f"{fmt(engine['seen_p99_ms'])} / {fmt(engine['seen_max_ms'])} ms",
                ),
                ("waits open (fewest / most)", f"{engine['waiters']} / {engine['waiters_peak']}"),
                (
                    "other GET p50 / p99 / max",
                    f"{fmt(engine['other_get_p50_ms'])} / "
                    f"{fmt(engine['other_get_p99_ms'])} / {fmt(engine['other_get_max_ms'])} ms",
                ),
            ],
        )


if __name__ == "__main__":
    main()
