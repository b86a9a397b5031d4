"""In flight: one worker process holding thousands of slow model calls at once.

Submits ``--calls`` jobs whose sim model answers after ``--latency-ms`` into a fresh
SQLite file, then runs ONE worker with that much concurrency in this process, and
samples while it runs: calls inside the provider's invoke() (counted by a wrapper
around the sim, so it is the real number of concurrent calls), the worker's own
in-flight count, and the process's RSS. Ends when every job has SUCCEEDED.

Run: ``.venv/bin/python bench/inflight.py [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ferryman.core.lease import LeasePolicy
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.limiter import CallBudget
from harness import (
    current_rss_mb,
    fmt,
    open_stack,
    peak_rss_mb,
    print_table,
    quiet_logs,
    read_job_times,
    submit_all,
    wait_all_succeeded,
)

if TYPE_CHECKING:
    from ferryman.ports.provider import ModelRequest, ModelResponse
    from ferryman.services.worker import Worker

TARGET_PEAK_RSS_MB = 250.0
SAMPLE_SECONDS = 0.05


class CountingProvider:
    """The sim model, counting the invoke() calls that are running right now."""

    def __init__(self, inner: SimulatedProvider) -> None:
        self._inner = inner
        self.current = 0
        self.peak = 0
        self.peak_at: float | None = None

    @property
    def name(self) -> str:
        return self._inner.name

    def serves(self, model: str) -> bool:
        return self._inner.serves(model)

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        self.current += 1
        if self.current > self.peak:
            self.peak = self.current
            self.peak_at = time.perf_counter()
        try:
            return await self._inner.invoke(request, timeout_seconds=timeout_seconds)
        finally:
            self.current -= 1


@dataclass(slots=True)
class Trace:
    """tracemalloc snapshots before the worker starts and once every call is in flight."""

    calls: int
    before: tracemalloc.Snapshot
    at_peak: tracemalloc.Snapshot | None = None

    def report(self, limit: int = 25) -> None:
        """What each call in flight holds, by the line that allocated it (stderr)."""
        if self.at_peak is None:
            print("tracemalloc: the worker never had every call in flight", file=sys.stderr)
            return
        diff = self.at_peak.compare_to(self.before, "lineno")
        total = sum(d.size_diff for d in diff)
        print(f"tracemalloc: {total / self.calls:,.0f} B per call in flight", file=sys.stderr)
        for d in diff[:limit]:
            frame = d.traceback[0]
            print(
                f"  {d.size_diff / self.calls:8,.0f} B/call {d.count_diff / self.calls:6.2f} "
                f"blocks/call  {frame.filename}:{frame.lineno}",
                file=sys.stderr,
            )


@dataclass(slots=True)
class Samples:
    worker_in_flight_max: int = 0
    rss_max_mb: float = 0.0
    count: int = 0


async def sample(
    worker: Worker, samples: Samples, stop: asyncio.Event, trace: Trace | None = None
) -> None:
    while not stop.is_set():
        if trace is not None and trace.at_peak is None and worker.in_flight >= trace.calls:
            trace.at_peak = tracemalloc.take_snapshot()
        samples.worker_in_flight_max = max(samples.worker_in_flight_max, worker.in_flight)
        samples.rss_max_mb = max(samples.rss_max_mb, current_rss_mb())
        samples.count += 1
        try:
            async with asyncio.timeout(SAMPLE_SECONDS):
                await stop.wait()
        except TimeoutError:
            pass


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    start_load = os.getloadavg()[0]
    path = directory / "inflight.db"
    latency_s = args.latency_ms / 1000
    # The provider timeout must exceed the sim's latency, or every call would time out.
    provider_timeout = max(30.0, latency_s * 2)
    lease = LeasePolicy(
        lease_seconds=args.lease_seconds, visibility_timeout_seconds=args.lease_seconds
    )
    async with open_stack(path, synchronous=args.synchronous, results=args.results) as stack:
        submitted = time.perf_counter()
        await submit_all(stack.intake(), args.calls, batch=100, latency_ms=args.latency_ms)
        submit_seconds = time.perf_counter() - submitted
        rss_before_mb = current_rss_mb()
        trace = None
        if args.tracemalloc:
            tracemalloc.start()
            trace = Trace(args.calls, tracemalloc.take_snapshot())
        provider = CountingProvider(SimulatedProvider())
        worker = stack.worker(
            providers=[provider],
            concurrency=args.calls,
            lease=lease,
            provider_timeout_seconds=provider_timeout,
            # As [providers.sim] max_concurrency = calls would: the call limiter's
            # default (64) would otherwise be the limit measured.
            budgets={provider.name: CallBudget(max_concurrency=args.calls)},
        )
        stop, done = asyncio.Event(), asyncio.Event()
        samples = Samples()
        sampler = asyncio.create_task(sample(worker, samples, done, trace))
        started = time.perf_counter()
        running = asyncio.create_task(worker.run(stop))
        try:
            await wait_all_succeeded(path, args.calls, timeout_seconds=latency_s + 170)
        finally:
            finished = time.perf_counter()
            stop.set()
            await running
            done.set()
            await sampler
    if trace is not None:
        trace.report()
        tracemalloc.stop()
    times = read_job_times(path)
    return {
        "peak_rss_mb": peak_rss_mb(),
        "max_in_flight": provider.peak,
        "calls": args.calls,
        "all_in_flight_at_once": provider.peak == args.calls,
        "seconds_to_all_in_flight": (provider.peak_at or started) - started,
        "seconds_to_finish": finished - started,
        "latency_ms": args.latency_ms,
        "max_worker_in_flight": samples.worker_in_flight_max,
        "rss_before_worker_mb": rss_before_mb,
        "rss_sampled_max_mb": samples.rss_max_mb,
        "rss_per_call_kb": (samples.rss_max_mb - rss_before_mb) * 1024 / args.calls,
        "claim_spread_seconds": max(times.claimed) - min(times.claimed),
        "submit_seconds": submit_seconds,
        "target_peak_rss_mb": TARGET_PEAK_RSS_MB,
        "settings": {
            "synchronous": args.synchronous,
            "results": args.results,
            "provider_timeout_seconds": provider_timeout,
            "lease_seconds": lease.lease_seconds,
            "heartbeat_seconds": lease.heartbeat_seconds,
            "cpus": os.cpu_count(),
            # Other work on the machine skews every figure: say how busy it was.
            "load_average_1m": {"start": start_load, "end": os.getloadavg()[0]},
            "python": sys.version.split()[0],
        },
    }


def print_human(out: dict[str, Any]) -> None:
    calls = out["calls"]
    rows = [
        ("max model calls in flight", f"{out['max_in_flight']:,} of {calls:,}"),
        ("  reached after", f"{fmt(out['seconds_to_all_in_flight'], 2)} s"),
        ("  worker.in_flight (sampled max)", f"{out['max_worker_in_flight']:,}"),
        ("peak RSS", f"{fmt(out['peak_rss_mb'])} MB  (target < {TARGET_PEAK_RSS_MB:.0f} MB)"),
        ("  RSS before the worker started", f"{fmt(out['rss_before_worker_mb'])} MB"),
        ("  RSS per call in flight", f"{fmt(out['rss_per_call_kb'])} KiB"),
        ("time to finish (worker start -> all SUCCEEDED)", f"{fmt(out['seconds_to_finish'], 2)} s"),
        ("  first claim -> last claim", f"{fmt(out['claim_spread_seconds'], 2)} s"),
        ("submitting the jobs took", f"{fmt(out['submit_seconds'], 2)} s"),
    ]
    title = f"ferryman in flight: {calls:,} sim calls of {out['latency_ms']:,} ms, one worker"
    print_table(title, rows)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=2000, help="jobs, and worker concurrency")
    parser.add_argument("--latency-ms", type=int, default=10_000, help="sim latency per call")
    parser.add_argument(
        "--lease-seconds",
        type=float,
        default=60.0,
        help="lease and visibility; heartbeats renew every third of it",
    )
    parser.add_argument("--synchronous", choices=["FULL", "NORMAL"], default="FULL")
    parser.add_argument("--results", choices=["file", "db"], default="file")
    parser.add_argument("--dir", type=Path, default=None, help="parent of the temporary dir")
    parser.add_argument("--json", action="store_true", help="print one JSON object only")
    parser.add_argument(
        "--tracemalloc",
        action="store_true",
        help="print what each call in flight holds, by allocating line (slower; RSS is off)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quiet_logs()
    with tempfile.TemporaryDirectory(prefix="ferryman-bench-", dir=args.dir) as tmp:
        out = asyncio.run(measure(args, Path(tmp)))
    if args.json:
        print(json.dumps(out))
    else:
        print_human(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
