"""Throughput: N sim jobs (0 ms model latency) from accepted to SUCCEEDED on SQLite.

Three measurements, each on its own fresh database file in a temporary directory:

raw      the engine's own limit: a plain sqlite3 loop with the same file settings,
         one transaction claiming a row and one completing it, per job, one job at
         a time (no batching), over rows inserted beforehand.
service  Intake + Worker in this process: jobs are submitted (``--batch`` at a time)
         while the worker runs, so intake and worker share the database writer as
         they do in ``ferryman serve``.
http     the same through the real HTTP app served by uvicorn in this process with
         the worker beside it (as ``ferryman serve`` runs them), and httpx posting
         from a separate process over ``--clients`` keep-alive connections.

Rates are N / (first accept -> last SUCCEEDED), both times as the service recorded
them. Run: ``.venv/bin/python bench/throughput.py [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import importlib.util
import io
import json
import os
import pstats
import resource
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn

import pg_throughput
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.access import ApiKeys
from ferryman.services.jobs import JobQueries
from ferryman.services.operations import Operations
from ferryman.services.usage import UsageReports
from harness import (
    TENANT,
    Stack,
    fmt,
    open_stack,
    percentile,
    print_table,
    quiet_logs,
    read_job_times,
    submit_all,
    wait_all_succeeded,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Generator

TARGET_SERVICE_RATIO = 0.35
KEY_VARIABLE = "FERRYMAN_BENCH_API_KEY"
DONE_TIMEOUT_SECONDS = 300.0

# httpcore imports sniffio on every lock it creates; when sniffio is not installed each
# failed import scans sys.path (~0.15 ms). A cached "not installed" keeps that cost out
# of the client's side of the measurement and changes nothing else.
if importlib.util.find_spec("sniffio") is None:
    sys.modules["sniffio"] = None  # type: ignore[assignment]


# --- raw: the engine alone ---------------------------------------------------------


def raw_rate(path: Path, n: int, synchronous: str) -> dict[str, Any]:
    """Two single-row transactions per job (claim, complete), committed one by one."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {synchronous}")
        conn.execute("CREATE TABLE jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL)")
        ids = [f"gen_{i:026d}" for i in range(n)]
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO jobs (id, status) VALUES (?, 'QUEUED')", [(i,) for i in ids])
        conn.execute("COMMIT")
        started = time.perf_counter()
        for job_id in ids:
            _one_transaction(
                conn,
                "UPDATE jobs SET status = 'PROCESSING' WHERE id = ? AND status = 'QUEUED'",
                job_id,
            )
            _one_transaction(
                conn,
                "UPDATE jobs SET status = 'SUCCEEDED' WHERE id = ? AND status = 'PROCESSING'",
                job_id,
            )
        elapsed = time.perf_counter() - started
    finally:
        conn.close()
    return {"raw_jobs_per_s": n / elapsed, "raw_seconds": elapsed, "raw_commits_per_job": 2.0}


def _one_transaction(conn: sqlite3.Connection, sql: str, job_id: str) -> None:
    conn.execute("BEGIN IMMEDIATE")
    if conn.execute(sql, (job_id,)).rowcount != 1:
        raise RuntimeError("raw loop: a conditional update matched no row")
    conn.execute("COMMIT")


# --- service: Intake + Worker --------------------------------------------------------


async def service_rate(stack: Stack, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    worker = stack.worker(providers=[SimulatedProvider()], concurrency=args.concurrency)
    stop = asyncio.Event()
    meter = Meter.start(stack)
    running = asyncio.create_task(worker.run(stop))
    try:
        with _profiled(args.profile == "service"):
            await submit_all(stack.intake(), args.jobs, batch=args.batch, rate=args.rate)
            await wait_all_succeeded(path, args.jobs, timeout_seconds=DONE_TIMEOUT_SECONDS)
    finally:
        stop.set()
        await running
    return _summary("service", path, args.jobs, meter.stop(stack))


@contextlib.contextmanager
def _profiled(enabled: bool) -> Generator[None, None, None]:
    """cProfile the block (the event loop's thread only) and print the heaviest functions."""
    if not enabled:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out).strip_dirs()
        stats.sort_stats("tottime").print_stats(25)
        stats.sort_stats("cumulative").print_stats(40)
        print(out.getvalue(), file=sys.stderr)


@dataclass(frozen=True, slots=True)
class Meter:
    """Commits, write operations and this process's CPU time (all threads) over a run."""

    commits: int
    writes: int
    cpu_seconds: float

    @classmethod
    def start(cls, stack: Stack) -> Meter:
        return cls(stack.db.commit_count, stack.db.write_count, time.process_time())

    def stop(self, stack: Stack) -> Meter:
        return Meter(
            stack.db.commit_count - self.commits,
            stack.db.write_count - self.writes,
            time.process_time() - self.cpu_seconds,
        )


def _summary(name: str, path: Path, n: int, used: Meter) -> dict[str, Any]:
    times = read_job_times(path)
    if len(times.accepted) != n:
        raise RuntimeError(
            f"{name}: expected {n} succeeded first attempts, found {len(times.accepted)}"
        )
    claim_ms = times.accept_to_claim_ms()
    done_ms = times.accept_to_done_ms()
    return {
        f"{name}_jobs_per_s": n / times.span_seconds,
        f"{name}_seconds": times.span_seconds,
        f"{name}_accept_to_claim_p50_ms": percentile(claim_ms, 50),
        f"{name}_accept_to_claim_p99_ms": percentile(claim_ms, 99),
        f"{name}_accept_to_done_p50_ms": percentile(done_ms, 50),
        f"{name}_accept_to_done_p99_ms": percentile(done_ms, 99),
        f"{name}_commits_per_job": used.commits / n,
        f"{name}_writes_per_job": used.writes / n,
        f"{name}_writes_per_commit": used.writes / used.commits if used.commits else 0.0,
        # The server process only: the HTTP client runs in a process of its own by default.
        f"{name}_cpu_ms_per_job": used.cpu_seconds * 1000 / n,
    }


# --- http: the real app under uvicorn --------------------------------------------------


class _QuietServer(uvicorn.Server):
    """uvicorn inside our loop: the benchmark, not uvicorn, owns the signals."""

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield


def _listening_socket() -> socket.socket:
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY only on accepted sockets whose
    # proto says TCP, and without it every keep-alive response stalls ~40 ms (Nagle
    # against the client's delayed ACK). A socket made with proto 0 inherits 0.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def _server(stack: Stack, parser: str) -> tuple[_QuietServer, ApiKeys]:
    """The app as ``ferryman serve`` serves it: default settings, the same server config."""
    # Imported here, after quiet_logs(): the HTTP modules bind loggers at import time.
    from ferryman.cli.serving import server_config
    from ferryman.config import Settings
    from ferryman.http.app import AppDeps, create_app
    from ferryman.http.connections import ConnectionLimits

    s = Settings()
    api_keys = ApiKeys(keys=stack.keys, clock=stack.clock)
    deps = AppDeps(
        intake=stack.intake(),
        jobs=JobQueries(
            store=stack.store.store, ledger=stack.store, results=stack.results, clock=stack.clock
        ),
        operations=Operations(
            store=stack.store.store,
            ledger=stack.store,
            queue=stack.queue,
            control=stack.control,
            clock=stack.clock,
        ),
        api_keys=api_keys,
        usage=UsageReports(store=stack.store.store, clock=stack.clock),
        clock=stack.clock,
        max_body_bytes=s.http.max_body_bytes,
        body_timeout_seconds=s.http.body_timeout_seconds,
        tenant_rate_per_second=s.tenants.rate_per_second,
        tenant_burst=s.tenants.burst,
        tenant_read_rate_per_second=s.tenants.read_rate_per_second,
        tenant_read_burst=s.tenants.read_burst,
        tasks=stack.tasks,
    )
    limits = ConnectionLimits(
        header_timeout_seconds=s.http.header_timeout_seconds,
        keepalive_timeout_seconds=s.http.keepalive_timeout_seconds,
        max_connections=s.http.max_connections,
    )
    config = server_config(create_app(deps), limits, shutdown_grace_seconds=1.0, parser=parser)
    config.lifespan = "off"
    return _QuietServer(config), api_keys


async def post_all(base_url: str, key: str, n: int, clients: int) -> None:
    """POST n jobs from ``clients`` connections, each a client of its own.

    One httpx client per connection: a single pool of many connections spends
    O(connections) socket checks per request, which would dominate this measurement.
    """
    headers = {"Authorization": f"Bearer {key}"}
    limits = httpx.Limits(max_connections=1, max_keepalive_connections=1)

    async def one_connection(first: int) -> None:
        async with httpx.AsyncClient(
            base_url=base_url, headers=headers, limits=limits, timeout=60.0
        ) as client:
            for i in range(first, n, clients):
                body = {"task": "generate", "input": {"prompt": f"benchmark job number {i}"}}
                response = await client.post("/v1/generations", json=body)
                if response.status_code != 202:
                    detail = response.text[:200]
                    raise RuntimeError(f"POST answered {response.status_code}: {detail}")

    await asyncio.gather(*(one_connection(c) for c in range(min(clients, n))))


async def _post_from_subprocess(base_url: str, key: str, n: int, clients: int) -> None:
    """Run the client in a process of its own, so it does not share the server's loop."""
    command = [sys.executable, __file__, "--post-to", base_url, "--jobs", str(n)]
    command += ["--clients", str(clients)]
    env = {**os.environ, KEY_VARIABLE: key}
    process = await asyncio.create_subprocess_exec(*command, env=env)
    if await process.wait() != 0:
        raise RuntimeError(f"the HTTP client process exited with {process.returncode}")


async def http_rate(stack: Stack, path: Path, args: argparse.Namespace) -> dict[str, Any]:
    server, api_keys = _server(stack, args.parser)
    key = await api_keys.create(TENANT)
    sock = _listening_socket()
    base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    worker = stack.worker(providers=[SimulatedProvider()], concurrency=args.concurrency)
    stop = asyncio.Event()
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    running = asyncio.create_task(worker.run(stop))
    post = post_all if args.inline_client else _post_from_subprocess
    try:
        while not server.started:
            if serving.done():
                serving.result()  # raises what stopped it
            await asyncio.sleep(0.01)
        meter = Meter.start(stack)
        client_cpu = _children_cpu_seconds()
        with _profiled(args.profile == "http"):
            await post(base_url, key, args.jobs, args.clients)
            await wait_all_succeeded(path, args.jobs, timeout_seconds=DONE_TIMEOUT_SECONDS)
    finally:
        stop.set()
        server.should_exit = True
        await asyncio.gather(running, serving)
        sock.close()
    summary = _summary("http", path, args.jobs, meter.stop(stack))
    summary["http_client_cpu_ms_per_job"] = (
        (_children_cpu_seconds() - client_cpu) * 1000 / args.jobs
    )
    return summary


def _loop_factory(args: argparse.Namespace) -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop ``ferryman serve`` runs on, unless ``--loop asyncio``."""
    from ferryman.cli.serving import event_loop_factory

    return asyncio.new_event_loop if args.loop == "asyncio" else event_loop_factory()


def _children_cpu_seconds() -> float:
    """CPU used by finished child processes (the HTTP client), user + system."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


# --- pickup: `ferryman api` + `ferryman worker`, two processes over one file ----------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman", *args]


async def pickup_latency(directory: Path, n: int, gap_seconds: float) -> dict[str, Any]:
    """Accept -> claim across processes: jobs submitted one at a time, ``gap_seconds``
    apart, to an idle worker in another process (the worker's default receive wait)."""
    db = directory / "pickup.db"
    port = _free_port()
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": f"sqlite:///{db}",
        "FERRYMAN_RESULTS_URL": f"file://{directory / 'pickup-results'}",
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }
    made = await asyncio.create_subprocess_exec(
        *_ferryman("keys", "create", "--tenant", TENANT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    out, _ = await made.communicate()
    key = out.decode().split()[-1]
    api = await asyncio.create_subprocess_exec(
        *_ferryman("api", "--port", str(port)), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    worker = await asyncio.create_subprocess_exec(
        *_ferryman("worker"), env=env, stderr=asyncio.subprocess.DEVNULL
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(
            base_url=base_url, headers={"Authorization": f"Bearer {key}"}, timeout=30.0
        ) as client:
            await _wait_ready(client)
            await asyncio.sleep(1.0)  # the worker is up and waiting too
            for i in range(n):
                body = {"task": "generate", "input": {"prompt": f"pickup {i}"}}
                response = await client.post("/v1/generations", json=body)
                if response.status_code != 202:
                    raise RuntimeError(f"POST answered {response.status_code}")
                await asyncio.sleep(gap_seconds)
        await wait_all_succeeded(db, n, timeout_seconds=DONE_TIMEOUT_SECONDS)
    finally:
        for process in (api, worker):
            process.terminate()
            await process.wait()
    times = read_job_times(db)
    waits = [(c - a) * 1000 for a, c in zip(times.accepted, times.claimed, strict=True)]
    return {
        "pickup_jobs": n,
        "pickup_accept_to_claim_p50_ms": percentile(waits, 50),
        "pickup_accept_to_claim_p99_ms": percentile(waits, 99),
    }


async def _wait_ready(client: httpx.AsyncClient) -> None:
    for _ in range(300):
        with contextlib.suppress(httpx.TransportError):
            if (await client.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError("ferryman api did not become ready")


# --- the run ---------------------------------------------------------------------------


async def measure_round(args: argparse.Namespace, directory: Path, n: int) -> dict[str, Any]:
    """raw, service and (unless skipped) http, each on a fresh database file."""
    figures: dict[str, Any] = {}
    figures.update(raw_rate(directory / f"raw-{n}.db", args.jobs, args.synchronous))
    runs = [("service", service_rate)]
    if not args.skip_http:
        runs.append(("http", http_rate))
    for name, run in runs:
        path = directory / f"{name}-{n}.db"
        async with open_stack(
            path, synchronous=args.synchronous, results=args.results, max_batch=args.max_batch
        ) as stack:
            figures.update(await run(stack, path, args))
    return figures


async def measure(args: argparse.Namespace, directory: Path) -> list[dict[str, Any]]:
    return [await measure_round(args, directory, n) for n in range(1, args.rounds + 1)]


def report(
    args: argparse.Namespace, rounds: list[dict[str, Any]], start_load: float
) -> dict[str, Any]:
    """Each figure is the median over the rounds; the per-round rates go along."""
    figures = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    raw = figures["raw_jobs_per_s"]
    http = figures.get("http_jobs_per_s")
    out: dict[str, Any] = {
        "service_jobs_per_s": figures["service_jobs_per_s"],
        "http_jobs_per_s": http,
        "raw_jobs_per_s": raw,
        "accept_to_claim_p50_ms": figures["service_accept_to_claim_p50_ms"],
        "accept_to_claim_p99_ms": figures["service_accept_to_claim_p99_ms"],
        "service_to_raw": figures["service_jobs_per_s"] / raw,
        "http_to_raw": None if http is None else http / raw,
        "target_service_to_raw": TARGET_SERVICE_RATIO,
    }
    out.update({k: v for k, v in figures.items() if k not in out})
    rates = [k for k in rounds[0] if k.endswith("_jobs_per_s")]
    out["rounds"] = [{k: r[k] for k in rates} for r in rounds]
    out["settings"] = {
        "jobs": args.jobs,
        "rounds": args.rounds,
        "synchronous": args.synchronous,
        "results": args.results,
        "concurrency": args.concurrency,
        "submit_batch": args.batch,
        "submit_rate_per_s": args.rate or None,
        "http_clients": None if args.skip_http else args.clients,
        "http_client": None if args.skip_http else _client_kind(args),
        "writer_max_batch": args.max_batch,
        "loop": args.loop,
        "parser": args.parser,
        "cpus": os.cpu_count(),
        # Other work on the machine skews every figure: say how busy it was.
        "load_average_1m": {"start": start_load, "end": os.getloadavg()[0]},
        "python": sys.version.split()[0],
        "sqlite": sqlite3.sqlite_version,
    }
    return out


def _client_kind(args: argparse.Namespace) -> str:
    return "same process" if args.inline_client else "separate process"


def print_human(out: dict[str, Any]) -> None:
    rows = [
        ("raw sqlite (2 commits/job)", _rate(out, "raw")),
        ("service (Intake + Worker)", _rate(out, "service")),
        ("  service / raw", f"{out['service_to_raw']:.2f}  (target >= {TARGET_SERVICE_RATIO})"),
        ("  accept -> claim p50 / p99", _pair(out, "service_accept_to_claim")),
        ("  accept -> done p50 / p99", _pair(out, "service_accept_to_done")),
        *_costs(out, "service"),
    ]
    if out["http_jobs_per_s"] is not None:
        rows += [
            ("http (uvicorn + app + worker)", _rate(out, "http")),
            ("  http / raw", f"{out['http_to_raw']:.2f}"),
            ("  accept -> claim p50 / p99", _pair(out, "http_accept_to_claim")),
            *_costs(out, "http"),
            ("  CPU per job (client process)", _client_cpu(out)),
        ]
    if "pickup_jobs" in out:
        rows.append(
            ("api + worker: accept -> claim p50 / p99", _pair(out, "pickup_accept_to_claim"))
        )
    s = out["settings"]
    title = (
        f"ferryman throughput: {s['jobs']} jobs x {s['rounds']} rounds (medians), "
        f"synchronous={s['synchronous']}, results={s['results']}, concurrency={s['concurrency']}"
    )
    print_table(title, rows)


def _rate(out: dict[str, Any], name: str) -> str:
    rounds = ", ".join(fmt(r[f"{name}_jobs_per_s"], 0) for r in out["rounds"])
    return f"{fmt(out[f'{name}_jobs_per_s'])} jobs/s   (rounds: {rounds})"


def _pair(out: dict[str, Any], prefix: str) -> str:
    return f"{fmt(out[prefix + '_p50_ms'])} / {fmt(out[prefix + '_p99_ms'])} ms"


def _costs(out: dict[str, Any], name: str) -> list[tuple[str, str]]:
    return [
        ("  commits per job", fmt(out[f"{name}_commits_per_job"], 2)),
        ("  writes per job / per commit", _ratio_pair(out, name)),
        ("  CPU per job (this process)", f"{fmt(out[f'{name}_cpu_ms_per_job'], 2)} ms"),
    ]


def _client_cpu(out: dict[str, Any]) -> str:
    if out["settings"]["http_client"] != "separate process":
        return "included above"
    return f"{fmt(out['http_client_cpu_ms_per_job'], 2)} ms"


def _ratio_pair(out: dict[str, Any], name: str) -> str:
    return f"{fmt(out[name + '_writes_per_job'], 2)} / {fmt(out[name + '_writes_per_commit'], 2)}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=2000, help="jobs per measurement")
    parser.add_argument("--rounds", type=int, default=3, help="figures are medians of rounds")
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--results", choices=["file", "db"], default="file")
    parser.add_argument("--concurrency", type=int, default=64, help="worker slots")
    parser.add_argument("--batch", type=int, default=50, help="service: submits in flight")
    parser.add_argument(
        "--rate", type=float, default=0.0, help="service: submits per second (0: flat out)"
    )
    parser.add_argument("--clients", type=int, default=32, help="http: requests in flight")
    parser.add_argument("--max-batch", type=int, default=256, help="writer's group-commit cap")
    parser.add_argument("--skip-http", action="store_true")
    parser.add_argument(
        "--pickup", type=int, default=0, help="api + worker: N jobs one at a time (0: skip)"
    )
    parser.add_argument("--pickup-gap", type=float, default=0.02, help="seconds between them")
    parser.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    parser.add_argument("--parser", choices=["httptools", "h11"], default="httptools")
    parser.add_argument(
        "--profile", choices=["service", "http"], help="cProfile one run (main thread) to stderr"
    )
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary dir")
    parser.add_argument(
        "--inline-client",
        action="store_true",
        help="http: post from this process (default: a separate client process)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument(
        "--database", help="postgresql://...: the PostgreSQL benchmark (bench/pg_throughput.py)"
    )
    parser.add_argument("--post-to", help=argparse.SUPPRESS)  # the client process's mode
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if pg_throughput.wants_postgres(argv):
        return pg_throughput.main(argv)
    args = parse_args(argv)
    if args.post_to:
        asyncio.run(post_all(args.post_to, os.environ[KEY_VARIABLE], args.jobs, args.clients))
        return 0
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="ferryman-bench-", dir=args.dir) as tmp:
        start_load = os.getloadavg()[0]
        with asyncio.Runner(loop_factory=_loop_factory(args)) as runner:
            rounds = runner.run(measure(args, Path(tmp)))
            pickup = (
                runner.run(pickup_latency(Path(tmp), args.pickup, args.pickup_gap))
                if args.pickup
                else {}
            )
    out = report(args, rounds, start_load)
    out.update(pickup)
    if args.json:
        print(json.dumps(out))
    else:
        print_human(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
