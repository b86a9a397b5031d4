"""A quiet tenant's submissions while another tenant floods 1,000-job batches
(issue 18, item 9).

For each source tree (``--tree NAME=PATH``, see bench/served.py) and engine
(``--engines``: ``sqlite``, and ``postgres`` on a scratch database of the server
``--postgres-url`` names, made and dropped by the run): a fresh ``ferryman serve``
(SQLite FULL; one process: the API and a worker; rate limits off), then two phases
of ``--seconds`` (10) each:

- **alone**: the quiet tenant submits one ``generate`` job at a time, one every
  ``--gap-ms`` (20), and nothing else runs;
- **flood**: the same, while ``--flooders`` (2) clients of another tenant each send
  batches of ``--batch-jobs`` (1,000) jobs back to back.

Prints per tree and phase: the quiet tenant's submit latency (p50, p99, max, as its
client saw it), its jobs' completion (accept -> SUCCEEDED, p50 and p99, from the
jobs' own timestamps once they have all finished), and in the flood the jobs the
flooding tenant got accepted per second.

Run: ``.venv/bin/python bench/intake_fairness.py [--tree old=/tmp/ferryman-main
--tree new=.] [--seconds 10] [--engines sqlite,postgres] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sqlite3
import statistics
import time
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from peer_systems import scratch_database
from served import percentile, serve, summary_ms, trees

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from served import Served

QUIET, FLOOD = "quiet", "flood"
FINISH_SECONDS = 600.0


async def quiet_tenant(url: str, key: str, seconds: float, gap: float) -> list[float]:
    """Submit one job at a time until time is up; each submit's latency."""
    latencies: list[float] = []
    headers = {"Authorization": f"Bearer {key}"}
    body = {"task": "generate", "input": {"prompt": "a quiet tenant's job"}}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=120) as client:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            began = time.perf_counter()
            (await client.post("/v1/generations", json=body)).raise_for_status()
            latencies.append(time.perf_counter() - began)
            await asyncio.sleep(gap)
    return latencies


async def flooder(url: str, key: str, stop: asyncio.Event, jobs: int) -> int:
    """Send batches back to back until ``stop``; how many jobs were accepted."""
    headers = {"Authorization": f"Bearer {key}"}
    accepted = 0
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600) as client:
        while not stop.is_set():
            batch = [{"task": "generate", "input": {"prompt": f"flood {i}"}} for i in range(jobs)]
            response = await client.post("/v1/generations/batch", json={"jobs": batch})
            response.raise_for_status()
            accepted += sum(1 for r in response.json()["results"] if "job_id" in r)
    return accepted


async def phase(served: Served, keys: dict[str, str], args: argparse.Namespace, *, flood: bool):
    stop = asyncio.Event()
    flooders = [
        asyncio.create_task(flooder(served.url, keys[FLOOD], stop, args.batch_jobs))
        for _ in range(args.flooders if flood else 0)
    ]
    if flooders:
        await asyncio.sleep(1.0)  # the flood is under way before the quiet tenant starts
    began = time.perf_counter()
    latencies = await quiet_tenant(served.url, keys[QUIET], args.seconds, args.gap_ms / 1000)
    stop.set()
    accepted = sum(await asyncio.gather(*flooders))
    elapsed = time.perf_counter() - began + (1.0 if flooders else 0.0)
    return latencies, (accepted / elapsed if flooders else None)


_QUIET_JOBS = (
    "SELECT created_at, completed_at FROM jobs WHERE tenant_id = {p} AND created_at >= {p}"
)


def completions(served: Served, database: str | None, since: float) -> list[float] | None:
    """The quiet tenant's jobs accepted since ``since``: accept -> SUCCEEDED, once all
    have finished (None if they do not within FINISH_SECONDS)."""
    deadline = time.monotonic() + FINISH_SECONDS
    while time.monotonic() < deadline:
        if database is None:
            with contextlib.closing(sqlite3.connect(served.directory / "ferryman.db")) as conn:
                rows = conn.execute(_QUIET_JOBS.format(p="?"), (QUIET, since)).fetchall()
        else:
            with psycopg.connect(database) as pg:
                rows = pg.execute(_QUIET_JOBS.format(p="%s"), (QUIET, since)).fetchall()
        if rows and all(done is not None for _, done in rows):
            return [done - created for created, done in rows]
        time.sleep(0.5)
    return None


@contextlib.contextmanager
def engine(name: str, args: argparse.Namespace) -> Iterator[dict[str, str]]:
    """The settings that put ``serve`` on the engine, and its database URL (or none)."""
    if name == "sqlite":
        yield {"sqlite_synchronous": "FULL"}
        return
    with scratch_database(args.postgres_url, "ferryman_bench_fairness") as url:
        yield {"database_url": url}


def run_tree(tree: Path, engine_name: str, args: argparse.Namespace) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with (
        engine(engine_name, args) as settings,
        serve(
            tree,
            command="serve",
            tenant_rate_per_second=0,
            tenant_read_rate_per_second=0,
            log_level="WARNING",
            **settings,
        ) as served,
    ):
        keys = {QUIET: served.key(QUIET), FLOOD: served.key(FLOOD)}
        for name, flood in (("alone", False), ("flood", True)):
            since = time.time()
            latencies, flood_rate = asyncio.run(phase(served, keys, args, flood=flood))
            done = completions(served, settings.get("database_url"), since)
            figures[name] = {
                "submit": summary_ms(latencies),
                "submits": len(latencies),
                "completion_p50_ms": None
                if done is None
                else round(statistics.median(done) * 1000, 1),
                "completion_p99_ms": None
                if done is None
                else round(percentile(done, 0.99) * 1000, 1),
                "flood_jobs_per_s": None if flood_rate is None else round(flood_rate),
            }
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="NAME=PATH of a ferryman checkout")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    parser.add_argument("--flooders", type=int, default=2)
    parser.add_argument("--batch-jobs", type=int, default=1000)
    parser.add_argument("--engines", default="sqlite", help="sqlite, postgres, or both")
    parser.add_argument("--postgres-url", default="postgresql://postgres@127.0.0.1:5432")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = {
        "seconds": args.seconds,
        "flooders": args.flooders,
        "batch_jobs": args.batch_jobs,
        "engines": {
            engine_name: {
                name: run_tree(path, engine_name, args) for name, path in trees(args.tree).items()
            }
            for engine_name in args.engines.split(",")
        },
    }
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(
        f"quiet tenant: one submit every {args.gap_ms:g} ms for {args.seconds:g} s; "
        f"flood: {args.flooders} clients of {args.batch_jobs}-job batches"
    )
    for engine_name, by_tree in results["engines"].items():
        for name, tree in by_tree.items():
            for phase_name, f in tree.items():
                s = f["submit"]
                flood = f", flood {f['flood_jobs_per_s']} jobs/s" if f["flood_jobs_per_s"] else ""
                print(
                    f"{engine_name} {name:>5} {phase_name:>5}: submit p50 {s['p50_ms']} "
                    f"p99 {s['p99_ms']} max {s['max_ms']} ms ({f['submits']}); completion "
                    f"p50 {f['completion_p50_ms']} p99 {f['completion_p99_ms']} ms{flood}"
                )


if __name__ == "__main__":
    main()
