"""The producer of one ferryman run, through the project's own client; one JSON line out.

Run by ferryman's virtualenv: ``python ferryman_producer.py MODE --jobs N --url URL``
with the key in ``FERRYMAN_API_KEY``. MODE is ``sequential`` (``ferryman.Client``, one
submit after another), ``concurrent`` (``ferryman.AsyncClient``, ``--concurrency``
submits in flight) or ``batch`` (``Client.submit_many`` with up to ``--batch-size``
jobs a call). A build without ``submit_many`` prints ``{"unavailable": ...}``.
``accept-only`` submits as ``sequential`` to a service with no worker and waits for
nothing after the last 202: its "completion" is that 202.

The producer's CPU is counted over the submit loop only. Completion is then polled
cheaply (is any job still QUEUED, PROCESSING or RETRY_SCHEDULED?), and the last
completion is the latest ``completed_at`` the service recorded among the jobs this
run created, so the polling interval does not inflate the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sys
import time
from typing import TYPE_CHECKING, Any

from ferryman import AsyncClient, Client, JobStatus

if TYPE_CHECKING:
    from collections.abc import Sequence

POLL_SECONDS = 0.05
TIMEOUT_SECONDS = 600.0
PAGE = 200
UNFINISHED = (JobStatus.QUEUED, JobStatus.PROCESSING, JobStatus.RETRY_SCHEDULED)
FAILED = (JobStatus.FAILED, JobStatus.CANCELLED)


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def job_input(tag: str, i: int) -> dict[str, Any]:
    return {"prompt": f"benchmark job {tag}-{i}"}


def submit_sequential(client: Client, n: int, tag: str, _args: argparse.Namespace) -> None:
    for i in range(n):
        client.submit("generate", job_input(tag, i))


def submit_batches(client: Client, n: int, tag: str, args: argparse.Namespace) -> None:
    submit_many = client.submit_many  # type: ignore[attr-defined]
    for start in range(0, n, args.batch_size):
        items = [
            {"task": "generate", "input": job_input(tag, i)}
            for i in range(start, min(n, start + args.batch_size))
        ]
        submit_many(items)


async def submit_concurrently(url: str, key: str, n: int, tag: str, concurrency: int) -> None:
    """``concurrency`` submits in flight at all times, over one client's connection pool."""
    numbers = iter(range(n))
    async with AsyncClient(url, key) as client:

        async def lane() -> None:
            for i in numbers:
                await client.submit("generate", job_input(tag, i))

        await asyncio.gather(*(lane() for _ in range(concurrency)))


def wait_until_finished(client: Client) -> None:
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while any(client.list(status=status, limit=1).data for status in UNFINISHED):
        if time.monotonic() > deadline:
            raise TimeoutError(f"jobs still unfinished after {TIMEOUT_SECONDS} s")
        time.sleep(POLL_SECONDS)
    for status in FAILED:
        if client.list(status=status, limit=1).data:
            raise RuntimeError(f"a job ended {status.value}")


def completion_times(client: Client, since: float) -> list[float]:
    """completed_at of every SUCCEEDED job created at or after ``since`` (newest first)."""
    times: list[float] = []
    cursor: str | None = None
    while True:
        page = client.list(status=JobStatus.SUCCEEDED, limit=PAGE, cursor=cursor)
        for job in page.data:
            if job.created_at is None or job.created_at.timestamp() < since:
                return times
            if job.completed_at is not None:
                times.append(job.completed_at.timestamp())
        if page.next_cursor is None:
            return times
        cursor = page.next_cursor


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("sequential", "concurrent", "batch", "accept-only"))
    parser.add_argument("--jobs", type=int, required=True)
    parser.add_argument("--tag", default="m")
    parser.add_argument("--url", required=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--batch-size", type=int, default=1000)
    args = parser.parse_args(argv)
    key = os.environ["FERRYMAN_API_KEY"]
    client = Client(args.url, key, timeout_seconds=60)
    if args.mode == "batch" and not hasattr(client, "submit_many"):
        print(json.dumps({"unavailable": "Client.submit_many is not in this build"}))
        return 0
    cpu_before = cpu_seconds()
    first_submit = time.time()
    if args.mode == "concurrent":
        asyncio.run(submit_concurrently(args.url, key, args.jobs, args.tag, args.concurrency))
    elif args.mode == "batch":
        submit_batches(client, args.jobs, args.tag, args)
    else:
        submit_sequential(client, args.jobs, args.tag, args)
    last_submit = time.time()
    producer_cpu = cpu_seconds() - cpu_before
    if args.mode == "accept-only":
        print("FINISHED", flush=True)
        sys.stdin.readline()
        client.close()
        # Every submit above returned its 202 (a refusal raises): n jobs accepted.
        report = {
            "first_submit": first_submit,
            "last_submit": last_submit,
            "last_completion": last_submit,
            "completed": args.jobs,
            "producer_cpu_s": producer_cpu,
        }
        print(json.dumps(report), flush=True)
        return 0
    wait_until_finished(client)
    # Tell the benchmark every job is done, and wait until it has read the CPU counters:
    # paging through the jobs' timestamps below is the instrument, not ferryman's work.
    print("FINISHED", flush=True)
    sys.stdin.readline()
    completed = completion_times(client, first_submit)
    client.close()
    report = {
        "first_submit": first_submit,
        "last_submit": last_submit,
        "last_completion": max(completed),
        "completed": len(completed),
        "producer_cpu_s": producer_cpu,
    }
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
