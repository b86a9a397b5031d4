"""ferryman against its peers: N no-op jobs end to end, one producer, interleaved runs.

Systems (``--systems``, comma-separated; default all):

celery                Celery + Redis, ``apply_async`` loop
rq                    RQ + Redis, ``enqueue`` loop (SimpleWorker pool)
dbos                  DBOS on PostgreSQL, ``DBOSClient.enqueue`` loop
procrastinate         Procrastinate on PostgreSQL, ``defer`` loop
ferryman-sequential   ``ferryman serve`` (SQLite FULL), ``ferryman.Client`` one submit at a time
ferryman-split        ``ferryman api`` + ``ferryman worker`` processes (FULL), the same
                      sequential client
ferryman-single       ``ferryman serve``, ``ferryman.AsyncClient`` with 32 submits in flight
ferryman-batch        ``ferryman serve``, ``Client.submit_many`` in batches of up to 1,000
ferryman-split-single ``ferryman api`` + ``ferryman worker`` processes, 32 submits in flight
ferryman-split-batch  ``ferryman api`` + ``ferryman worker`` processes, ``Client.submit_many``
ferryman-accept       ``ferryman api`` alone, no worker: the sequential client's jobs are
                      accepted and never run. Not end to end: first submit -> last 202,
                      the most any sequential row could reach on this machine

``serve`` is one process, so one core runs its intake and its worker. The split rows run
one ``ferryman api`` and ``--split-workers`` ``ferryman worker`` processes, by default one
per core: the deployment the docs recommend once one process is not enough, and what
Celery's row runs too (a prefork pool of one worker process per core).

Each run starts the system's own processes on a clean store, runs a warm-up round
that is not counted, then times one producer from its first submit to the last job's
completion as the system itself recorded it. Round r runs every system once, in an
order rotated by r. Figures are medians with min-max over the rounds.

CPU per 1,000 jobs counts the system's own processes (workers, servers and their
children, from /proc) over the measured round, plus the producer's submit loop; the
Redis and PostgreSQL servers, shared and already running, are NOT counted.

Run: ``.venv/bin/python bench/peers.py [--jobs 10000] [--rounds 3] [--json]``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import peer_systems as peers

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from peer_systems import RunFigures

# The targets, as ratios to Celery in the same run, and CPU ceilings.
TARGET_SINGLE_TO_CELERY = 1.5
TARGET_BATCH_TO_CELERY = 3.0
TARGET_SEQUENTIAL_TO_CELERY = 0.75
TARGET_CPU_S_PER_1000_BATCH = 1.0
TARGET_CPU_S_PER_1000_SINGLE = 1.5

# What the benchmark changes in ferryman's defaults, printed with every run: the
# per-tenant submit limit (50/s out of the box) would cap any producer at 50 jobs/s,
# and the read limit would throttle the completion polling. Logs at WARNING, as the
# peers' workers run, so no system writes a line per job.
FERRYMAN_ENV = {
    "FERRYMAN_SQLITE_SYNCHRONOUS": "FULL",
    "FERRYMAN_TENANT_RATE_PER_SECOND": "0",
    "FERRYMAN_TENANT_READ_RATE_PER_SECOND": "0",
    "FERRYMAN_LOG_LEVEL": "WARNING",
}
TENANT = "bench"


@dataclass(frozen=True, slots=True)
class System:
    """One row of the table: what runs, how jobs are sent, and its names in the JSON."""

    key: str
    label: str
    how: str
    rate_key: str
    cpu_key: str


def _peer(key: str) -> System:
    peer = peers.PEERS[key]
    return System(key, peer.label, peer.how, f"{key}_jobs_per_s", f"{key}_cpu_s_per_1000")


def _ours(key: str, label: str, how: str, suffix: str) -> System:
    return System(
        key, label, how, f"ferryman_{suffix}_jobs_per_s", f"ferryman_cpu_s_per_1000_{suffix}"
    )


SERVE = "ferryman `serve`, SQLite FULL"
SPLIT = "ferryman `api` + `worker`, FULL"
SYSTEMS: dict[str, System] = {
    s.key: s
    for s in (
        _peer("celery"),
        _peer("dbos"),
        _peer("rq"),
        _peer("procrastinate"),
        _ours("ferryman-sequential", SERVE, "`ferryman.Client`, sequential", "sequential"),
        _ours("ferryman-split", SPLIT, "`ferryman.Client`, sequential", "split_sequential"),
        _ours("ferryman-single", SERVE, "`ferryman.AsyncClient`, 32 concurrent", "single"),
        _ours("ferryman-batch", SERVE, "`Client.submit_many`, batches of 1,000", "batch"),
        _ours(
            "ferryman-split-single", SPLIT, "`ferryman.AsyncClient`, 32 concurrent", "split_single"
        ),
        _ours(
            "ferryman-split-batch", SPLIT, "`Client.submit_many`, batches of 1,000", "split_batch"
        ),
        _ours(
            "ferryman-accept",
            "ferryman `api` alone, no worker, FULL",
            "`ferryman.Client`, sequential; accepted, never run (first submit -> last 202)",
            "accept_only",
        ),
    )
}


# --- pure parts: order, statistics, formatting -----------------------------------------


def rotated(keys: Sequence[str], round_index: int) -> list[str]:
    """Round r runs every system once, starting r places further along."""
    if not keys:
        return []
    shift = round_index % len(keys)
    return [*keys[shift:], *keys[:shift]]


@dataclass(frozen=True, slots=True)
class Spread:
    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Spread:
        return cls(statistics.median(values), min(values), max(values))

    def cell(self, digits: int = 0) -> str:
        """``1,384 (994-1,418)``; one run shows its figure alone."""
        if self.low == self.high:
            return _number(self.median, digits)
        return f"{_number(self.median, digits)} ({_number(self.low, digits)}-{_number(self.high, digits)})"


def _number(value: float, digits: int) -> str:
    return f"{value:,.{digits}f}"


def parse_systems(text: str) -> list[str]:
    """``--systems``: keys, or ``ferryman`` / ``peers`` for each group, in table order."""
    wanted: set[str] = set()
    for word in (w.strip() for w in text.split(",") if w.strip()):
        if word == "all":
            wanted.update(SYSTEMS)
        elif word in ("ferryman", "peers"):
            wanted.update(k for k in SYSTEMS if k.startswith("ferryman") == (word == "ferryman"))
        elif word in SYSTEMS:
            wanted.add(word)
        else:
            raise argparse.ArgumentTypeError(
                f"unknown system {word!r}; known: {', '.join(SYSTEMS)}"
            )
    return [k for k in SYSTEMS if k in wanted]


# --- ferryman runs ---------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ferryman(*args: str) -> list[str]:
    return [sys.executable, "-m", "ferryman", *args]


def _create_key(env: dict[str, str]) -> str:
    made = subprocess.run(
        _ferryman("keys", "create", "--tenant", TENANT), env=env, capture_output=True, text=True
    )
    if made.returncode != 0:
        raise RuntimeError(f"ferryman keys create failed: {made.stderr[-1000:]}")
    return made.stdout.strip().splitlines()[-1]


def _services(
    key: str, env: dict[str, str], port: int, logs: Path, *, workers: int = 1
) -> list[peers.Service]:
    ready = f"http://127.0.0.1:{port}/readyz"
    if key == "ferryman-accept":
        return [
            peers.Service(
                "ferryman-api", _ferryman("api", "--port", str(port)), env, logs, ready_url=ready
            )
        ]
    if key.startswith("ferryman-split"):
        api = peers.Service(
            "ferryman-api", _ferryman("api", "--port", str(port)), env, logs, ready_url=ready
        )
        return [
            api,
            *(
                peers.Service(f"ferryman-worker-{n}", _ferryman("worker"), env, logs)
                for n in range(1, workers + 1)
            ),
        ]
    return [
        peers.Service(
            "ferryman-serve", _ferryman("serve", "--port", str(port)), env, logs, ready_url=ready
        )
    ]


_MODES = {
    "ferryman-sequential": "sequential",
    "ferryman-split": "sequential",
    "ferryman-single": "concurrent",
    "ferryman-batch": "batch",
    "ferryman-split-single": "concurrent",
    "ferryman-split-batch": "batch",
    "ferryman-accept": "accept-only",
}


def run_ferryman(key: str, args: argparse.Namespace) -> RunFigures | None:
    with tempfile.TemporaryDirectory(prefix="ferryman-peers-") as directory:
        root = Path(directory)
        port = _free_port()
        env = {
            **os.environ,
            **FERRYMAN_ENV,
            "FERRYMAN_DATABASE_URL": f"sqlite:///{root / 'ferryman.db'}",
            "FERRYMAN_RESULTS_URL": f"file://{root / 'results'}",
            "FERRYMAN_URL": f"http://127.0.0.1:{port}",
        }
        env["FERRYMAN_API_KEY"] = _create_key(env)
        producer_script = str(peers.PEERS_DIR / "ferryman_producer.py")

        def producer(tag: str, n: int) -> list[str]:
            argv = [sys.executable, producer_script, _MODES[key], "--jobs", str(n), "--tag", tag]
            argv += ["--url", env["FERRYMAN_URL"], "--concurrency", str(args.concurrency)]
            return [*argv, "--batch-size", str(args.batch_size)]

        services = _services(key, env, port, args.log_dir or root, workers=args.split_workers)
        figures = peers.measured_run(services, producer, env, jobs=args.jobs, warmup=args.warmup)
        if figures is not None:
            database = root / "ferryman.db"
            if key == "ferryman-accept":
                _check_accepted(database, figures.extra["first_submit"], args.jobs)
            else:
                figures.extra.update(pickup_ms(database, figures.extra["first_submit"]))
        return figures


def _check_accepted(database: Path, since: float, jobs: int) -> None:
    """The accept-only producer counts its 202s; the database must hold as many jobs."""
    with contextlib.closing(sqlite3.connect(database)) as conn:
        (stored,) = conn.execute(
            "SELECT count(*) FROM jobs WHERE created_at >= ?", (since,)
        ).fetchone()
    if stored != jobs:
        raise RuntimeError(f"{stored} jobs stored for {jobs} accepted")


def pickup_ms(database: Path, since: float) -> dict[str, float]:
    """Accept -> claim of the measured jobs, from the records the events API serves.

    A job's ``created_at`` is its ACCEPTED event; its first attempt's ``started_at`` is
    the claim. Read from the database file after the run: every job, not a sample.
    """
    with contextlib.closing(sqlite3.connect(database)) as conn:
        rows = conn.execute(
            "SELECT a.started_at - j.created_at FROM jobs j "
            "JOIN attempts a ON a.job_id = j.job_id AND a.attempt_no = 1 WHERE j.created_at >= ?",
            (since,),
        ).fetchall()
    waits = sorted(float(r[0]) * 1000 for r in rows)
    if not waits:
        return {}
    return {"pickup_p50_ms": _rank(waits, 50), "pickup_p99_ms": _rank(waits, 99)}


def _rank(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted values."""
    index = max(0, min(len(ordered) - 1, -(-len(ordered) * q // 100) - 1))
    return ordered[int(index)]


# --- the run ---------------------------------------------------------------------------


@dataclass
class Outcome:
    """Every run of one system: figures, None where the build lacks the path, or an error."""

    runs: list[RunFigures | None]
    errors: list[str]


def run_one(key: str, args: argparse.Namespace, python: Path) -> RunFigures | None:
    if key.startswith("ferryman"):
        return run_ferryman(key, args)
    return peers.run_peer(
        key,
        python=python,
        jobs=args.jobs,
        warmup=args.warmup,
        redis_url=args.redis_url,
        postgres_url=args.postgres_url,
        log_dir=args.log_dir,
    )


def run_rounds(
    args: argparse.Namespace, python: Path, log: Callable[[str], None]
) -> dict[str, Outcome]:
    outcomes = {key: Outcome([], []) for key in args.systems}
    for r in range(args.rounds):
        for key in rotated(args.systems, r):
            log(f"round {r + 1}/{args.rounds}: {key} ...")
            try:
                figures = run_one(key, args, python)
            # One broken run must not lose the others' figures; the exit code says it.
            except (RuntimeError, OSError, ValueError, KeyError, subprocess.SubprocessError) as exc:
                outcomes[key].errors.append(f"round {r + 1}: {exc}")
                log(traceback.format_exc())
                continue
            outcomes[key].runs.append(figures)
            log(f"  {_run_line(figures)}")
    return outcomes


def _run_line(figures: RunFigures | None) -> str:
    if figures is None:
        return "not available in this build"
    return (
        f"{figures.jobs_per_s:,.0f} jobs/s, {figures.cpu_s_per_1000:.2f} CPU-s per 1,000 "
        f"(processes {figures.service_cpu_s:.2f} s, producer {figures.producer_cpu_s:.2f} s)"
    )


# --- the report ------------------------------------------------------------------------


def summarize(outcome: Outcome) -> dict[str, Any]:
    """Medians (min-max) over the runs that measured something."""
    runs = [r for r in outcome.runs if r is not None]
    if not runs:
        reason = "; ".join(outcome.errors) or "not available in this build"
        return {"available": False, "reason": reason}
    rate = Spread.of([r.jobs_per_s for r in runs])
    out: dict[str, Any] = {
        "available": True,
        "runs": len(runs),
        "jobs_per_s": rate.median,
        "jobs_per_s_min": rate.low,
        "jobs_per_s_max": rate.high,
        "cell": rate.cell(),
        "cpu_s_per_1000": statistics.median(r.cpu_s_per_1000 for r in runs),
        "producer_cpu_s_per_1000": statistics.median(
            r.producer_cpu_s * 1000 / r.jobs for r in runs
        ),
        "last_submit_to_last_completion_ms": statistics.median(
            (r.extra["last_completion"] - r.extra["last_submit"]) * 1000 for r in runs
        ),
        "per_run_jobs_per_s": [r.jobs_per_s for r in runs],
        "errors": outcome.errors,
    }
    for name in ("pickup_p50_ms", "pickup_p99_ms"):
        values = [r.extra[name] for r in runs if name in r.extra]
        if values:
            out[name] = statistics.median(values)
    return out


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def report(
    args: argparse.Namespace, outcomes: dict[str, Outcome], start_load: float
) -> dict[str, Any]:
    summaries = {key: summarize(outcome) for key, outcome in outcomes.items()}
    out: dict[str, Any] = {}
    if summaries.get("ferryman-accept", {}).get("available"):
        # Nothing ran its jobs: its time ends at the last 202, not at a completion.
        accept = summaries["ferryman-accept"]
        accept["measures"] = "first submit -> last 202, no worker (not end to end)"
        accept.pop("last_submit_to_last_completion_ms", None)
    for key, summary in summaries.items():
        system = SYSTEMS[key]
        out[system.rate_key] = summary.get("jobs_per_s")
        out[system.cpu_key] = summary.get("cpu_s_per_1000")
    for system in SYSTEMS.values():
        out.setdefault(system.rate_key, None)
        out.setdefault(system.cpu_key, None)
    celery = out["celery_jobs_per_s"]
    out["ratios_to_celery"] = {
        "single": _ratio(out["ferryman_single_jobs_per_s"], celery),
        "batch": _ratio(out["ferryman_batch_jobs_per_s"], celery),
        "sequential": _ratio(out["ferryman_sequential_jobs_per_s"], celery),
        "split_single": _ratio(out["ferryman_split_single_jobs_per_s"], celery),
        "split_batch": _ratio(out["ferryman_split_batch_jobs_per_s"], celery),
        "split_sequential": _ratio(out["ferryman_split_sequential_jobs_per_s"], celery),
        # Not a target: accepting alone, the ceiling of the sequential rows.
        "accept_only": _ratio(out["ferryman_accept_only_jobs_per_s"], celery),
    }
    out["targets"] = {
        "single_to_celery": TARGET_SINGLE_TO_CELERY,
        "batch_to_celery": TARGET_BATCH_TO_CELERY,
        "sequential_to_celery": TARGET_SEQUENTIAL_TO_CELERY,
        "cpu_s_per_1000_batch": TARGET_CPU_S_PER_1000_BATCH,
        "cpu_s_per_1000_single": TARGET_CPU_S_PER_1000_SINGLE,
    }
    out["targets_met"] = targets_met(out)
    out["systems"] = summaries
    out["settings"] = settings(args, start_load)
    return out


def targets_met(out: dict[str, Any]) -> dict[str, bool | None]:
    """Each target: met, missed, or None where this run has no figure for it."""
    ratios, targets = out["ratios_to_celery"], out["targets"]

    def at_least(value: float | None, target: float) -> bool | None:
        return None if value is None else value >= target

    def at_most(value: float | None, target: float) -> bool | None:
        return None if value is None else value <= target

    return {
        "single_to_celery": at_least(ratios["single"], targets["single_to_celery"]),
        "batch_to_celery": at_least(ratios["batch"], targets["batch_to_celery"]),
        "sequential_to_celery": at_least(ratios["sequential"], targets["sequential_to_celery"]),
        "cpu_s_per_1000_batch": at_most(
            out["ferryman_cpu_s_per_1000_batch"], targets["cpu_s_per_1000_batch"]
        ),
        "cpu_s_per_1000_single": at_most(
            out["ferryman_cpu_s_per_1000_single"], targets["cpu_s_per_1000_single"]
        ),
        # The same targets for `ferryman api` + a worker per core (the split rows).
        "split_single_to_celery": at_least(ratios["split_single"], targets["single_to_celery"]),
        "split_batch_to_celery": at_least(ratios["split_batch"], targets["batch_to_celery"]),
        "split_sequential_to_celery": at_least(
            ratios["split_sequential"], targets["sequential_to_celery"]
        ),
        "cpu_s_per_1000_split_batch": at_most(
            out["ferryman_cpu_s_per_1000_split_batch"], targets["cpu_s_per_1000_batch"]
        ),
        "cpu_s_per_1000_split_single": at_most(
            out["ferryman_cpu_s_per_1000_split_single"], targets["cpu_s_per_1000_single"]
        ),
    }


def settings(args: argparse.Namespace, start_load: float) -> dict[str, Any]:
    import ferryman

    return {
        "jobs": args.jobs,
        "warmup_jobs": args.warmup,
        "rounds": args.rounds,
        "concurrency": args.concurrency,
        "batch_size": args.batch_size,
        "split_workers": args.split_workers,
        "cpus": os.cpu_count(),
        "load_average_1m": {"start": start_load, "end": os.getloadavg()[0]},
        "versions": {
            "ferryman": ferryman.__version__,
            "python": sys.version.split()[0],
            "sqlite": sqlite3.sqlite_version,
            **peers.PINS,
        },
        "ferryman_env": FERRYMAN_ENV,
        "cpu_counts": "each system's own processes and the producer's submit loop; "
        "not the Redis or PostgreSQL server processes",
    }


def print_table(out: dict[str, Any]) -> None:
    s = out["settings"]
    print(
        f"\n{s['jobs']:,} no-op jobs, {s['warmup_jobs']:,} warm-up jobs not counted, one producer, "
        f"{s['rounds']} interleaved round(s), medians (min-max); load {s['load_average_1m']}"
    )
    print(
        "\n| system | how jobs are sent | end to end (jobs/s) | CPU-s per 1,000 jobs (own processes) |"
    )
    print("| --- | --- | --- | --- |")
    for key, summary in out["systems"].items():
        system = SYSTEMS[key]
        if summary["available"]:
            cells = f"{summary['cell']} | {summary['cpu_s_per_1000']:.2f}"
        else:
            cells = f"{summary['reason']} | -"
        print(f"| {system.label} | {system.how} | {cells} |")
    print()
    for key, summary in out["systems"].items():
        if summary.get("pickup_p50_ms") is not None:
            print(
                f"{key}: pickup (accept -> claim) p50 {summary['pickup_p50_ms']:.1f} ms, "
                f"p99 {summary['pickup_p99_ms']:.1f} ms; last 202 -> last completion "
                f"{summary['last_submit_to_last_completion_ms']:.0f} ms"
            )
    ratios, targets = out["ratios_to_celery"], out["targets"]
    for name in ("single", "batch", "sequential"):
        for prefix, label in (("", "serve"), ("split_", f"api + {s['split_workers']} workers")):
            value = ratios[prefix + name]
            if value is None:
                continue
            target = targets[name + "_to_celery"]
            print(f"ferryman {name} ({label}) / Celery: {value:.2f} (target >= {target})")
    if ratios["accept_only"] is not None:
        print(
            f"ferryman accepting alone (api, no worker, sequential) / Celery: "
            f"{ratios['accept_only']:.2f} (not a target: the most a sequential row could reach)"
        )
    print(
        "CPU counts each system's own processes and the producer's submit loop, "
        "not Redis or PostgreSQL."
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in s["versions"].items()))
    print(f"ferryman settings changed for the benchmark: {s['ferryman_env']}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=None, help="warm-up jobs per run (jobs/10)")
    parser.add_argument("--systems", type=parse_systems, default=list(SYSTEMS))
    parser.add_argument(
        "--concurrency", type=int, default=32, help="ferryman-single's submits in flight"
    )
    parser.add_argument(
        "--batch-size", type=int, default=1000, help="ferryman-batch's jobs per call"
    )
    parser.add_argument(
        "--split-workers",
        type=int,
        default=os.cpu_count() or 1,
        help="ferryman-split*: `ferryman worker` processes beside the one `ferryman api` "
        "(default: one per core, as Celery's prefork pool)",
    )
    parser.add_argument("--peers-venv", type=Path, default=peers.DEFAULT_VENV)
    parser.add_argument("--redis-url", default=peers.DEFAULT_REDIS_URL)
    parser.add_argument("--postgres-url", default=peers.DEFAULT_POSTGRES_URL)
    parser.add_argument("--log-dir", type=Path, default=None, help="keep the processes' logs here")
    parser.add_argument(
        "--json", action="store_true", help="one JSON object on stdout, nothing else"
    )
    args = parser.parse_args(argv)
    if args.warmup is None:
        args.warmup = max(50, args.jobs // 10)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    start_load = os.getloadavg()[0]
    needs_peers = any(not key.startswith("ferryman") for key in args.systems)
    python = (
        peers.ensure_peers_venv(args.peers_venv, log=log) if needs_peers else Path(sys.executable)
    )
    log(f"peers: {peers.pins_text()} (in {args.peers_venv})")
    log(f"ferryman settings changed for the benchmark: {FERRYMAN_ENV}")
    log("CPU counts each system's own processes and the producer, not Redis or PostgreSQL.")
    began = time.monotonic()
    outcomes = run_rounds(args, python, log)
    out = report(args, outcomes, start_load)
    out["settings"]["wall_seconds"] = time.monotonic() - began
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        print_table(out)
    return 1 if any(o.errors for o in outcomes.values()) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
