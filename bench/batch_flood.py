"""Large batch bodies against one API process: does /healthz still answer, and what
memory do they take? (issue 18, item 8)

For each source tree (``--tree NAME=PATH``, see bench/served.py): a fresh
``ferryman api`` (SQLite, no worker in the process, rate limits off), then
``--clients`` (20) clients each send one batch of ``--jobs`` (1,000) ``generate`` jobs
whose body is ``--body-mib`` (16, just under the batch body limit) at the same
moment. Meanwhile another process asks ``GET /healthz`` on a connection of its own
every 10 ms and samples the server's resident memory every 20 ms, from before the
batches start until the last answer.

Prints per tree: /healthz latency during the flood (p50, p99, max), the flood's
duration, how many batches were answered 200, and the server's memory before, at
its peak, and after.

Run: ``.venv/bin/python bench/batch_flood.py [--tree old=/tmp/ferryman-main --tree new=.]
[--clients 20] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import time
from typing import TYPE_CHECKING, Any

import httpx

from served import rss_mib, serve, summary_ms, trees

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event
    from pathlib import Path

PROBE_SECONDS = 0.01
SAMPLE_SECONDS = 0.02
# Room under the 16 MiB limit for the envelope and each job's fields.
BODY_MARGIN_BYTES = 64 * 1024


def batch_body(jobs: int, body_bytes: int) -> bytes:
    prompt_chars = (body_bytes - BODY_MARGIN_BYTES) // jobs - 60
    items = [
        {"task": "generate", "input": {"prompt": f"{i} " + "w" * prompt_chars}} for i in range(jobs)
    ]
    return json.dumps({"jobs": items}).encode()


def probe(url: str, pid: int, stop: Event, out: Any) -> None:
    """In its own process: /healthz latencies and the server's memory until ``stop``."""
    latencies: list[float] = []
    memory: list[float] = []
    next_sample = 0.0
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            began = time.perf_counter()
            client.get(f"{url}/healthz").raise_for_status()
            latencies.append(time.perf_counter() - began)
            if began >= next_sample:
                memory.append(rss_mib(pid))
                next_sample = began + SAMPLE_SECONDS
            time.sleep(PROBE_SECONDS)
    out.put((latencies, memory))


async def flood(url: str, key: str, body: bytes, clients: int) -> list[int]:
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    async def one() -> int:
        async with httpx.AsyncClient(timeout=600) as client:
            response = await client.post(
                f"{url}/v1/generations/batch", content=body, headers=headers
            )
            return response.status_code

    return list(await asyncio.gather(*(one() for _ in range(clients))))


def run_tree(tree: Path, args: argparse.Namespace, body: bytes) -> dict[str, Any]:
    with serve(
        tree,
        command="api",
        tenant_rate_per_second=0,
        tenant_read_rate_per_second=0,
        log_level="WARNING",
    ) as served:
        key = served.key("flood")
        idle_mib = rss_mib(served.pid)
        stop = multiprocessing.Event()
        out: Any = multiprocessing.Queue()
        prober = multiprocessing.Process(target=probe, args=(served.url, served.pid, stop, out))
        prober.start()
        time.sleep(0.2)  # a few idle probes first: the figures cover the whole flood
        began = time.perf_counter()
        statuses = asyncio.run(flood(served.url, key, body, args.clients))
        seconds = time.perf_counter() - began
        stop.set()
        latencies, memory = out.get(timeout=120)
        prober.join()
        after_mib = rss_mib(served.pid)
    return {
        "healthz": summary_ms(latencies),
        "probes": len(latencies),
        "flood_seconds": round(seconds, 2),
        "batches_ok": statuses.count(200),
        "statuses": sorted(set(statuses)),
        "rss_idle_mib": round(idle_mib, 1),
        "rss_peak_mib": round(max(memory, default=idle_mib), 1),
        "rss_after_mib": round(after_mib, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", action="append", help="NAME=PATH of a ferryman checkout")
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--body-mib", type=float, default=16.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    body = batch_body(args.jobs, int(args.body_mib * 1024 * 1024))
    results = {"body_bytes": len(body), "clients": args.clients, "jobs": args.jobs, "trees": {}}
    for name, path in trees(args.tree).items():
        results["trees"][name] = run_tree(path, args, body)
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print(f"{args.clients} clients, one batch each of {args.jobs} jobs in {len(body):,} bytes")
    for name, figures in results["trees"].items():
        h = figures["healthz"]
        print(
            f"{name:>6}: /healthz p50 {h['p50_ms']} ms, p99 {h['p99_ms']} ms, "
            f"max {h['max_ms']} ms over {figures['probes']} probes; "
            f"flood {figures['flood_seconds']} s, {figures['batches_ok']} batches 200; "
            f"RSS {figures['rss_idle_mib']} -> peak {figures['rss_peak_mib']} "
            f"-> after {figures['rss_after_mib']} MiB"
        )


if __name__ == "__main__":
    main()
