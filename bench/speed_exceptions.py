"""What each speed exception buys: the peers benchmark's ferryman rows, ours against the
library's own way, alternated in one run.

The exceptions (docs/design-notes.md, "Speed exceptions"), each with the rows it was
made for; the library's way is put in by ``bench/library_way.py`` in the server's and
the producer's processes, so production code carries no switch:

hot_path      the submit route without FastAPI's router: serve single (32 in flight),
              api accept-only (sequential)
client_http   the clients' own HTTP/1.1 transport: serve sequential, serve single
sharded_pool  https's eight httpx pools (``client/pool.py``), measured on plain http
              against httpx's one pool: serve single
lock_wait     the SQLite writer's own short lock retries: split sequential, split
              single, split batch

One more was measured and removed (a head and body in one send): its way is in this
script and ``library_way.py`` at 31dc8b8.

Each (exception, row) pair runs ``--pairs`` times ours and the library's way, the order
flipped every pair (ours first, then library first, ...), each a whole ``bench/peers.py``
ferryman run (fresh processes and store, a warm-up, ``--jobs`` measured). Figures are
medians with min-max; "gain" is ours over the library's way in jobs/s, and the library's
CPU per 1,000 jobs over ours. An exception that gains less than 10% on every row it was
made for goes back to the library's way (issue 19).

Run: ``.venv/bin/python bench/speed_exceptions.py [--jobs 5000] [--pairs 2]
[--only hot_path,lock_wait] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import peer_systems
import peers

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

LAUNCHER = str(Path(__file__).resolve().with_name("library_way.py"))
ROWS: dict[str, tuple[str, ...]] = {
    "hot_path": ("ferryman-single", "ferryman-accept"),
    "client_http": ("ferryman-sequential", "ferryman-single"),
    "sharded_pool": ("ferryman-single",),
    "lock_wait": ("ferryman-split", "ferryman-split-single", "ferryman-split-batch"),
}
# The launcher's ways (bench/library_way.py) for ours and for the library's way, where
# they are not "ours" and the exception's own name.
WAYS: dict[str, tuple[str, str]] = {"sharded_pool": ("sharded_pool", "client_http")}
WORTH_IT = 1.10


def _launched(ways: str) -> None:
    """Every ferryman process the peers benchmark starts (server, worker, key creation,
    producer) runs through the launcher with ``ways`` put back to the library's way."""

    def ferryman_argv(*args: str) -> list[str]:
        return [sys.executable, LAUNCHER, ways, "-m", "ferryman", *args]

    produce = _ORIGINAL_PRODUCE

    def produce_through_launcher(argv: Sequence[str], *rest: Any, **kw: Any) -> dict[str, Any]:
        script = Path(argv[1]).resolve()
        return produce([argv[0], LAUNCHER, ways, str(script), *argv[2:]], *rest, **kw)

    peers._ferryman = ferryman_argv
    peer_systems.produce = produce_through_launcher  # type: ignore[assignment]


_ORIGINAL_PRODUCE = peer_systems.produce


def one_run(exception: str, row: str, way: str, args: argparse.Namespace) -> dict[str, float]:
    ours, library = WAYS.get(exception, ("ours", exception))
    _launched(library if way == "library" else ours)
    figures = peers.run_ferryman(row, args)
    if figures is None:
        raise RuntimeError(f"{row} is unavailable in this build")
    return {
        "jobs_per_s": figures.jobs_per_s,
        "cpu_s_per_1000": figures.cpu_s_per_1000,
        "producer_cpu_ms_per_job": figures.producer_cpu_s * 1000 / figures.jobs,
        "service_cpu_ms_per_job": figures.service_cpu_s * 1000 / figures.jobs,
    }


def spread(values: Sequence[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: Mapping[str, list[dict[str, float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for way, figures in runs.items():
        out[way] = {k: spread([f[k] for f in figures]) for k in figures[0]}
    ours, library = out["ours"], out["library"]
    out["gain_jobs_per_s"] = ours["jobs_per_s"]["median"] / library["jobs_per_s"]["median"]
    out["gain_cpu"] = library["cpu_s_per_1000"]["median"] / ours["cpu_s_per_1000"]["median"]
    return out


def run(args: argparse.Namespace, log: Any) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for exception in args.only:
        results[exception] = {}
        for row in ROWS[exception]:
            runs: dict[str, list[dict[str, float]]] = {"ours": [], "library": []}
            for pair in range(args.pairs):
                order = ("ours", "library") if pair % 2 == 0 else ("library", "ours")
                for way in order:
                    figures = one_run(exception, row, way, args)
                    runs[way].append(figures)
                    log(
                        f"{exception} {row} {way}: {figures['jobs_per_s']:.0f} jobs/s, "
                        f"{figures['cpu_s_per_1000']:.2f} CPU-s/1000"
                    )
            results[exception][row] = {**summarise(runs), "runs": runs}
        gains = [max(r["gain_jobs_per_s"], r["gain_cpu"]) for r in results[exception].values()]
        results[exception]["keep"] = max(gains) >= WORTH_IT
    return results


def print_table(results: Mapping[str, Any]) -> None:
    print(
        "exception     row                    ours jobs/s (min-max)  library jobs/s (min-max)"
        "  gain   CPU-s/1000 ours / library"
    )
    for exception, rows in results.items():
        for row, r in rows.items():
            if row == "keep":
                continue
            o, lib = r["ours"], r["library"]
            print(
                f"{exception:13} {row:22} "
                f"{o['jobs_per_s']['median']:6.0f} ({o['jobs_per_s']['min']:.0f}-"
                f"{o['jobs_per_s']['max']:.0f})       "
                f"{lib['jobs_per_s']['median']:6.0f} ({lib['jobs_per_s']['min']:.0f}-"
                f"{lib['jobs_per_s']['max']:.0f})          "
                f"{r['gain_jobs_per_s']:.2f}x  "
                f"{o['cpu_s_per_1000']['median']:.2f} / {lib['cpu_s_per_1000']['median']:.2f}"
            )
        print(f"{exception}: {'keep' if rows['keep'] else 'back to the library way'}")


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--pairs", type=int, default=2, help="ours/library pairs per row")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up jobs per run (jobs/10)")
    parser.add_argument(
        "--only", type=lambda s: s.split(","), default=list(ROWS), help="exceptions to measure"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--split-workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--log-dir", type=Path, default=None)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    unknown = [e for e in args.only if e not in ROWS]
    if unknown:
        parser.error(f"unknown exceptions {unknown}; known: {', '.join(ROWS)}")
    if args.warmup is None:
        args.warmup = max(50, args.jobs // 10)
    return args


def main(argv: Sequence[str]) -> int:
    args = parse_args(argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    began = time.monotonic()
    load = os.getloadavg()[0]
    results = run(args, log)
    settings = {
        "jobs": args.jobs,
        "pairs": args.pairs,
        "load_at_start": load,
        "load_at_end": os.getloadavg()[0],
        "wall_seconds": time.monotonic() - began,
        "ferryman_env": peers.FERRYMAN_ENV,
    }
    if args.json:
        print(json.dumps({"settings": settings, "exceptions": results}, indent=2))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
