"""Throughput on PostgreSQL: ferryman end to end beside the server's own raw rates.

``bench/throughput.py --database postgresql://user@host:5432/anydb [--json]`` runs this
(the database named in the URL is only used to reach the server: every measurement
gets a scratch database of its own, created before and dropped after).

raw         the server alone, from one connection, one job at a time: one INSERT per
            commit, then one ``FOR UPDATE SKIP LOCKED`` claim + complete per commit.
            One commit per step tops out at the harmonic combination of the two (the
            derived limit: ``1 / (1/insert + 1/claim_complete)``).
Every phase in this process runs on the event loop ``ferryman serve`` and ``ferryman
worker`` run on (uvloop; ``--loop asyncio`` for asyncio's own).

e2e         Intake + Worker (``sim`` model, 0 ms) in this process over the real engine,
            workers warmed first; jobs submitted ``--batch`` at a time; the rate is
            N / (first accept -> last SUCCEEDED), from the jobs' own timestamps.
drain       the queue pre-filled with N jobs, then the worker started: N / (worker
            start -> last SUCCEEDED).
pickup      idle warmed workers, jobs submitted one at a time ``--pickup-gap-ms`` apart:
            accept -> claim (the first attempt's start) p50 / p99.
cpu         CPU seconds per 1,000 jobs of the whole machine (``/proc/stat`` deltas over
            the e2e run: ferryman, the PostgreSQL server and anything else running).
            Per phase (e2e, drain) also in CPU-ms per job (the same number): this
            process, each worker process, and the PostgreSQL server's own, when it
            runs on this machine (else null). The server's: utime + stime from
            /proc/<pid>/stat of every process named ``postgres`` (the postmaster,
            its background processes: WAL writer, checkpointer, ...) except the
            client backends of other databases (pg_stat_activity), before and after
            the phase; ``*_postgres_clients_*`` is the part of it in this database's
            client backends (statements and commits; the rest is the WAL writer,
            checkpointer, autovacuum...); ``*_postgres_all_*`` is the whole server,
            other databases and ended backends included: it agrees with the first
            when nothing else uses the server. ``raw_postgres_cpu_ms_per_job``: the
            same over the two raw loops, one row per statement and per commit.
floor       ``drain_postgres_cpu_ms_per_job`` is what PostgreSQL itself spends per
            drained job on ferryman's own statements (receive, set-based claim,
            publish with result and ack, in the group commits the drain makes), with
            nothing of the Python side in it; ``drain_postgres_cap_jobs_per_s`` =
            cores x 1000 / it: the drain rate the machine could not pass even if
            ferryman's own CPU per job were zero. (It is measured in the real drain,
            not in a replay of the statements: a replay would need its own copy of
            the receive/claim/publish statements and their batching, and could drift
            from them; the cost is that batch sizes are the ones this drain reached.)
            It falls as batches grow (fewer statements per job), so read it beside
            ``--count``'s ``drain_statements_per_job``, and for the floor proper run
            the drain at more slots and a larger group commit as well
            (``--concurrency 256 --group-max-batch 256``): what stays per job as the
            statements per job go to zero is PostgreSQL's per-row work.
--worker-processes N  e2e and drain with N ``ferryman worker --no-sweeper`` processes
            (the settings of the in-process worker, through FERRYMAN_* variables)
            doing the work and intake left in this process: API and workers on
            separate machines. e2e warms until every process has claimed jobs; the
            drain starts them paused, fills the queue, resumes them, and its rate is
            from the first claim (their start-up is in neither figure).
procrastinate  Procrastinate no-op jobs on the same server (bench/peer_systems.py, its
            own virtualenv), its own processes' CPU only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit, urlunsplit

import psycopg

from ferryman.adapters.postgres.grouping import GROUP_LANES, GROUP_MAX_BATCH, GroupCommit
from ferryman.config import load_settings
from ferryman.ports.control import Switch
from ferryman.wiring import open_runtime
from harness import TENANT, fmt, generate_request, percentile, print_table, quiet_logs
from peer_systems import run_procrastinate, scratch_database

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Iterator

    from ferryman.wiring import Runtime

DONE_TIMEOUT_SECONDS = 600.0
# A worker process is given this long to stop after SIGTERM before it is killed.
WORKER_STOP_SECONDS = 30.0
# The targets, printed beside the figures.
TARGET_DRAIN = 10_000.0
TARGET_PICKUP_P50_MS = 10.0
TARGET_CPU_PER_1000 = 2.5
TARGET_PEER_RATIO = 2.0
# Worker processes are up (a paused worker looks at its switch every second) by then.
PROCESS_START_SECONDS = 3.0


def wants_postgres(argv: list[str]) -> bool:
    """True when the command line asks for a PostgreSQL run (``--database postgres...``)."""
    for i, arg in enumerate(argv):
        value = arg.partition("=")[2] if arg.startswith("--database=") else None
        if arg == "--database" and i + 1 < len(argv):
            value = argv[i + 1]
        if value is not None and value.startswith(("postgresql://", "postgres://")):
            return True
    return False


def server_url(database_url: str) -> str:
    """The URL without its database name (scratch databases are made beside it)."""
    parts = urlsplit(database_url)
    return urlunsplit((parts.scheme, parts.netloc, "", parts.query, ""))


def database_url(server: str, name: str) -> str:
    parts = urlsplit(server)
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))


@contextlib.contextmanager
def scratch(server: str, phase: str) -> Iterator[str]:
    name = f"ferryman_bench_pg_{phase}_{os.getpid()}"
    with scratch_database(server, name):
        yield database_url(server, name)


# --- the machine's CPU -----------------------------------------------------------------


def machine_busy_seconds() -> float:
    """CPU seconds every core spent not idle since boot (user..steal, /proc/stat)."""
    with open("/proc/stat", encoding="ascii") as stat:
        fields = [int(v) for v in stat.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal (guest time is inside user).
    busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7]
    return busy / os.sysconf("SC_CLK_TCK")


# --- the PostgreSQL server's CPU --------------------------------------------------------

LOCAL_HOSTS = frozenset({"", "localhost", "127.0.0.1", "::1"})


@dataclass(frozen=True, slots=True)
class ProcStat:
    """One process's line of /proc/<pid>/stat: its parent and CPU ticks (user + system)."""

    ppid: int
    ticks: int
    # Of its children that ended and were waited for (the postmaster's: ended backends).
    children_ticks: int


def parse_stat(text: str) -> tuple[str, ProcStat]:
    """(comm, figures) of a /proc/<pid>/stat line; comm may hold spaces and parentheses,
    so the fields are read after its last ')' (proc(5): ppid is field 4, utime 14,
    stime 15, cutime 16, cstime 17)."""
    comm = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    ticks = int(fields[11]) + int(fields[12])
    return comm, ProcStat(int(fields[1]), ticks, int(fields[13]) + int(fields[14]))


def postgres_processes(proc: str = "/proc") -> dict[int, ProcStat]:
    """Every process of this machine named ``postgres`` (the postmaster, its background
    processes and backends: /proc/<pid>/stat is readable whoever owns them)."""
    found: dict[int, ProcStat] = {}
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"{proc}/{entry.name}/stat", encoding="utf-8", errors="replace") as f:
                comm, stat = parse_stat(f.read())
        except (OSError, ValueError, IndexError):  # it ended while we looked
            continue
        if comm == "postgres":
            found[int(entry.name)] = stat
    return found


@dataclass(frozen=True, slots=True)
class ServerCpu:
    """The local server's processes at one moment, and which of them are not ours."""

    processes: dict[int, ProcStat]
    # Client backends of other databases (other work on a shared server) and the
    # backend that asked which those are.
    not_ours: frozenset[int]
    # This database's client backends (the rest of ours: postmaster, background).
    clients: frozenset[int] = frozenset()

    def ours_ticks(self, since: ServerCpu) -> int:
        """Ticks since ``since`` of the processes that serve this database: its backends,
        the postmaster and the background processes (WAL writer, checkpointer, ...).
        A backend that ended in between is missed (the pool keeps its connections)."""
        skip = self.not_ours | since.not_ours
        return sum(
            s.ticks - (since.processes[pid].ticks if pid in since.processes else 0)
            for pid, s in self.processes.items()
            if pid not in skip
        )

    def client_ticks(self, since: ServerCpu) -> int:
        """The part of ours_ticks spent in this database's client backends: running the
        statements, committing (the rest: WAL writer, checkpointer, autovacuum, ...)."""
        return sum(
            s.ticks - (since.processes[pid].ticks if pid in since.processes else 0)
            for pid, s in self.processes.items()
            if pid in self.clients and pid not in since.not_ours
        )

    def all_ticks(self, since: ServerCpu) -> int:
        """Ticks since ``since`` of the whole server, other databases and ended backends
        included (an ended backend's ticks move into the postmaster's children's)."""
        return self.total() - since.total()

    def total(self) -> int:
        own = sum(s.ticks for s in self.processes.values())
        roots = (s for s in self.processes.values() if s.ppid not in self.processes)
        return own + sum(s.children_ticks for s in roots)


def is_local(url: str) -> bool:
    return (urlsplit(url).hostname or "") in LOCAL_HOSTS


# Per backend: other work's (any backend of another database: clients, autovacuum
# workers, ...; and the asking one), this database's client, the asking one.
ACTIVITY = (
    "SELECT pid, "
    "(datname IS NOT NULL AND datname <> current_database()) OR pid = pg_backend_pid(), "
    "backend_type = 'client backend' AND datname = current_database() "
    "AND pid <> pg_backend_pid(), "
    "pid = pg_backend_pid() FROM pg_stat_activity"
)


def classified(rows: list[tuple[Any, ...]], proc: str = "/proc") -> ServerCpu | None:
    """The server's processes now, given pg_stat_activity's answer to ACTIVITY: the
    postmaster whose child answered, and its children (another cluster on the machine
    is not counted). None when the answering backend is not a process of this machine
    (a server in a container has pids of its own namespace)."""
    processes = postgres_processes(proc)
    asker = next((int(pid) for pid, _, _, asking in rows if asking), None)
    if asker is None or asker not in processes:
        return None
    postmaster = processes[asker].ppid
    mine = {
        pid: stat for pid, stat in processes.items() if pid == postmaster or stat.ppid == postmaster
    }
    not_ours = frozenset(int(pid) for pid, other, _, _ in rows if other)
    clients = frozenset(int(pid) for pid, _, client, _ in rows if client)
    return ServerCpu(mine, not_ours, clients)


async def server_cpu(url: str) -> ServerCpu | None:
    """The server's processes now, or None when the server is not on this machine."""
    if not is_local(url):
        return None
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (await conn.execute(ACTIVITY)).fetchall()
        return classified(rows)


def server_cpu_sync(url: str) -> ServerCpu | None:
    """server_cpu for the raw loops, which are synchronous."""
    if not is_local(url):
        return None
    with psycopg.connect(url, autocommit=True) as conn:
        return classified(conn.execute(ACTIVITY).fetchall())


def server_ms_per_job(
    before: ServerCpu | None, after: ServerCpu | None, n: int
) -> dict[str, float | None]:
    """PostgreSQL's CPU-ms per job: ours (this database's backends and the shared
    background processes) and all (the whole server); None when not local."""
    if before is None or after is None:
        return {"postgres": None, "postgres_clients": None, "postgres_all": None}
    tick_ms = 1000 / os.sysconf("SC_CLK_TCK")
    return {
        "postgres": after.ours_ticks(before) * tick_ms / n,
        "postgres_clients": after.client_ticks(before) * tick_ms / n,
        "postgres_all": after.all_ticks(before) * tick_ms / n,
    }


# --- raw: the server alone ------------------------------------------------------------


def raw_rates(url: str, n: int) -> dict[str, float | None]:
    before = server_cpu_sync(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            "CREATE TABLE raw_jobs (id bigserial PRIMARY KEY, status text NOT NULL, "
            "body text NOT NULL, created_at double precision NOT NULL)"
        )
        conn.execute("CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE status = 'queued'")
        started = time.perf_counter()
        for i in range(n):
            conn.execute(
                "INSERT INTO raw_jobs (status, body, created_at) VALUES ('queued', %s, %s)",
                (f"benchmark job number {i}", time.time()),
            )
        insert_s = time.perf_counter() - started
        started = time.perf_counter()
        for _ in range(n):
            with conn.transaction():
                row = conn.execute(
                    "UPDATE raw_jobs SET status = 'running' WHERE id = (SELECT id FROM raw_jobs "
                    "WHERE status = 'queued' ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) "
                    "RETURNING id"
                ).fetchone()
                if row is None:
                    raise RuntimeError("raw loop: no queued row to claim")
                conn.execute("UPDATE raw_jobs SET status = 'done' WHERE id = %s", (row[0],))
        claim_s = time.perf_counter() - started
        # Before the connection closes: its backend's ticks are counted while it lives.
        after = server_cpu_sync(url)
    insert = n / insert_s
    claim = n / claim_s
    return {
        "raw_insert_per_s": insert,
        "raw_claim_complete_per_s": claim,
        "derived_limit_jobs_per_s": 1 / (1 / insert + 1 / claim),
        # One commit per step, one row per statement: the comparison for the drain's.
        "raw_postgres_cpu_ms_per_job": server_ms_per_job(before, after, n)["postgres"],
    }


# --- counting what a job costs ----------------------------------------------------------


@dataclass(slots=True)
class Tally:
    """Statements sent through psycopg cursors (not the BEGIN/COMMIT/SAVEPOINT that
    psycopg's transaction() sends itself) and connections lent by the pool."""

    statements: int = 0
    lends: int = 0
    # Group-commit batches (one commit each): what a job's writes wait for.
    commits: int = 0


TALLY: Tally | None = None


def count_statements() -> None:
    """Wrap the driver so TALLY counts (``--count``; costs a little CPU itself)."""
    global TALLY
    from psycopg_pool import AsyncConnectionPool

    TALLY = Tally()
    execute, executemany = psycopg.AsyncCursor.execute, psycopg.AsyncCursor.executemany
    getconn = AsyncConnectionPool.getconn

    async def counted_execute(self: Any, query: Any, params: Any = None, **kw: Any) -> Any:
        if TALLY is not None:
            TALLY.statements += 1
        return await execute(self, query, params, **kw)

    async def counted_executemany(self: Any, query: Any, params_seq: Any, **kw: Any) -> Any:
        params_seq = list(params_seq)
        if TALLY is not None:
            TALLY.statements += len(params_seq)
        return await executemany(self, query, params_seq, **kw)

    async def counted_getconn(self: Any, *args: Any, **kw: Any) -> Any:
        if TALLY is not None:
            TALLY.lends += 1
        return await getconn(self, *args, **kw)

    psycopg.AsyncCursor.execute = counted_execute  # type: ignore[method-assign]
    psycopg.AsyncCursor.executemany = counted_executemany  # type: ignore[method-assign]
    AsyncConnectionPool.getconn = counted_getconn  # type: ignore[method-assign]


# --- ferryman over the engine ---------------------------------------------------------


@contextlib.asynccontextmanager
async def open_ferryman(url: str, args: argparse.Namespace) -> AsyncIterator[Runtime]:
    settings = load_settings(
        database_url=url,
        results_url="db",
        worker_concurrency=args.concurrency,
        postgres_pool_max_size=args.pool,
    )
    async with open_runtime(settings) as runtime:
        if (args.group_max_batch, args.group_lanes) != (GROUP_MAX_BATCH, GROUP_LANES):
            # What group commit buys: max batch 1 with as many lanes as connections is
            # one transaction per write, as before it.
            db = runtime.queue._db  # type: ignore[attr-defined]
            db.group = GroupCommit(
                db.transaction,
                max_batch=args.group_max_batch,
                lanes=args.group_lanes,
                connection=db.connection,
            )
        yield runtime


class Workers(Protocol):
    """Where the jobs are worked: in this process or in ``ferryman worker`` processes."""

    def cpu_seconds(self) -> list[float]:
        """Each worker process's CPU so far (empty when they are this process)."""
        ...

    async def close(self) -> None: ...


@dataclass(slots=True)
class Running:
    """A worker running in the background of this process until ``stop``."""

    stop: asyncio.Event
    task: asyncio.Task[None]

    @classmethod
    def start(cls, runtime: Runtime, concurrency: int) -> Running:
        stop = asyncio.Event()
        return cls(stop, asyncio.create_task(runtime.new_worker(concurrency).run(stop)))

    def cpu_seconds(self) -> list[float]:
        if self.task.done():  # the worker ended early: fail now, not after the timeout
            self.task.result()
            raise RuntimeError("the in-process worker stopped before the jobs were done")
        return []  # inside this process's own time.process_time()

    async def close(self) -> None:
        self.stop.set()
        await self.task


def process_cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
        return parse_stat(f.read())[1].ticks / os.sysconf("SC_CLK_TCK")


def worker_env(url: str, args: argparse.Namespace) -> dict[str, str]:
    """The settings open_ferryman gives the in-process worker, as ``ferryman worker``
    reads them."""
    return {
        **os.environ,
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_RESULTS_URL": "db",
        "FERRYMAN_WORKER_CONCURRENCY": str(args.concurrency),
        "FERRYMAN_POSTGRES_POOL_MAX_SIZE": str(args.pool),
        "FERRYMAN_LOG_LEVEL": "WARNING",
    }


@dataclass(slots=True)
class WorkerProcesses:
    """``ferryman worker --no-sweeper`` processes (the in-process worker runs no sweeper
    either), stopped with SIGTERM as a deployment stops them."""

    processes: list[asyncio.subprocess.Process]

    @classmethod
    async def start(cls, url: str, args: argparse.Namespace) -> WorkerProcesses:
        command = [sys.executable, "-m", "ferryman", "worker", "--no-sweeper"]
        env = worker_env(url, args)
        started = cls([])
        try:
            for _ in range(args.worker_processes):
                # Nothing of theirs may land inside --json's output; their banner and
                # errors go to stderr.
                started.processes.append(
                    await asyncio.create_subprocess_exec(
                        *command,
                        env=env,
                        stdin=asyncio.subprocess.DEVNULL,
                        stdout=asyncio.subprocess.DEVNULL,
                    )
                )
        except BaseException:
            await started.close()
            raise
        return started

    def cpu_seconds(self) -> list[float]:
        for process in self.processes:
            if process.returncode is not None:
                raise RuntimeError(f"a ferryman worker exited with {process.returncode}")
        return [process_cpu_seconds(process.pid) for process in self.processes]

    async def close(self) -> None:
        for process in self.processes:
            if process.returncode is None:
                process.terminate()
        for process in self.processes:
            try:
                await asyncio.wait_for(process.wait(), WORKER_STOP_SECONDS)
            except TimeoutError:  # a worker stuck in its shutdown: the bench still ends
                process.kill()
                await process.wait()


@dataclass(frozen=True, slots=True)
class Usage:
    """CPU seconds so far: the machine, this process, each worker process, the server."""

    machine: float
    process: float
    workers: list[float]
    server: ServerCpu | None

    @classmethod
    async def now(cls, url: str, workers: Workers) -> Usage:
        server = await server_cpu(url)
        return cls(machine_busy_seconds(), time.process_time(), workers.cpu_seconds(), server)

    def per_job(self, since: Usage, n: int, phase: str) -> dict[str, Any]:
        """CPU-ms per job over the phase (the same number as CPU-s per 1,000 jobs)."""
        workers = [(a - b) * 1000 / n for a, b in zip(self.workers, since.workers, strict=True)]
        server = server_ms_per_job(since.server, self.server, n)
        return {
            f"{phase}_cpu_ms_per_job": (self.machine - since.machine) * 1000 / n,
            f"{phase}_process_cpu_ms_per_job": (self.process - since.process) * 1000 / n,
            f"{phase}_worker_processes_cpu_ms_per_job": sum(workers) if workers else None,
            f"{phase}_worker_process_cpu_ms_per_job": workers or None,
            f"{phase}_postgres_cpu_ms_per_job": server["postgres"],
            f"{phase}_postgres_clients_cpu_ms_per_job": server["postgres_clients"],
            f"{phase}_postgres_all_cpu_ms_per_job": server["postgres_all"],
        }


async def submit(runtime: Runtime, first: int, n: int, *, batch: int) -> None:
    for start in range(first, first + n, batch):
        await asyncio.gather(
            *(
                runtime.intake.submit(tenant_id=TENANT, request=generate_request(i))
                for i in range(start, min(first + n, start + batch))
            )
        )


async def wait_succeeded(url: str, n: int, workers: Workers | None = None) -> None:
    """Return once n jobs are SUCCEEDED (polled from a connection of its own, kept open:
    a new backend per poll would cost the server more than the poll). A worker process
    that exited fails the wait at once (its claimed jobs would never finish)."""
    deadline = time.monotonic() + DONE_TIMEOUT_SECONDS
    conn: psycopg.AsyncConnection[Any] | None = None
    try:
        while True:
            try:
                if conn is None or conn.closed:
                    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
                cursor = await conn.execute("SELECT status, count(*) FROM jobs GROUP BY status")
                counts = {str(s): int(c) for s, c in await cursor.fetchall()}
            except psycopg.OperationalError:  # other work on a shared server ended it
                counts = {}
            if counts.get("SUCCEEDED", 0) >= n:
                return
            if workers is not None:
                workers.cpu_seconds()  # raises once a worker process has exited
            bad = {k: v for k, v in counts.items() if k in ("FAILED", "CANCELLED")}
            if bad or time.monotonic() > deadline:
                raise RuntimeError(f"jobs did not all succeed in time: {counts}")
            await asyncio.sleep(0.05)
    finally:
        if conn is not None:
            await conn.close()


@dataclass(frozen=True, slots=True)
class Times:
    accepted: list[float]
    claimed: list[float]
    completed: list[float]


async def job_times(url: str, since: float) -> Times:
    """Accept, first claim and completion of the jobs accepted at or after ``since``."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        rows = await (
            await conn.execute(
                "SELECT j.created_at, a.started_at, j.completed_at FROM jobs j "
                "JOIN attempts a ON a.job_id = j.job_id AND a.attempt_no = 1 "
                "WHERE j.status = 'SUCCEEDED' AND j.created_at >= %s",
                (since,),
            )
        ).fetchall()
    return Times([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


async def worker_ids(url: str) -> int:
    """How many workers (each a process's worker) have claimed a job in this database."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        row = await (
            await conn.execute("SELECT count(DISTINCT worker_id) FROM attempts")
        ).fetchone()
    return 0 if row is None else int(row[0])


async def claims_per_worker(url: str) -> list[int]:
    """Jobs each worker claimed (first attempts), most first."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT count(*) FROM attempts WHERE attempt_no = 1 "
            "GROUP BY worker_id ORDER BY count(*) DESC"
        )
        return [int(row[0]) for row in await cursor.fetchall()]


async def start_workers(url: str, runtime: Runtime, args: argparse.Namespace) -> Workers:
    if args.worker_processes:
        return await WorkerProcesses.start(url, args)
    return Running.start(runtime, args.concurrency)


async def warm(url: str, runtime: Runtime, args: argparse.Namespace, workers: Workers) -> int:
    """Warm-up jobs until every worker has claimed some (a worker process takes a
    second or two to start); returns how many were submitted."""
    submitted = 0
    wanted = max(1, args.worker_processes)
    deadline = time.monotonic() + DONE_TIMEOUT_SECONDS
    while submitted == 0 or await worker_ids(url) < wanted:
        if time.monotonic() > deadline:
            raise RuntimeError("the worker processes did not all start")
        n = args.warmup if submitted == 0 else args.batch
        await submit(runtime, submitted, n, batch=args.batch)
        submitted += n
        await wait_succeeded(url, submitted, workers)
    return submitted


async def e2e_and_pickup(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, the end-to-end run, then pickup latency with the same (now idle) workers."""
    async with open_ferryman(url, args) as runtime:
        workers: Workers = NO_WORKERS
        try:
            workers = await start_workers(url, runtime, args)
            warmed = await warm(url, runtime, args, workers)
            since = time.time()
            group = runtime.queue._db.group  # type: ignore[attr-defined]
            commits = group.batches
            if TALLY is not None:
                TALLY.statements = TALLY.lends = 0
            before = await Usage.now(url, workers)
            await submit(runtime, warmed, args.jobs, batch=args.batch)
            await wait_succeeded(url, warmed + args.jobs, workers)
            used = (await Usage.now(url, workers)).per_job(before, args.jobs, "e2e")
            commits = group.batches - commits
            tally = None if TALLY is None else Tally(TALLY.statements, TALLY.lends, commits)
            times = await job_times(url, since)
            pickup = await pickup_run(url, runtime, warmed + args.jobs, args, workers)
        finally:
            await workers.close()
    if len(times.accepted) != args.jobs:
        raise RuntimeError(f"e2e: {len(times.accepted)} of {args.jobs} jobs succeeded")
    span = max(times.completed) - min(times.accepted)
    counts = {}
    if tally is not None:  # the e2e window; wait_succeeded's own polls are counted too
        # With worker processes, this process's statements only (intake's).
        counts = {
            "statements_per_job": tally.statements / args.jobs,
            "lends_per_job": tally.lends / args.jobs,
            "group_commits_per_job": tally.commits / args.jobs,
        }
    return {
        **counts,
        "e2e_jobs_per_s": args.jobs / span,
        "e2e_seconds": span,
        # The figures as earlier passes named them (CPU-s per 1,000 = CPU-ms per job).
        "cpu_s_per_1000": used["e2e_cpu_ms_per_job"],
        "process_cpu_s_per_1000": used["e2e_process_cpu_ms_per_job"],
        **used,
        **pickup,
    }


async def pickup_run(
    url: str, runtime: Runtime, first: int, args: argparse.Namespace, workers: Workers
) -> dict[str, float]:
    await asyncio.sleep(1.0)  # the workers go idle (waiting on LISTEN / the slow poll)
    since = time.time()
    for i in range(args.pickup_jobs):
        await runtime.intake.submit(tenant_id=TENANT, request=generate_request(first + i))
        await asyncio.sleep(args.pickup_gap_ms / 1000)
    await wait_succeeded(url, first + args.pickup_jobs, workers)
    times = await job_times(url, since)
    waits = [(c - a) * 1000 for a, c in zip(times.accepted, times.claimed, strict=True)]
    return {"pickup_p50_ms": percentile(waits, 50), "pickup_p99_ms": percentile(waits, 99)}


async def drain(url: str, args: argparse.Namespace) -> dict[str, Any]:
    """In this process: the worker starts after the queue is full, the rate is from its
    start. Worker processes: started (workers paused) before the queue is filled, so
    their start-up is not in the figures; resumed, the rate is from the first claim."""
    async with open_ferryman(url, args) as runtime:
        workers: Workers = NO_WORKERS
        try:
            if args.worker_processes:
                await pause_workers(runtime, paused=True)
                workers = await WorkerProcesses.start(url, args)
            await submit(runtime, 0, args.jobs, batch=args.batch)
            if args.worker_processes:
                await asyncio.sleep(PROCESS_START_SECONDS)
            group = runtime.queue._db.group  # type: ignore[attr-defined]
            commits = group.batches
            if TALLY is not None:
                TALLY.statements = TALLY.lends = 0
            before = await Usage.now(url, workers)
            if args.worker_processes:
                await pause_workers(runtime, paused=False)
            else:
                workers = Running.start(runtime, args.concurrency)
            started = time.time()
            await wait_succeeded(url, args.jobs, workers)
            used = (await Usage.now(url, workers)).per_job(before, args.jobs, "drain")
            if TALLY is not None and not args.worker_processes:
                # What PostgreSQL was asked per drained job (the polls for the end too).
                used["drain_statements_per_job"] = TALLY.statements / args.jobs
                used["drain_group_commits_per_job"] = (group.batches - commits) / args.jobs
        finally:
            await workers.close()
    times = await job_times(url, 0.0)
    if args.worker_processes:
        # Paused workers see the resume within about a second of each other, and one
        # may take a small queue alone: said by the claims each process made.
        started = min(times.claimed)
        used["drain_claims_per_worker_process"] = await claims_per_worker(url)
    rate = args.jobs / (max(times.completed) - started)
    floor = used["drain_postgres_cpu_ms_per_job"]
    cores = os.cpu_count() or 1
    return {
        "drain_jobs_per_s": rate,
        **used,
        # What the server alone allows: every core doing nothing but PostgreSQL's share.
        "drain_postgres_cap_jobs_per_s": None if not floor else cores * 1000 / floor,
    }


class _NoWorkers:
    def cpu_seconds(self) -> list[float]:
        return []

    async def close(self) -> None:
        return None


NO_WORKERS = _NoWorkers()


async def pause_workers(runtime: Runtime, *, paused: bool) -> None:
    await runtime.control.set_paused(Switch.WORKERS, paused, actor="bench", now=time.time())


async def ferryman_round(server: str, args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with scratch(server, "e2e") as url:
        figures.update(await e2e_and_pickup(url, args))
    if not args.skip_drain:
        with scratch(server, "drain") as url:
            figures.update(await drain(url, args))
    return figures


# --- the run ---------------------------------------------------------------------------


def loop_factory(args: argparse.Namespace) -> Callable[[], asyncio.AbstractEventLoop]:
    """The loop ``ferryman serve`` and ``ferryman worker`` run on (uvloop), unless
    ``--loop asyncio``: in-process and worker-process figures on the same loop."""
    from ferryman.cli.serving import event_loop_factory

    return asyncio.new_event_loop if args.loop == "asyncio" else event_loop_factory()


def measure(args: argparse.Namespace) -> dict[str, Any]:
    server = server_url(args.database)
    rounds: list[dict[str, Any]] = []
    for _ in range(args.rounds):
        figures: dict[str, Any] = {}
        with scratch(server, "raw") as url:
            figures.update(raw_rates(url, args.raw_jobs))
        with asyncio.Runner(loop_factory=loop_factory(args)) as runner:
            figures.update(runner.run(ferryman_round(server, args)))
        rounds.append(figures)
    out: dict[str, Any] = {k: median_of(r[k] for r in rounds) for k in rounds[0]}
    out.setdefault("drain_jobs_per_s", None)
    out["procrastinate_jobs_per_s"] = None
    if not args.skip_procrastinate:
        peer = run_procrastinate(server, jobs=args.procrastinate_jobs)
        out["procrastinate_jobs_per_s"] = peer.jobs_per_s
        out["procrastinate_cpu_s_per_1000"] = peer.cpu_s_per_1000
    out["e2e_to_derived_limit"] = out["e2e_jobs_per_s"] / out["derived_limit_jobs_per_s"]
    if out["procrastinate_jobs_per_s"]:
        out["e2e_to_procrastinate"] = out["e2e_jobs_per_s"] / out["procrastinate_jobs_per_s"]
    per_round = ("_per_s", "_cpu_ms_per_job")
    out["rounds"] = [{k: v for k, v in r.items() if k.endswith(per_round)} for r in rounds]
    return out


def median_of(values: Iterable[Any]) -> Any:
    """The median of the rounds' figures; None when a figure is not known (a server on
    another machine); a list (one figure per worker process) is the last round's."""
    seen = list(values)
    if any(v is None for v in seen):
        return None
    if isinstance(seen[0], list):
        return seen[-1]
    return statistics.median(seen)


def settings_of(args: argparse.Namespace, start_load: float) -> dict[str, Any]:
    with psycopg.connect(database_url(server_url(args.database), "postgres")) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return {
        "jobs": args.jobs,
        "warmup": args.warmup,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "pool_max_size": args.pool,
        "worker_processes": args.worker_processes,
        # The loop this process ran on (asyncio's where uvloop is not installed).
        "loop": "asyncio" if loop_factory(args) is asyncio.new_event_loop else "uvloop",
        "postgres_local": is_local(args.database),
        "group_max_batch": args.group_max_batch,
        "group_lanes": args.group_lanes,
        "submit_batch": args.batch,
        "raw_jobs": args.raw_jobs,
        "pickup_jobs": args.pickup_jobs,
        "procrastinate_jobs": args.procrastinate_jobs,
        "cpus": os.cpu_count(),
        "load_average_1m": {"start": start_load, "end": os.getloadavg()[0]},
        "python": sys.version.split()[0],
        "postgresql": None if row is None else row[0],
    }


def print_human(out: dict[str, Any]) -> None:
    s = out["settings"]
    drain_rate = out["drain_jobs_per_s"]
    peer = out["procrastinate_jobs_per_s"]
    rows = [
        ("raw: one INSERT per commit", f"{fmt(out['raw_insert_per_s'])} /s"),
        ("raw: one claim + complete per commit", f"{fmt(out['raw_claim_complete_per_s'])} /s"),
        ("derived one-commit-per-step limit", f"{fmt(out['derived_limit_jobs_per_s'])} jobs/s"),
        (
            "  PostgreSQL CPU-ms per job, raw loops",
            "-"
            if out["raw_postgres_cpu_ms_per_job"] is None
            else fmt(out["raw_postgres_cpu_ms_per_job"], 3),
        ),
        ("ferryman end to end (sim 0 ms)", f"{fmt(out['e2e_jobs_per_s'])} jobs/s"),
        ("  / derived limit", f"{out['e2e_to_derived_limit']:.2f}  (target >= 1)"),
        (
            "drain (pre-filled queue)",
            "skipped"
            if drain_rate is None
            else f"{fmt(drain_rate)} jobs/s  (target >= {fmt(TARGET_DRAIN, 0)})",
        ),
        (
            "pickup p50 / p99 (idle workers)",
            f"{fmt(out['pickup_p50_ms'])} / {fmt(out['pickup_p99_ms'])} ms"
            f"  (target p50 < {fmt(TARGET_PICKUP_P50_MS, 0)})",
        ),
        (
            "CPU-s per 1,000 jobs (whole machine)",
            f"{fmt(out['cpu_s_per_1000'], 2)}  (target <= {TARGET_CPU_PER_1000}); "
            f"this process {fmt(out['process_cpu_s_per_1000'], 2)}",
        ),
    ]
    rows += cpu_rows(out, "e2e")
    if drain_rate is not None:
        rows += cpu_rows(out, "drain")
        cap = out["drain_postgres_cap_jobs_per_s"]
        rows.append(
            (
                "  drain cap from PostgreSQL's CPU alone",
                "unknown (server not on this machine)"
                if cap is None
                else f"{fmt(cap)} jobs/s  ({s['cpus']} cores / "
                f"{fmt(out['drain_postgres_cpu_ms_per_job'], 3)} ms a job, zero Python)",
            )
        )
    if "statements_per_job" in out:
        rows.append(
            (
                "per job (e2e): statements / pooled lends"
                + (" (intake's only)" if s["worker_processes"] else ""),
                f"{out['statements_per_job']:.2f} / {out['lends_per_job']:.2f}",
            )
        )
    if "drain_statements_per_job" in out:
        rows.append(
            (
                "per job (drain): statements / group commits",
                f"{out['drain_statements_per_job']:.2f} / {out['drain_group_commits_per_job']:.3f}",
            )
        )
    if peer:
        rows += [
            ("Procrastinate no-op jobs", f"{fmt(peer)} jobs/s"),
            ("  ferryman / Procrastinate", f"{out['e2e_to_procrastinate']:.2f}  (target >= 2)"),
        ]
    title = (
        f"ferryman on PostgreSQL {s['postgresql']}: {s['jobs']} jobs x {s['rounds']} rounds "
        f"(medians), concurrency={s['concurrency']}, pool={s['pool_max_size']}, "
        f"worker processes={s['worker_processes'] or 'none (in this process)'}, "
        f"loop={s['loop']}, "
        f"load {s['load_average_1m']['start']:.1f} -> {s['load_average_1m']['end']:.1f}"
    )
    print_table(title, rows)


def cpu_rows(out: dict[str, Any], phase: str) -> list[tuple[str, str]]:
    """CPU-ms per job over a phase: the machine, this process, worker processes, server."""

    def ms(key: str) -> str:
        value = out[f"{phase}_{key}"]
        return "-" if value is None else fmt(value, 3)

    workers = out[f"{phase}_worker_process_cpu_ms_per_job"]
    worker_part = (
        "" if workers is None else f"; worker processes {' + '.join(fmt(w, 3) for w in workers)}"
    )
    postgres = (
        "PostgreSQL not on this machine: not measured"
        if out[f"{phase}_postgres_cpu_ms_per_job"] is None
        else f"PostgreSQL {ms('postgres_cpu_ms_per_job')} "
        f"(its client backends {ms('postgres_clients_cpu_ms_per_job')}; "
        f"whole server {ms('postgres_all_cpu_ms_per_job')})"
    )
    return [
        (
            f"CPU-ms per job, {phase}",
            f"machine {ms('cpu_ms_per_job')}; this process {ms('process_cpu_ms_per_job')}"
            f"{worker_part}; {postgres}",
        )
    ]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", required=True, help="postgresql://user@host:port/any")
    parser.add_argument("--jobs", type=int, default=10_000, help="jobs in e2e and in drain")
    parser.add_argument("--warmup", type=int, default=500, help="jobs before e2e, not counted")
    parser.add_argument("--rounds", type=int, default=1, help="figures are medians of rounds")
    parser.add_argument("--concurrency", type=int, default=64, help="worker slots")
    parser.add_argument("--pool", type=int, default=10, help="connection pool max size")
    parser.add_argument("--batch", type=int, default=50, help="e2e: submits in flight")
    parser.add_argument("--raw-jobs", type=int, default=3000, help="rows in each raw loop")
    parser.add_argument("--pickup-jobs", type=int, default=200)
    parser.add_argument("--pickup-gap-ms", type=float, default=20.0)
    parser.add_argument("--procrastinate-jobs", type=int, default=2000)
    parser.add_argument("--skip-procrastinate", action="store_true")
    parser.add_argument("--skip-drain", action="store_true")
    parser.add_argument(
        "--group-max-batch", type=int, default=GROUP_MAX_BATCH, help="writes per group commit"
    )
    parser.add_argument(
        "--group-lanes", type=int, default=GROUP_LANES, help="group commits in flight at once"
    )
    parser.add_argument(
        "--loop",
        choices=["uvloop", "asyncio"],
        default="uvloop",
        help="this process's event loop (worker processes run ferryman's own: uvloop)",
    )
    parser.add_argument(
        "--worker-processes",
        type=int,
        default=0,
        help="e2e and drain: N `ferryman worker` processes do the work, intake stays here "
        "(0: the worker runs in this process)",
    )
    parser.add_argument(
        "--count",
        action="store_true",
        help="count statements and pooled connection lends per job over the e2e run",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args(argv)
    if args.worker_processes < 0:
        parser.error("--worker-processes must be 0 or more")
    group = (args.group_max_batch, args.group_lanes) != (GROUP_MAX_BATCH, GROUP_LANES)
    if args.worker_processes and group:
        # The group commit is set on this process's engine; worker processes have their own.
        parser.error("--group-max-batch/--group-lanes apply to the in-process worker only")
    return args


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a CI timeout, ``kill``) unwinds as Ctrl-C does: the worker processes are
    stopped and the scratch databases dropped on the way out."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    _interrupt_on_sigterm()
    quiet_logs()
    if args.count:
        count_statements()
    start_load = os.getloadavg()[0]
    out = measure(args)
    out["settings"] = settings_of(args, start_load)
    out["run_id"] = uuid.uuid4().hex[:8]
    if args.json:
        print(json.dumps(out))
    else:
        print_human(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
