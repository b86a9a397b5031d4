"""Billable AWS requests per job on the AWS engine, and what a million jobs cost.

ferryman runs as a deployment would (``open_runtime`` over ``aws://NAME`` with results
in ``s3://``, an intake and a worker in this process, the simulated model) against moto
in server mode on 127.0.0.1. Every request the SDK makes is counted from botocore's
own events (``before-parameter-build`` and ``after-call`` on each client), by kind:

- DynamoDB: read and write request units (on-demand), computed from what each call
  sent and got back by DynamoDB's published rules: a write is 1 unit per KB of the
  item, the larger of before and after (2 in a transaction), plus 1 per secondary
  index entry it puts, rewrites (an attribute the index holds changed) or deletes, 2
  when it moves the entry's key (entries here are under 1 KB); a read is 0.5 unit per
  4 KB read (1 strongly consistent, 2 in a transaction; a Query sums the items it
  returned). moto returns no real consumed capacity, so the units are computed here
  (tests/unit/test_bench_aws_requests.py holds each rule), not read;
- SQS requests (each call, up to 64 KB of payload, is one);
- S3 requests, split into PUT/LIST class and GET/HEAD class.

Two scenarios, ``--jobs`` each: ``happy`` (accepted, run once, succeeded, its result
read once by the client) and ``retried`` (the first call fails with a 5xx, the retry
succeeds), each with results in the table (``FERRYMAN_RESULTS_URL=db``, the default on
``aws://``) and in S3. The sweeper's rounds are not per job: one round's requests are
printed apart, with what they cost per month at the default interval.

Prices: us-east-1 list prices as published by AWS (``PRICES_AS_OF`` below); check the
pricing pages before quoting them. Lambda and data transfer are not counted.

Run: ``.venv/bin/python bench/aws_requests.py [--jobs 200] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from aws_emulator import aws_environment, fresh_name, moto_server
from ferryman.adapters.aws.clients import open_clients, request_hooks
from ferryman.adapters.aws.layout import table_definition
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import provision
from ferryman.config import load_settings
from ferryman.observability.logging import configure_logging
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

PRICES_AS_OF = "2025-11 (us-east-1 list prices)"
USD_PER_MILLION = {
    "dynamodb_write_units": 0.625,
    "dynamodb_read_units": 0.125,
    "sqs_requests": 0.40,
    "s3_put_requests": 5.0,  # PUT, COPY, POST, LIST: $0.005 per 1,000
    "s3_get_requests": 0.4,  # GET, HEAD and the rest: $0.0004 per 1,000
}
GOAL_USD_PER_MILLION_JOBS = 25.0
TENANT = "bench"
_S3_PUT_CLASS = {"PutObject", "CopyObject", "ListObjectsV2", "ListObjects", "DeleteObjects"}
_FREE_S3 = {"DeleteObject"}  # DELETE requests are free
# A single-item write's kind, as TransactWriteItems names it.
_SINGLE_WRITES = {"PutItem": "Put", "UpdateItem": "Update", "DeleteItem": "Delete"}


def _value_bytes(value: dict[str, Any]) -> int:
    """The size DynamoDB counts for one attribute value."""
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(inner.encode())
    if kind == "N":
        return len(str(inner).lstrip("-").replace(".", "")) // 2 + 2
    if kind == "B":
        return len(inner) if isinstance(inner, bytes | bytearray) else len(inner.encode())
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "M":
        return 3 + sum(len(k.encode()) + _value_bytes(v) for k, v in inner.items())
    if kind == "L":
        return 3 + sum(1 + _value_bytes(v) for v in inner)
    if kind in ("SS", "NS", "BS"):
        return sum(len(str(v).encode()) for v in inner)
    return 0


def item_bytes(item: dict[str, Any]) -> int:
    return sum(len(name.encode()) + _value_bytes(value) for name, value in item.items())


def _key_sizes(key: dict[str, Any]) -> dict[str, int]:
    return {name: len(name.encode()) + _value_bytes(value) for name, value in key.items()}


_CLAUSE = re.compile(r"\b(SET|REMOVE|ADD|DELETE)\b")


def _clauses(expression: str) -> list[tuple[str, list[str]]]:
    """An UpdateExpression's clauses, each with its comma-separated operands (commas
    inside a function's parentheses kept)."""
    parts = _CLAUSE.split(expression)
    clauses = []
    for clause, body in zip(parts[1::2], parts[2::2], strict=True):
        operands, depth, current = [], 0, ""
        for char in body:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if char == "," and depth == 0:
                operands.append(current.strip())
                current = ""
            else:
                current += char
        if current.strip():
            operands.append(current.strip())
        clauses.append((clause, operands))
    return clauses


def index_shapes(definition: dict[str, Any]) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Each secondary index's key attributes and every attribute its entries hold."""
    table_keys = {entry["AttributeName"] for entry in definition["KeySchema"]}
    shapes = {}
    for index in definition["GlobalSecondaryIndexes"]:
        keys = frozenset(entry["AttributeName"] for entry in index["KeySchema"])
        projected = keys | table_keys | set(index["Projection"].get("NonKeyAttributes", ()))
        shapes[index["IndexName"]] = (keys, frozenset(projected))
    return shapes


class Meter:
    """Billable units and requests, counted from the SDK's events."""

    def __init__(self, indexes: dict[str, tuple[frozenset[str], frozenset[str]]]) -> None:
        # Each index's (key attributes, every attribute its entries hold).
        self._indexes = indexes
        self.counts: Counter[str] = Counter()
        self.operations: Counter[str] = Counter()
        # What each item written holds (attribute name -> bytes), by key: an UpdateItem
        # is charged for the larger of the item before and after, which its request
        # does not show, and moves an index entry only if the item is in that index.
        self._items: dict[str, dict[str, int]] = {}

    def hooks(self) -> tuple[tuple[str, Any], tuple[str, Any]]:
        return (("before-parameter-build", self._before), ("after-call", self._after))

    def _before(
        self, params: dict[str, Any], model: Any, context: dict[str, Any], **_: Any
    ) -> None:
        context["ferryman_bench_params"] = dict(params)

    def _after(self, parsed: dict[str, Any], model: Any, context: dict[str, Any], **_: Any) -> None:
        service = model.service_model.service_name
        operation = model.name
        params = context.get("ferryman_bench_params", {})
        self.operations[f"{service}.{operation}"] += 1
        if service == "sqs":
            self.counts["sqs_requests"] += 1
        elif service == "s3":
            if operation in _S3_PUT_CLASS:
                self.counts["s3_put_requests"] += 1
            elif operation not in _FREE_S3:
                self.counts["s3_get_requests"] += 1
        elif service == "dynamodb":
            self._dynamodb(operation, params, parsed)

    def _key(self, table: str, key: dict[str, Any]) -> str:
        return f"{table}|{json.dumps(key, sort_keys=True, default=str)}"

    def _write(
        self,
        where: str,
        after: dict[str, int] | None,
        changed: set[str],
        factor: float,
    ) -> None:
        """An item goes from what it held to ``after`` (None: deleted), ``changed``
        naming the attributes the write set or removed."""
        before = self._items.get(where)
        if after is None:
            self._items.pop(where, None)
        else:
            self._items[where] = after
        size = max(sum((before or {}).values()), sum((after or {}).values()))
        self.counts["dynamodb_write_units"] += factor * max(1, math.ceil(size / 1024))
        self.counts["dynamodb_write_units"] += self._index_writes(before, after, changed)

    def _index_writes(
        self, before: dict[str, int] | None, after: dict[str, int] | None, changed: set[str]
    ) -> int:
        """One write per index entry put or deleted (entries here are under 1 KB): a
        key that moves deletes the old entry and puts the new; a projected attribute
        that changes rewrites the entry; an item outside an index costs it nothing."""
        writes = 0
        for keys, projected in self._indexes.values():
            was_in = before is not None and keys <= before.keys()
            now_in = after is not None and keys <= after.keys()
            if was_in and now_in:
                if changed & keys:
                    writes += 2
                elif changed & projected:
                    writes += 1
            elif was_in or now_in:
                writes += 1
        return writes

    def _put(self, table: str, item: dict[str, Any], factor: float) -> None:
        where = self._key(table, {"pk": item.get("pk"), "sk": item.get("sk")})
        after = {name: len(name.encode()) + _value_bytes(value) for name, value in item.items()}
        self._write(where, after, set(after) | set(self._items.get(where, {})), factor)

    def _update(self, op: dict[str, Any], factor: float) -> None:
        where = self._key(op["TableName"], op["Key"])
        names = op.get("ExpressionAttributeNames", {})
        values = op.get("ExpressionAttributeValues", {})
        after = dict(self._items.get(where) or _key_sizes(op["Key"]))
        changed: set[str] = set()
        for clause, operands in _clauses(op.get("UpdateExpression", "")):
            for operand in operands:
                name, _, value = (
                    operand.partition("=") if clause == "SET" else (operand.partition(" "))
                )
                attribute = names.get(name.strip(), name.strip())
                changed.add(attribute)
                if clause == "REMOVE":
                    after.pop(attribute, None)
                else:
                    token = value.strip().split()[0] if value.strip() else ""
                    size = _value_bytes(values[token]) if token in values else 8
                    after[attribute] = len(attribute.encode()) + size
        self._write(where, after, changed, factor)

    def _delete(self, op: dict[str, Any], factor: float) -> None:
        where = self._key(op["TableName"], op["Key"])
        self._write(where, None, set(self._items.get(where, {})), factor)

    def _read(self, items: list[dict[str, Any]], consistent: bool, factor: float = 1.0) -> None:
        size = sum(item_bytes(item) for item in items)
        per_4kb = (1.0 if consistent else 0.5) * factor
        self.counts["dynamodb_read_units"] += per_4kb * max(1, math.ceil(size / 4096))

    def _dynamodb(self, operation: str, params: dict[str, Any], parsed: dict[str, Any]) -> None:
        if operation in _SINGLE_WRITES:
            self._write_op(_SINGLE_WRITES[operation], params, 1)
        elif operation == "BatchWriteItem":
            for table, requests in params.get("RequestItems", {}).items():
                for request in requests:
                    ((kind, op),) = request.items()  # PutRequest or DeleteRequest
                    self._write_op(kind.removesuffix("Request"), {"TableName": table, **op}, 1)
        elif operation == "TransactWriteItems":
            for entry in params.get("TransactItems", []):
                ((kind, op),) = entry.items()
                if kind == "ConditionCheck":  # a transactional read of the item
                    self.counts["dynamodb_read_units"] += 2
                else:
                    self._write_op(kind, op, 2)
        else:
            self._dynamodb_read(operation, params, parsed)

    def _write_op(self, kind: str, op: dict[str, Any], factor: float) -> None:
        """One item's Put, Update or Delete, as TransactWriteItems names them."""
        if kind == "Put":
            self._put(op["TableName"], op["Item"], factor)
        elif kind == "Update":
            self._update(op, factor)
        else:
            self._delete(op, factor)

    def _dynamodb_read(
        self, operation: str, params: dict[str, Any], parsed: dict[str, Any]
    ) -> None:
        consistent = bool(params.get("ConsistentRead"))
        if operation == "GetItem":
            self._read([parsed.get("Item", {})], consistent)
        elif operation in ("Query", "Scan"):
            self._read(parsed.get("Items", []), consistent)
        elif operation == "BatchGetItem":
            for items in parsed.get("Responses", {}).values():
                for item in items:
                    self._read([item], consistent)
        elif operation == "TransactGetItems":
            for response in parsed.get("Responses", []):
                self._read([response.get("Item", {})], True, factor=2)

    def usd(self) -> float:
        return sum(self.counts[kind] * price / 1e6 for kind, price in USD_PER_MILLION.items())

    def snapshot(self) -> tuple[Counter[str], Counter[str]]:
        return Counter(self.counts), Counter(self.operations)


def _per_job(meter: Meter, before: tuple[Counter[str], Counter[str]], jobs: int) -> dict[str, Any]:
    counts = meter.counts - before[0]
    operations = meter.operations - before[1]
    usd = sum(counts[kind] * price / 1e6 for kind, price in USD_PER_MILLION.items())
    return {
        "per_job": {kind: round(counts[kind] / jobs, 3) for kind in USD_PER_MILLION},
        "operations_per_job": {op: round(n / jobs, 3) for op, n in sorted(operations.items())},
        "usd_per_million_jobs": round(usd / jobs * 1e6, 2),
    }


async def _run_jobs(runtime: Any, jobs: int, script: list[str] | None) -> None:
    job_input: dict[str, Any] = {"prompt": "a prompt of a typical length " * 20}
    if script is not None:
        job_input["simulate"] = {"script": script}
    submitted = await asyncio.gather(
        *(
            runtime.intake.submit(
                tenant_id=TENANT, request=SubmitRequest(task="generate", input=dict(job_input))
            )
            for _ in range(jobs)
        )
    )
    worker = runtime.new_worker()
    pending = {submission.job.job_id for submission in submitted}
    while pending:
        await worker.run_until_idle()
        for job_id in list(pending):
            view = await runtime.jobs.get(TENANT, job_id)
            if view.job.status.terminal:
                if view.job.status.value != "SUCCEEDED":
                    raise RuntimeError(f"a job ended {view.job.status}")
                pending.discard(job_id)
        if pending:
            await asyncio.sleep(0.2)  # a retry's backoff, waiting to come due


async def _measure_deployment(meter: Meter, results: str, jobs: int) -> dict[str, Any]:
    """Both scenarios and one sweeper round on a fresh table, queue and bucket, with
    results kept in ``results`` (``db``: the table; ``s3``: the bucket)."""
    name = fresh_name("bench")
    location = parse_aws_url(f"aws://{name}")
    async with open_clients() as clients:
        await provision(clients, location, max_receives=10, bucket=name)
    settings = load_settings(
        database_url=f"aws://{name}",
        results_url="db" if results == "db" else f"s3://{name}/results",
        retry_initial_interval_seconds=0.0,
        sim_scripts=True,
    )
    measured: dict[str, Any] = {}
    async with open_runtime(settings) as runtime:
        for scenario, script in (("happy", None), ("retried", ["server_error", "ok"])):
            before = meter.snapshot()
            await _run_jobs(runtime, jobs, script)
            measured[scenario] = _per_job(meter, before, jobs)
        before = meter.snapshot()
        await runtime.new_sweeper().sweep_once()
        sweep = _per_job(meter, before, 1)
    rounds_per_month = 30 * 86_400 / settings.sweeper.interval_seconds
    measured["sweeper_round"] = sweep["per_job"]
    measured["sweeper_usd_per_month_idle"] = round(
        sweep["usd_per_million_jobs"] / 1e6 * rounds_per_month, 2
    )
    return measured


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    configure_logging("WARNING")
    meter = Meter(index_shapes(table_definition("x")))
    with moto_server() as endpoint:
        os.environ.update(aws_environment(endpoint))
        with request_hooks(*meter.hooks()):
            # FERRYMAN_RESULTS_URL's default on aws:// (db), then results in S3.
            in_table = await _measure_deployment(meter, "db", args.jobs)
            in_s3 = await _measure_deployment(meter, "s3", args.jobs)
    happy = in_table["happy"]["usd_per_million_jobs"]
    return {
        "jobs": args.jobs,
        "prices_as_of": PRICES_AS_OF,
        "usd_per_million": USD_PER_MILLION,
        "results_in_table": in_table,
        "results_in_s3": in_s3,
        "usd_per_million_jobs": happy,
        "usd_per_million_retried_jobs": in_table["retried"]["usd_per_million_jobs"],
        "usd_per_million_jobs_s3_results": in_s3["happy"]["usd_per_million_jobs"],
        "goal_usd_per_million_jobs": GOAL_USD_PER_MILLION_JOBS,
        "within_goal": happy <= GOAL_USD_PER_MILLION_JOBS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
        return
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
