"""Shared pieces of the benchmark scripts: a fresh SQLite stack, waiting, timings, output.

Everything is opened the way ``ferryman serve`` opens it (the SQLite engine through
``open_engine`` with the chosen synchronous mode, file or inline results through
``open_result_store``), but over a throwaway file in a temporary directory.
"""

from __future__ import annotations

import asyncio
import math
import resource
import socket
import sqlite3
import sys
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ferryman.core.clock import SystemClock
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.engines import EngineOptions, open_engine
from ferryman.observability.logging import configure_logging
from ferryman.result_stores import open_result_store
from ferryman.services.attempt import attempt_timeouts
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.ledger import JobLedger
from ferryman.services.results import ResultWriter
from ferryman.services.worker import Worker, compose_worker
from ferryman.services.worker_parts import WorkerOptions, WorkerParts
from ferryman.tasks import builtin_tasks
from ferryman.wiring import process_observers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Mapping, Sequence
    from pathlib import Path

    from ferryman.adapters.sqlite import SqliteDatabase
    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.provider import ModelProvider
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.services.limiter import CallBudget
    from ferryman.tasks import TaskRegistry

TENANT = "bench"
RETENTION_SECONDS = 86_400.0


@dataclass(slots=True)
class Stack:
    """One open engine and its ports, as one ferryman process holds them."""

    # The engine's database handle (Engine.database), for benchmarks that look underneath.
    db: SqliteDatabase
    store: JobLedger
    queue: JobQueue
    results: ResultStore
    control: ControlStore
    keys: ApiKeyStore
    clock: SystemClock = field(default_factory=SystemClock)
    tasks: TaskRegistry = field(default_factory=builtin_tasks)

    def intake(self) -> Intake:
        return Intake(
            store=self.store.store,
            ledger=self.store,
            queue=self.queue,
            tasks=self.tasks,
            control=self.control,
            clock=self.clock,
            idempotency_retention_seconds=RETENTION_SECONDS,
            # Benchmarks script the sim model (input.simulate); deployments default to off.
            sim_scripts=True,
        )

    def worker(
        self,
        *,
        providers: Sequence[ModelProvider],
        concurrency: int,
        lease: LeasePolicy | None = None,
        provider_timeout_seconds: float = 30.0,
        budgets: Mapping[str, CallBudget] | None = None,
    ) -> Worker:
        parts = WorkerParts(
            store=self.store,
            queue=self.queue,
            results=ResultWriter(self.results),
            control=self.control,
            catalog=ModelCatalog.serving_own_names(providers),
            tasks=self.tasks,
            clock=self.clock,
            observers=self.store.observers,
        )
        settings = WorkerOptions(
            worker_id="bench",
            concurrency=concurrency,
            lease=lease or LeasePolicy(),
            retry=RetryPolicy(),
            receive_wait_seconds=0.05,
        )
        return compose_worker(
            parts, settings, timeouts=attempt_timeouts(provider_timeout_seconds), budgets=budgets
        )


@asynccontextmanager
async def open_stack(
    path: Path, *, synchronous: str, results: str, max_batch: int = 256
) -> AsyncIterator[Stack]:
    """A fresh database at ``path``; results as files beside it, or inline (``db``)."""
    clock = SystemClock()
    options = EngineOptions(sqlite_synchronous=synchronous, sqlite_max_batch=max_batch)
    results_url = "db" if results == "db" else f"file://{path.with_name(path.stem + '-results')}"
    async with (
        open_engine(f"sqlite:///{path}", clock=clock, options=options) as engine,
        open_result_store(results_url, engine) as opened_results,
    ):
        yield Stack(
            db=cast("SqliteDatabase", engine.database),
            store=JobLedger(engine.store, observers=process_observers()),
            queue=engine.queue,
            results=opened_results.store,
            control=engine.control,
            keys=engine.keys,
            clock=clock,
        )


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now, for a server this run starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def ferryman_command(*args: str) -> list[str]:
    """The ferryman command as a process of this interpreter runs it."""
    return [sys.executable, "-m", "ferryman", *args]


def quiet_logs() -> None:
    """Warnings only, on stderr: one info line per attempt would cost time and flood output."""
    configure_logging("WARNING")


def generate_request(i: int, *, latency_ms: int = 0) -> SubmitRequest:
    job_input: dict[str, Any] = {"prompt": f"benchmark job number {i}"}
    if latency_ms:
        job_input["simulate"] = {"latency_ms": latency_ms}
    return SubmitRequest(task="generate", input=job_input)


async def submit_all(
    intake: Intake, n: int, *, batch: int, latency_ms: int = 0, rate: float = 0.0
) -> None:
    """Submit n jobs, ``batch`` at a time concurrently (the next batch after the last returns).

    With ``rate`` (jobs per second) each batch waits for its turn on that schedule.
    """
    loop = asyncio.get_running_loop()
    began = loop.time()
    for start in range(0, n, batch):
        if rate > 0:
            await asyncio.sleep(max(0.0, began + start / rate - loop.time()))
        await asyncio.gather(
            *(
                intake.submit(tenant_id=TENANT, request=generate_request(i, latency_ms=latency_ms))
                for i in range(start, min(n, start + batch))
            )
        )


def _status_counts(path: Path) -> dict[str, int]:
    # A connection of its own: the benchmark's polling never queues behind the service.
    conn = sqlite3.connect(path, timeout=10.0)
    try:
        rows = conn.execute("SELECT status, COUNT(*) FROM jobs GROUP BY status").fetchall()
    finally:
        conn.close()
    return {str(status): int(count) for status, count in rows}


async def wait_all_succeeded(
    path: Path, n: int, *, timeout_seconds: float, poll_seconds: float = 0.05
) -> None:
    """Return once n jobs are SUCCEEDED; raise if one ends otherwise or time runs out."""
    deadline = time.monotonic() + timeout_seconds
    while True:
        counts = await asyncio.to_thread(_status_counts, path)
        if counts.get("SUCCEEDED", 0) >= n:
            return
        bad = {k: v for k, v in counts.items() if k in ("FAILED", "CANCELLED", "RETRY_SCHEDULED")}
        if bad:
            raise RuntimeError(f"jobs did not all succeed: {counts}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"not all {n} jobs SUCCEEDED after {timeout_seconds} s: {counts}")
        await asyncio.sleep(poll_seconds)


@dataclass(frozen=True, slots=True)
class JobTimes:
    """Per-job timestamps the service itself recorded (epoch seconds, one clock)."""

    accepted: list[float]
    claimed: list[float]
    completed: list[float]

    @property
    def span_seconds(self) -> float:
        """From the first accept to the last SUCCEEDED."""
        return max(self.completed) - min(self.accepted)

    def accept_to_claim_ms(self) -> list[float]:
        return [(c - a) * 1000 for a, c in zip(self.accepted, self.claimed, strict=True)]

    def accept_to_done_ms(self) -> list[float]:
        return [(d - a) * 1000 for a, d in zip(self.accepted, self.completed, strict=True)]


def read_job_times(path: Path) -> JobTimes:
    """created_at (accepted), the first attempt's started_at (claimed), completed_at."""
    conn = sqlite3.connect(path)
    try:
        rows = conn.execute(
            "SELECT j.created_at, a.started_at, j.completed_at FROM jobs j "
            "JOIN attempts a ON a.job_id = j.job_id AND a.attempt_no = 1 "
            "WHERE j.status = 'SUCCEEDED'"
        ).fetchall()
    finally:
        conn.close()
    return JobTimes(
        accepted=[r[0] for r in rows], claimed=[r[1] for r in rows], completed=[r[2] for r in rows]
    )


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def peak_rss_mb() -> float:
    """The process's peak resident set so far, in MiB (the larger of the two kernel views)."""
    rusage_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return max(rusage_kib, _vm_hwm_kib()) / 1024


def current_rss_mb() -> float:
    return _status_kib("VmRSS") / 1024


def _vm_hwm_kib() -> int:
    return _status_kib("VmHWM")


def _status_kib(name: str) -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(name + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def print_table(title: str, rows: Sequence[tuple[str, str]]) -> None:
    width = max(len(name) for name, _ in rows)
    print(title)
    print("-" * len(title))
    for name, value in rows:
        print(f"  {name:<{width}}  {value}")


def fmt(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"
