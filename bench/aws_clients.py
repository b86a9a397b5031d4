"""Which SDK the AWS engine calls through: aiobotocore, or boto3 in a bounded thread pool.

Both make the same calls (DynamoDB GetItem and a conditional UpdateItem, the store's
commonest pair; SQS ReceiveMessage long-polling an empty queue) against moto's server
on 127.0.0.1, ``--calls`` of each at ``--concurrency`` at once, from one event loop:

- ``aiobotocore``: the calls are awaited on the loop (aiohttp underneath);
- ``boto3-threads``: a boto3 client per service, each call run in a
  ``ThreadPoolExecutor(max_workers=--concurrency)`` through ``loop.run_in_executor``.

It prints, for each, the pairs per second and the CPU this process spent per pair
(the emulator's own CPU is another process's, so it is not counted), and for the long
polls how many threads were held waiting. Both figures go to docs/design-notes.md,
"The AWS engine's SDK". Run:
``.venv/bin/python bench/aws_clients.py [--calls 2000] [--concurrency 32] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from aws_emulator import aws_environment, fresh_name, moto_server
from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import provision, queue_url

LONG_POLL_SECONDS = 2
LONG_POLLERS = 8


def _key(i: int) -> dict[str, Any]:
    return {"pk": {"S": f"bench#{i % 500}"}, "sk": {"S": "item"}}


def _update(table: str, i: int) -> dict[str, Any]:
    return {
        "TableName": table,
        "Key": _key(i),
        "UpdateExpression": "SET revision = if_not_exists(revision, :zero) + :one",
        "ConditionExpression": "attribute_not_exists(revision) OR revision >= :zero",
        "ExpressionAttributeValues": {":zero": {"N": "0"}, ":one": {"N": "1"}},
    }


async def _measure(run: Any, calls: int, concurrency: int) -> dict[str, float]:
    """Run ``run(i)`` (one GetItem and one UpdateItem) for i < calls, ``concurrency`` at
    once: pairs per second, and this process's CPU ms per pair."""
    gate = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with gate:
            await run(i)

    cpu, wall = time.process_time(), time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(calls)))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    return {"pairs_per_s": round(calls / wall, 1), "cpu_ms_per_pair": round(cpu / calls * 1000, 3)}


async def _aiobotocore(table: str, queue: str, args: argparse.Namespace) -> dict[str, Any]:
    async with open_clients(max_pool_connections=args.concurrency) as clients:

        async def pair(i: int) -> None:
            await clients.dynamodb.get_item(TableName=table, Key=_key(i))
            await clients.dynamodb.update_item(**_update(table, i))

        result = await _measure(pair, args.calls, args.concurrency)
        before = threading.active_count()
        await asyncio.gather(
            *(
                clients.sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=LONG_POLL_SECONDS)
                for _ in range(LONG_POLLERS)
            )
        )
        result["threads_held_by_long_polls"] = max(0, threading.active_count() - before)
        return result


async def _boto3_threads(table: str, queue: str, args: argparse.Namespace) -> dict[str, Any]:
    import boto3
    from botocore.config import Config

    config = Config(max_pool_connections=args.concurrency, retries={"mode": "standard"})
    dynamodb = boto3.client("dynamodb", config=config)
    sqs = boto3.client("sqs", config=config)
    loop = asyncio.get_running_loop()
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:

        async def pair(i: int) -> None:
            await loop.run_in_executor(
                pool, lambda: dynamodb.get_item(TableName=table, Key=_key(i))
            )
            await loop.run_in_executor(pool, lambda: dynamodb.update_item(**_update(table, i)))

        result = await _measure(pair, args.calls, args.concurrency)
        await asyncio.gather(
            *(
                loop.run_in_executor(
                    pool,
                    lambda: sqs.receive_message(QueueUrl=queue, WaitTimeSeconds=LONG_POLL_SECONDS),
                )
                for _ in range(LONG_POLLERS)
            )
        )
        # Threads busy in a long poll can do nothing else; with the pool at the same size
        # as the engine's concurrency, every one of them held is a store call that waits.
        result["threads_held_by_long_polls"] = LONG_POLLERS
    return result


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    with moto_server() as endpoint:
        os.environ.update(aws_environment(endpoint))
        location = parse_aws_url(f"aws://{fresh_name('bench')}")
        async with open_clients() as clients:
            await provision(clients, location, max_receives=10)
            queue = await queue_url(clients, location.queue)
        assert queue is not None
        results: dict[str, Any] = {}
        for _ in range(args.rounds):
            for name, run in (("aiobotocore", _aiobotocore), ("boto3-threads", _boto3_threads)):
                results.setdefault(name, []).append(await run(location.table, queue, args))
    return {
        "calls": args.calls,
        "concurrency": args.concurrency,
        "runs": results,
        "note": "moto on 127.0.0.1 answers slower than DynamoDB; compare CPU per call",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
        return
    for name, runs in result["runs"].items():
        for run in runs:
            print(f"{name:14} {run}")


if __name__ == "__main__":
    main()
