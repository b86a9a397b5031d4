"""How long a write waits for another process's SQLite write lock.

Several processes (``--processes``, 3: an API and two workers) commit small
transactions to one WAL file at synchronous=FULL, each pausing briefly between
commits as a process between group commits does. Each process times how long its
``BEGIN IMMEDIATE`` took, in two modes, run one after the other on fresh files:

- ``sqlite``: the connection's busy timeout, so SQLite's own busy handler waits (it
  sleeps 1 ms on the first refusal, then 2, 5, 10 ... up to 100 ms a try);
- ``ferryman``: no busy timeout, ``adapters/sqlite/writer.begin_immediate`` retries in
  0.2 ms, doubling to 2 ms.

Prints the wait's p50/p90/p99 and the commits per second of all processes together.
Run: ``.venv/bin/python bench/sqlite_lock_wait.py [--seconds 3] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ferryman.adapters.sqlite.writer import begin_immediate

MODES = ("sqlite", "ferryman")
PATIENCE_SECONDS = 10.0
ROW_BYTES = 200


def committer(path: str, mode: str, seconds: float, pause: float, out: Any) -> None:
    """One process: commit until time is up; put (commits, sorted waits in seconds)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous = FULL")
    timeout_ms = int(PATIENCE_SECONDS * 1000) if mode == "sqlite" else 0
    conn.execute(f"PRAGMA busy_timeout = {timeout_ms}")
    waits: list[float] = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        started = time.perf_counter()
        if mode == "sqlite":
            conn.execute("BEGIN IMMEDIATE")
        else:
            begin_immediate(conn, patience_seconds=PATIENCE_SECONDS)
        waits.append(time.perf_counter() - started)
        conn.execute("INSERT INTO rows (data) VALUES (?)", (os.urandom(ROW_BYTES),))
        conn.execute("COMMIT")
        time.sleep(pause)
    conn.close()
    out.put((len(waits), sorted(waits)))


def run_mode(mode: str, args: argparse.Namespace, directory: Path) -> dict[str, float]:
    path = directory / f"{mode}.db"
    setup = sqlite3.connect(path)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, data BLOB)")
    setup.close()
    out: Any = multiprocessing.Queue()
    processes = [
        multiprocessing.Process(
            target=committer, args=(str(path), mode, args.seconds, args.pause_ms / 1000, out)
        )
        for _ in range(args.processes)
    ]
    for process in processes:
        process.start()
    # A process that died puts nothing: give up rather than wait for ever.
    results = [out.get(timeout=args.seconds + 60) for _ in processes]
    for process in processes:
        process.join()
    waits = sorted(w for _, ws in results for w in ws)
    commits = sum(n for n, _ in results)

    def at(q: float) -> float:
        return waits[min(len(waits) - 1, int(len(waits) * q))] * 1000

    return {
        f"{mode}_commits_per_s": commits / args.seconds,
        f"{mode}_wait_p50_ms": at(0.5),
        f"{mode}_wait_p90_ms": at(0.9),
        f"{mode}_wait_p99_ms": at(0.99),
        f"{mode}_wait_mean_ms": statistics.fmean(waits) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--pause-ms", type=float, default=0.5, help="between one's commits")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary dir")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    args = parser.parse_args()
    if args.processes < 1 or args.seconds <= 0 or args.pause_ms < 0:
        parser.error("--processes must be at least 1, --seconds above 0, --pause-ms not below 0")
    figures: dict[str, Any] = {"processes": args.processes, "seconds": args.seconds}
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        for mode in MODES:
            figures.update(run_mode(mode, args, Path(directory)))
    if args.json:
        print(json.dumps(figures))
        return
    for mode in MODES:
        print(
            f"{mode:>9}: {figures[f'{mode}_commits_per_s']:8.0f} commits/s, lock wait "
            f"p50 {figures[f'{mode}_wait_p50_ms']:.3f} ms, "
            f"p90 {figures[f'{mode}_wait_p90_ms']:.3f} ms, "
            f"p99 {figures[f'{mode}_wait_p99_ms']:.3f} ms"
        )


if __name__ == "__main__":
    main()
