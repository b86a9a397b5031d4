"""What tenants hold and what their attempts used: the counters and the usage report.

A tenant's counts live on COUNTER_SHARDS items (layout.py), each moved by ADDs inside
the transaction of the change that moves it, so their sum, read consistently in one
Query, is exact as of the read. The report reads the ``attempts_by_day`` index: each
UTC day of the period over ATTEMPT_DAY_SHARDS partitions (a tenant's own attempts by
the sort key's prefix), summed here; only the first and last day's reads hold
attempts outside the period, which the filter drops.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.job_items import number
from ferryman.adapters.aws.store_reads import query_all
from ferryman.adapters.aws.store_writes import Expression
from ferryman.core.job import AttemptOutcome
from ferryman.ports.store import TenantUsage, UsageGroup, UsageRow

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item

# Partitions a report reads at once (a year is 367 days of ATTEMPT_DAY_SHARDS each).
REPORT_CONCURRENCY = 16


async def tenant_usage(clients: AwsClients, table: str, tenant_id: str) -> TenantUsage:
    items = await query_all(
        clients.dynamodb,
        {
            "TableName": table,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": layout.counter_pk(tenant_id)}},
            "ConsistentRead": True,
        },
    )
    unfinished = sum(int(i.get("unfinished", {"N": "0"})["N"]) for i in items)
    stored = sum(int(i.get("stored", {"N": "0"})["N"]) for i in items)
    return TenantUsage(unfinished=unfinished, stored=stored)


def _days(start: float, end: float) -> list[str]:
    first = datetime.fromtimestamp(start, UTC).date()
    last = datetime.fromtimestamp(end, UTC).date()
    return [(first + timedelta(days=n)).isoformat() for n in range((last - first).days + 1)]


def _query(
    table: str, partition: str, tenant_id: str | None, start: float, end: float
) -> dict[str, Any]:
    e = Expression()
    hash_key, range_key = layout.index_keys(layout.INDEX_ATTEMPTS)
    condition = f"{e.name(hash_key)} = {e.value({'S': partition})}"
    if tenant_id is not None:
        condition += f" AND begins_with({e.name(range_key)}, {e.value({'S': tenant_id + '#'})})"
    started = e.name("started_at")
    filtered = f"{started} >= {e.value({'N': number(start)})} AND {started} < {e.value({'N': number(end)})}"
    return {
        "TableName": table,
        "IndexName": layout.INDEX_ATTEMPTS,
        "KeyConditionExpression": condition,
        "FilterExpression": filtered,
        **e.arguments(),
    }


def _key(item: Item, group_by: UsageGroup) -> str:
    if group_by is UsageGroup.DAY:
        return layout.utc_day(float(item["started_at"]["N"]))
    return str(item["model" if group_by is UsageGroup.MODEL else "task"]["S"])


def _n(item: Item, name: str) -> int | None:
    value = item.get(name)
    return None if value is None else int(value["N"])


async def usage_report(
    clients: AwsClients,
    table: str,
    *,
    tenant_id: str | None,
    start: float,
    end: float,
    group_by: UsageGroup,
) -> list[UsageRow]:
    if end <= start:
        return []
    gate = asyncio.Semaphore(REPORT_CONCURRENCY)

    async def read(partition: str) -> list[Item]:
        async with gate:
            return await query_all(
                clients.dynamodb, _query(table, partition, tenant_id, start, end)
            )

    partitions = [
        layout.day_partition(day, shard)
        for day in _days(start, end)
        for shard in range(layout.ATTEMPT_DAY_SHARDS)
    ]
    found = await asyncio.gather(*(read(p) for p in partitions))
    groups: dict[str, list[Item]] = {}
    for items in found:
        for item in items:
            groups.setdefault(_key(item, group_by), []).append(item)
    return [_row(key, items) for key, items in sorted(groups.items())]


def _row(key: str, attempts: list[Item]) -> UsageRow:
    """As memory sums them (adapters/memory/store.py)."""
    succeeded = str(AttemptOutcome.SUCCEEDED)
    return UsageRow(
        key=key,
        calls=len(attempts),
        failed_calls=sum(1 for a in attempts if "failure_class" in a),
        input_tokens=sum(_n(a, "input_tokens") or 0 for a in attempts),
        output_tokens=sum(_n(a, "output_tokens") or 0 for a in attempts),
        cost_nano_usd=sum(_n(a, "cost_nano_usd") or 0 for a in attempts),
        wasted_nano_usd=sum(
            _n(a, "cost_nano_usd") or 0
            for a in attempts
            if a.get("outcome", {}).get("S") != succeeded
        ),
        unknown_usage_calls=sum(
            1
            for a in attempts
            if "finish_reason" in a and ("input_tokens" not in a or "output_tokens" not in a)
        ),
    )
