"""A list page of large results: how big the answer is and how long it holds the loop.

Fills a fresh SQLite file (results as segment files) with ``--jobs`` SUCCEEDED jobs
whose results are about ``--result-kb`` KB each, then reads
``GET /v1/generations?limit=200`` through the real app (httpx over ASGI), timing it
and the longest stall of a 1 ms ticker on the same event loop while it runs:

- before: every result decoded and the whole page encoded with the stdlib, as the
  list did before it had a byte budget (emulated in this script);
- after: the app as it is: the page stops at ``list_max_bytes`` and stored results
  are spliced in as raw JSON by orjson.

Run: ``.venv/bin/python bench/list_page.py [--jobs 200] [--result-kb 100]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from ferryman.core.results import result_key
from ferryman.http.app import AppDeps, create_app
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.access import ApiKeys
from ferryman.services.intake import SubmitRequest
from ferryman.services.jobs import DEFAULT_LIST_MAX_BYTES, JobQueries
from ferryman.services.operations import Operations
from ferryman.services.usage import UsageReports
from harness import TENANT, open_stack, quiet_logs, wait_all_succeeded

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from harness import Stack

ROUNDS = 5


async def fill(stack: Stack, path: Path, jobs: int, result_kb: int) -> None:
    intake = stack.intake()
    # The sim echoes the prompt (at most 100,000 characters) as {"text": "echo: ..."}.
    prompt = "w " * min(result_kb * 500, 49_990)
    for i in range(jobs):
        request = SubmitRequest(task="generate", input={"prompt": f"{i} {prompt}"})
        await intake.submit(tenant_id=TENANT, request=request)
    worker = stack.worker(providers=[SimulatedProvider()], concurrency=32)
    await worker.run_until_idle()
    await wait_all_succeeded(path, jobs, timeout_seconds=600)


async def worst_stall_ms(request: Callable[[], Awaitable[Any]]) -> tuple[float, float, Any]:
    """Run ``request`` while a 1 ms ticker measures how late the loop wakes it."""
    loop = asyncio.get_running_loop()
    stalls: list[float] = []
    done = asyncio.Event()

    async def tick() -> None:
        while not done.is_set():
            before = loop.time()
            await asyncio.sleep(0.001)
            stalls.append((loop.time() - before - 0.001) * 1000)

    ticker = asyncio.create_task(tick())
    began = time.perf_counter()
    result = await request()
    elapsed_ms = (time.perf_counter() - began) * 1000
    done.set()
    await ticker
    return elapsed_ms, max(stalls, default=0.0), result


async def before(stack: Stack) -> bytes:
    """The old list: every result decoded, the page encoded by the stdlib on the loop."""
    page = await stack.store.store.list_jobs(tenant_id=TENANT, limit=200)
    items = []
    for job in page.jobs:
        assert job.result_ref is not None
        assert job.attempt_id is not None
        key = result_key(job.tenant_id, job.job_id, job.attempt_id)
        data = await stack.results.get(job.result_ref, key=key)
        items.append({"job_id": job.job_id, "result": json.loads(data)})
    body = {"data": items, "next_cursor": page.next_cursor}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


async def measure(args: argparse.Namespace) -> None:
    quiet_logs()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.db"
        async with open_stack(path, synchronous="NORMAL", results="file") as stack:
            await fill(stack, path, args.jobs, args.result_kb)
            keys = ApiKeys(stack.keys, stack.clock)
            token = await keys.create(TENANT)
            jobs = JobQueries(
                store=stack.store.store,
                ledger=stack.store,
                results=stack.results,
                clock=stack.clock,
                list_max_bytes=args.list_max_bytes,
            )
            app = create_app(
                AppDeps(
                    intake=stack.intake(),
                    jobs=jobs,
                    operations=Operations(
                        store=stack.store.store,
                        ledger=stack.store,
                        queue=stack.queue,
                        control=stack.control,
                        clock=stack.clock,
                    ),
                    api_keys=keys,
                    usage=UsageReports(store=stack.store.store, clock=stack.clock),
                    clock=stack.clock,
                )
            )
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(
                transport=transport,
                base_url="http://bench",
                headers={"Authorization": f"Bearer {token}"},
            ) as client:
                rows = [
                    await _rounds("before (all inlined, stdlib)", lambda: before(stack)),
                    await _rounds(
                        f"after (budget {args.list_max_bytes // 1024} KiB, orjson)",
                        lambda: _get_page(client),
                    ),
                ]
    _print(rows)


async def _get_page(client: httpx.AsyncClient) -> bytes:
    response = await client.get("/v1/generations", params={"limit": 200})
    response.raise_for_status()
    return response.content


async def _rounds(label: str, request: Callable[[], Awaitable[bytes]]) -> list[str]:
    times, stalls, body = [], [], b""
    for _ in range(ROUNDS):
        elapsed, stall, body = await worst_stall_ms(request)
        times.append(elapsed)
        stalls.append(stall)
    items = len(json.loads(body)["data"])
    return [
        label,
        f"{len(body):,}",
        str(items),
        f"{statistics.median(times):.1f}",
        f"{max(stalls):.1f}",
    ]


def _print(rows: list[list[str]]) -> None:
    header = ["GET /v1/generations?limit=200", "bytes", "items", "median ms", "worst stall ms"]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--result-kb", type=int, default=100)
    parser.add_argument("--list-max-bytes", type=int, default=DEFAULT_LIST_MAX_BYTES)
    asyncio.run(measure(parser.parse_args()))


if __name__ == "__main__":
    main()
