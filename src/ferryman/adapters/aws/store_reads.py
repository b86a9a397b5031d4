"""The store's reads by key: BatchGetItem in chunks, and a Query read to its end.

Reads of the table itself are strongly consistent (what the last write left); reads of
an index cannot be (DynamoDB keeps indexes eventually consistent), and say so where
they are made.
"""

from __future__ import annotations

import asyncio
import random
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.errors import translate_errors
from ferryman.adapters.aws.store_writes import key
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable, Sequence

    from ferryman.adapters.aws.job_items import Item

# BatchGetItem's limit of keys per request.
BATCH_GET_KEYS = 100
# Keys DynamoDB left unprocessed (throttling) are asked for again this many times.
UNPROCESSED_RETRIES = 8


async def batch_get(
    dynamodb: Any,
    table: str,
    keys: Sequence[dict[str, Any]],
    *,
    projection: str | None = None,
    names: dict[str, str] | None = None,
) -> list[Item]:
    """The items that exist among ``keys`` (any order), read consistently."""
    chunks = [keys[i : i + BATCH_GET_KEYS] for i in range(0, len(keys), BATCH_GET_KEYS)]
    found = await asyncio.gather(
        *(_get_chunk(dynamodb, table, list(c), projection, names) for c in chunks)
    )
    return [item for items in found for item in items]


async def job_attributes(
    dynamodb: Any, table: str, job_ids: Iterable[str], attributes: Sequence[str]
) -> list[Item]:
    """The named attributes of the named jobs' items that exist (any order; never their
    input, which has an item of its own)."""
    keys = [key(layout.job_pk(job_id), layout.JOB_SK) for job_id in set(job_ids)]
    if not keys:
        return []
    names = {f"#p{i}": attribute for i, attribute in enumerate(attributes)}
    return await batch_get(dynamodb, table, keys, projection=", ".join(names), names=names)


async def _get_chunk(
    dynamodb: Any,
    table: str,
    keys: list[dict[str, Any]],
    projection: str | None,
    names: dict[str, str] | None,
) -> list[Item]:
    request: dict[str, Any] = {"Keys": keys, "ConsistentRead": True}
    if projection is not None:
        request["ProjectionExpression"] = projection
    if names:
        request["ExpressionAttributeNames"] = names
    items: list[Item] = []
    for attempt in range(UNPROCESSED_RETRIES + 1):
        with translate_errors("dynamodb"):
            response = await dynamodb.batch_get_item(RequestItems={table: request})
        items.extend(response.get("Responses", {}).get(table, []))
        unprocessed = response.get("UnprocessedKeys", {}).get(table)
        if not unprocessed or not unprocessed.get("Keys"):
            return items
        request = unprocessed
        await asyncio.sleep(0.02 * (2**attempt) * random.uniform(0.5, 1.5))
    raise StoreUnavailableError("dynamodb: BatchGetItem kept leaving keys unprocessed")


async def query_pages(dynamodb: Any, arguments: dict[str, Any]) -> AsyncIterator[list[Item]]:
    """A Query's pages, in order, to its end (or until the caller stops)."""
    start: dict[str, Any] | None = None
    while True:
        request = dict(arguments)
        if start is not None:
            request["ExclusiveStartKey"] = start
        with translate_errors("dynamodb"):
            response = await dynamodb.query(**request)
        yield list(response.get("Items", []))
        start = response.get("LastEvaluatedKey")
        if start is None:
            return


async def query_all(dynamodb: Any, arguments: dict[str, Any]) -> list[Item]:
    return [item async for page in query_pages(dynamodb, arguments) for item in page]


async def query_up_to(dynamodb: Any, arguments: dict[str, Any], limit: int) -> list[Item]:
    """A Query's first ``limit`` items (after its filter), reading no further pages."""
    items: list[Item] = []
    if limit <= 0:
        return items
    async for page in query_pages(dynamodb, arguments):
        items.extend(page)
        if len(items) >= limit:
            return items[:limit]
    return items
