"""The peers ferryman is measured against, and the machinery to run any of them.

Used by ``bench/peers.py`` and by any benchmark that wants a peer beside ferryman
(e.g. Procrastinate doing no-op jobs on the same PostgreSQL server:
``run_procrastinate("postgresql://postgres@127.0.0.1:5432", jobs=2000)``).

- The peers live in a virtualenv of their own (``~/.cache/ferryman-bench/peers-venv``),
  made and kept up to date by ``ensure_peers_venv``; they are never dependencies of
  ferryman. Their worker code is the small modules in ``bench/peers/``.
- A run starts the system's own processes (workers), runs one warm-up round that is
  not counted, then the measured round from one producer process, and counts the CPU
  of those processes' whole trees (``/proc``), plus the producer's own submit loop.
  Redis and PostgreSQL server processes are shared, already running, and NOT counted.
- Each run gets a clean store: its own Redis database number, flushed before and
  after, or its own scratch PostgreSQL database, created before and dropped after.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import venv
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping, Sequence

BENCH_DIR = Path(__file__).resolve().parent
PEERS_DIR = BENCH_DIR / "peers"
DEFAULT_VENV = Path.home() / ".cache" / "ferryman-bench" / "peers-venv"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432"

# Exactly what the peers' virtualenv holds: printed with every run.
PINS: dict[str, str] = {
    "celery": "5.7.0",
    "redis": "8.1.0",
    "rq": "3.0.0",
    "dbos": "3.4.0",
    "procrastinate": "3.10.0",
    "psycopg[binary]": "3.3.9",
}
_PINS_MARKER = "ferryman-bench-pins.json"

# Redis database numbers the benchmark flushes: its own, one per Redis peer.
REDIS_DB = {"celery": 11, "rq": 12}
STOP_GRACE_SECONDS = 15.0


# --- the virtualenv --------------------------------------------------------------------


def ensure_peers_venv(path: Path = DEFAULT_VENV, *, log: Callable[[str], None] = print) -> Path:
    """The peers' Python, installing the pinned versions first if the venv lacks them."""
    python = path / "bin" / "python"
    marker = path / _PINS_MARKER
    if python.exists() and marker.exists() and json.loads(marker.read_text()) == PINS:
        return python
    log(f"installing the peers into {path} (once): {pins_text()}")
    if not python.exists():
        venv.EnvBuilder(with_pip=True).create(path)
    requirements = [f"{name}=={version}" for name, version in PINS.items()]
    subprocess.run([str(python), "-m", "pip", "install", "-q", *requirements], check=True)
    marker.write_text(json.dumps(PINS))
    return python


def pins_text() -> str:
    return ", ".join(f"{name} {version}" for name, version in PINS.items())


# --- CPU of process trees -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProcStat:
    """One line of /proc/PID/stat, reduced to what CPU accounting needs."""

    pid: int
    ppid: int
    # utime + stime of the process, plus cutime + cstime: the CPU of its children that
    # have exited and been waited for (so forks that come and go are still counted).
    ticks: int


def parse_stat(text: str) -> ProcStat:
    """Parse /proc/PID/stat; the command name may hold spaces and parentheses."""
    pid = int(text[: text.index(" ")])
    fields = text[text.rindex(")") + 2 :].split()
    # fields[0] is field 3 (state): ppid is field 4, utime..cstime fields 14-17.
    ppid = int(fields[1])
    ticks = sum(int(value) for value in fields[11:15])
    return ProcStat(pid=pid, ppid=ppid, ticks=ticks)


def read_procs(proc: Path = Path("/proc")) -> dict[int, ProcStat]:
    """Every process visible now (those that vanish while being read are skipped)."""
    stats: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = parse_stat((entry / "stat").read_text())
            stats[stat.pid] = stat
    return stats


def tree_ticks(roots: Sequence[int], stats: Mapping[int, ProcStat]) -> int:
    """CPU ticks of the roots and all their live descendants.

    A dead child's time is in its parent's cutime/cstime once reaped, and it is no
    longer in the tree then, so nothing is counted twice.
    """
    children: dict[int, list[int]] = {}
    for stat in stats.values():
        children.setdefault(stat.ppid, []).append(stat.pid)
    seen: set[int] = set()
    todo = [pid for pid in roots if pid in stats]
    while todo:
        pid = todo.pop()
        if pid in seen:
            continue
        seen.add(pid)
        todo.extend(children.get(pid, []))
    return sum(stats[pid].ticks for pid in seen)


def tree_cpu_seconds(roots: Sequence[int]) -> float:
    return tree_ticks(roots, read_procs()) / os.sysconf("SC_CLK_TCK")


# --- processes a run starts ---------------------------------------------------------


@dataclass
class Service:
    """One long-running process of a system (a worker, a server), in its own session."""

    name: str
    argv: list[str]
    env: dict[str, str]
    log_dir: Path
    # A line the process prints once it can take work (None: ready once started).
    ready_line: str | None = None
    # Or a URL that answers 200 once it can (a server's readiness probe).
    ready_url: str | None = None
    process: subprocess.Popen[bytes] | None = None
    # Where this start's output begins in the log (a kept log holds earlier runs too).
    log_offset: int = 0

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    def start(self) -> None:
        with self.log_path.open("ab") as log:
            self.log_offset = log.tell()
            self.process = subprocess.Popen(
                self.argv,
                env=self.env,
                cwd=PEERS_DIR,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self, timeout_seconds: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_seconds
        while self.ready_line is not None or self.ready_url is not None:
            self.check()
            if self._is_ready():
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"{self.name} not ready after {timeout_seconds} s: {self.tail()}"
                )
            time.sleep(0.05)

    def _is_ready(self) -> bool:
        if self.ready_url is not None:
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(self.ready_url, timeout=1.0) as response,
            ):
                return bool(response.status == 200)
            return False
        with contextlib.suppress(OSError), self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return str(self.ready_line).encode() in log.read()
        return False

    def check(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.process.returncode}: {self.tail()}")

    def tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        """SIGTERM to the process group this service started, SIGKILL if it lingers."""
        if self.process is None or self.process.poll() is not None:
            return
        group = self.process.pid  # start_new_session: the group is the process's own
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            self.process.wait()


@contextlib.contextmanager
def running(services: Sequence[Service]) -> Iterator[None]:
    try:
        for service in services:
            service.start()
        for service in services:
            service.wait_ready()
        yield
    finally:
        for service in reversed(services):
            service.stop()


# --- one measured run ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunFigures:
    """One system, one round: end to end rate and the CPU its own processes used."""

    jobs: int
    seconds: float
    service_cpu_s: float
    producer_cpu_s: float
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def jobs_per_s(self) -> float:
        return self.jobs / self.seconds

    @property
    def cpu_s_per_1000(self) -> float:
        return (self.service_cpu_s + self.producer_cpu_s) * 1000 / self.jobs


FINISHED = "FINISHED"


def produce(
    argv: Sequence[str],
    env: Mapping[str, str],
    services: Sequence[Service],
    on_finished: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run a producer process to the end; its last stdout line is its JSON report.

    A producer prints ``FINISHED`` once it has seen every job complete and then waits
    for a line on stdin before it reads the jobs' timestamps: ``on_finished`` runs in
    that gap, so what the reading costs the system's processes is not counted.
    """
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=PEERS_DIR,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
        )
        assert process.stdin is not None
        assert process.stdout is not None
        lines: list[str] = []
        for line in process.stdout:
            if line.strip() == FINISHED:
                if on_finished is not None:
                    on_finished()
                process.stdin.write("go\n")
                process.stdin.flush()
            elif line.strip():
                lines.append(line.strip())
        process.stdin.close()
        code = process.wait()
        errors.seek(0)
        stderr = errors.read().decode(errors="replace")
    for service in services:
        service.check()
    if code != 0 or not lines:
        shown = stderr if len(stderr) < 3000 else f"{stderr[:1000]}\n...\n{stderr[-2000:]}"
        raise RuntimeError(f"producer failed ({code}): {shown}")
    report: dict[str, Any] = json.loads(lines[-1])
    return report


def measured_run(
    services: Sequence[Service],
    producer: Callable[[str, int], list[str]],
    env: Mapping[str, str],
    *,
    jobs: int,
    warmup: int,
) -> RunFigures | None:
    """Warm up (not counted), then measure ``jobs`` from first submit to last completion.

    ``producer(tag, n)`` gives the argv of a producer process submitting n jobs. A
    producer that reports ``{"unavailable": reason}`` makes the run None.
    """
    with running(services):
        if warmup:
            report = produce(producer("w", warmup), env, services)
            if "unavailable" in report:
                return None
        roots = [s.process.pid for s in services if s.process is not None]
        cpu_before = tree_cpu_seconds(roots)
        cpu_after: list[float] = []
        report = produce(
            producer("m", jobs), env, services, lambda: cpu_after.append(tree_cpu_seconds(roots))
        )
        if "unavailable" in report:
            return None
        if not cpu_after:
            raise RuntimeError("the producer never said FINISHED")
        service_cpu = cpu_after[0] - cpu_before
    if report["completed"] != jobs:
        raise RuntimeError(f"{report['completed']} of {jobs} jobs completed")
    extra = {k: v for k, v in report.items() if k not in ("completed", "producer_cpu_s")}
    return RunFigures(
        jobs=jobs,
        seconds=report["last_completion"] - report["first_submit"],
        service_cpu_s=service_cpu,
        producer_cpu_s=report["producer_cpu_s"],
        extra=extra,
    )


# --- stores --------------------------------------------------------------------------


@contextlib.contextmanager
def redis_database(base_url: str, number: int) -> Iterator[str]:
    """The benchmark's own Redis database number, empty before and after the run."""
    url = f"{base_url.rstrip('/')}/{number}"
    subprocess.run(["redis-cli", "-u", url, "FLUSHDB"], check=True, capture_output=True)
    try:
        yield url
    finally:
        subprocess.run(["redis-cli", "-u", url, "FLUSHDB"], check=False, capture_output=True)


@contextlib.contextmanager
def scratch_database(server_url: str, name: str) -> Iterator[str]:
    """A PostgreSQL database made for one run and dropped after it."""

    def psql(sql: str) -> None:
        command = ["psql", f"{server_url.rstrip('/')}/postgres", "-q", "-v", "ON_ERROR_STOP=1"]
        subprocess.run([*command, "-c", sql], check=True, capture_output=True)

    psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    psql(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server_url.rstrip('/')}/{name}"
    finally:
        psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# --- the peers -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Peer:
    name: str
    label: str
    how: str


PEERS: dict[str, Peer] = {
    "celery": Peer("celery", "Celery 5.7 + Redis (no persistence)", "`apply_async` loop"),
    "rq": Peer("rq", "RQ 3.0 + Redis", "`enqueue` loop"),
    "dbos": Peer("dbos", "DBOS 3.4 on PostgreSQL", "client `enqueue` loop"),
    "procrastinate": Peer("procrastinate", "Procrastinate 3.10 on PostgreSQL", "`defer` loop"),
}
PROCRASTINATE_CONCURRENCY = 10


def _worker_argv(name: str, python: Path, cpus: int, env: Mapping[str, str]) -> list[list[str]]:
    py = str(python)
    if name == "celery":
        return [
            [
                py,
                "-m",
                "celery",
                "-A",
                "noop_celery",
                "worker",
                f"--concurrency={cpus}",
                "--pool=prefork",
                "--without-gossip",
                "--without-mingle",
                "--without-heartbeat",
                "--loglevel=WARNING",
            ]
        ]
    if name == "rq":
        # SimpleWorker runs jobs in the worker process itself. RQ's default Worker forks
        # a work horse per job, which measures fork(), not a queue (about 30 jobs/s here).
        return [
            [
                py,
                "-m",
                "rq.cli",
                "worker-pool",
                "-n",
                str(cpus),
                "-l",
                "WARNING",
                "-w",
                "rq.worker.SimpleWorker",
                "-u",
                env["BENCH_REDIS_URL"],
                "bench",
            ]
        ]
    if name == "dbos":
        return [[py, "noop_dbos.py"]]
    if name == "procrastinate":
        return [
            [
                py,
                "-m",
                "procrastinate",
                "--app=noop_procrastinate.app",
                "worker",
                f"--concurrency={PROCRASTINATE_CONCURRENCY}",
                "--delete-jobs=never",
            ]
        ]
    raise ValueError(f"unknown peer {name!r}")


@contextlib.contextmanager
def _store(name: str, redis_url: str, postgres_url: str) -> Iterator[dict[str, str]]:
    if name in REDIS_DB:
        with redis_database(redis_url, REDIS_DB[name]) as url:
            yield {"BENCH_REDIS_URL": url}
    else:
        with scratch_database(postgres_url, f"ferryman_bench_{name}") as url:
            yield {"BENCH_DATABASE_URL": url}


def run_peer(
    name: str,
    *,
    python: Path,
    jobs: int,
    warmup: int,
    redis_url: str = DEFAULT_REDIS_URL,
    postgres_url: str = DEFAULT_POSTGRES_URL,
    log_dir: Path | None = None,
) -> RunFigures:
    """One measured run of a peer on a clean store of its own."""
    cpus = os.cpu_count() or 1
    with _store(name, redis_url, postgres_url) as store_env, _log_dir(log_dir) as logs:
        env = {**os.environ, **store_env, "PYTHONPATH": str(PEERS_DIR), "PYTHONUNBUFFERED": "1"}
        if name == "procrastinate":
            schema = [str(python), "-m", "procrastinate", "--app=noop_procrastinate.app"]
            subprocess.run(
                [*schema, "schema", "--apply"],
                env=env,
                cwd=PEERS_DIR,
                check=True,
                capture_output=True,
            )
        argvs = _worker_argv(name, python, cpus, env)
        ready = "ready" if name == "dbos" else None
        services = [
            Service(f"{name}-{i}", argv, env, logs, ready_line=ready)
            for i, argv in enumerate(argvs)
        ]

        def producer(tag: str, n: int) -> list[str]:
            return [str(python), str(PEERS_DIR / "drive.py"), name, "--jobs", str(n), "--tag", tag]

        figures = measured_run(services, producer, env, jobs=jobs, warmup=warmup)
    if figures is None:
        raise RuntimeError(f"{name}: the producer reported itself unavailable")
    return figures


def run_procrastinate(
    postgres_url: str = DEFAULT_POSTGRES_URL, *, jobs: int = 2000, warmup: int = 200
) -> RunFigures:
    """Procrastinate doing ``jobs`` no-op jobs on the given server (for other benchmarks)."""
    return run_peer(
        "procrastinate",
        python=ensure_peers_venv(log=lambda line: print(line, file=sys.stderr)),
        jobs=jobs,
        warmup=warmup,
        postgres_url=postgres_url,
    )


@contextlib.contextmanager
def _log_dir(given: Path | None) -> Iterator[Path]:
    if given is not None:
        given.mkdir(parents=True, exist_ok=True)
        yield given
        return
    with tempfile.TemporaryDirectory(prefix="ferryman-peers-") as directory:
        yield Path(directory)
