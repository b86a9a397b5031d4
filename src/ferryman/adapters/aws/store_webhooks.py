"""The webhook dispatcher's read of owed notifications, from the ``webhooks`` index.

The index (layout.py) holds a job only while its ``webhook_due_at`` is set, keyed by
that time over WEBHOOK_SHARDS partitions: each shard is read in due order up to the
bound and only as far as the caller's limit, and the shards are merged. The index is
eventually consistent and its sort key rounds the time to the microsecond, so the
store reads every candidate again from the table and keeps only those still due
(store.py): a notification claimed or settled meanwhile is not handed out.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.store_reads import query_up_to
from ferryman.adapters.aws.store_writes import Expression

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item


async def due_ids(clients: AwsClients, table: str, *, now: float, limit: int) -> list[str]:
    """The ids of up to ``limit`` jobs the index says owe a notification due by
    ``now``, earliest due first (each shard holds its own earliest, so the merge's
    first ``limit`` are everyone's)."""
    if limit <= 0:
        return []
    hash_key, range_key = layout.index_keys(layout.INDEX_WEBHOOKS)

    async def shard(n: int) -> list[Item]:
        e = Expression()
        partition = e.value({"S": layout.webhook_partition(n)})
        bound = e.value({"S": layout.time_bound(now)})
        query = {
            "TableName": table,
            "IndexName": layout.INDEX_WEBHOOKS,
            "KeyConditionExpression": (
                f"{e.name(hash_key)} = {partition} AND {e.name(range_key)} < {bound}"
            ),
            "ScanIndexForward": True,
            # No filter: each entry read is one the merge may keep, so a page of the
            # limit is all a shard can contribute.
            "Limit": limit,
            **e.arguments(),
        }
        return await query_up_to(clients.dynamodb, query, limit)

    found = await asyncio.gather(*(shard(n) for n in range(layout.WEBHOOK_SHARDS)))
    # The sort key is the due time (as sortable text) then the job id.
    keys = sorted(item[range_key]["S"] for items in found for item in items)
    return [sort_key.split("#", 1)[1] for sort_key in keys[:limit]]
