"""Pages of jobs, newest first, from the list indexes (layout.py), never a Scan.

A tenant's list is one partition of ``by_tenant``; every tenant's list is the
ALL_JOBS_SHARDS partitions of ``all_jobs`` (the dead-letter list, every tenant's jobs
failed as dead-lettered, the DEAD_LETTER_SHARDS of ``dead_letters``), each read newest
first and merged by job id (a ULID, so the merge is newest first across them). Each
partition is read a page of ``limit + 1`` entries at a time (and at most 1 MB,
DynamoDB's page), and only as far as the merge needs: a list holds at most one such
page per partition in memory, and stops reading where the page ends (its limit, or its
byte budget).

The indexes hold only what never changes (the keys, the job id and the task), so a
change to a job writes no list entry: each page's summaries are read from the jobs' own
items (BatchGetItem, consistent, projected to the summary: never the input), where the
status and error code filters apply; the task filter is the index Query's own. Reads
cost a fifth of writes, and a job is written several times for each time it is listed.

The index itself is kept eventually consistent with the table: a job written a moment
ago may be missing from a list for that moment (get() reads the table itself).
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.errors import translate_errors
from ferryman.adapters.aws.job_items import is_dead_letter, listed_bytes, summary_from_item
from ferryman.adapters.aws.store_reads import job_attributes
from ferryman.adapters.aws.store_writes import Expression
from ferryman.core.cursors import cursor_after, position_of
from ferryman.ports.store import LIST_ITEM_BYTES, JobPage, JobSummary

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterable

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item
    from ferryman.core.job import JobStatus


@dataclass(frozen=True, slots=True)
class Filters:
    status: JobStatus | None = None
    task: str | None = None
    error_code: str | None = None

    def index_expression(self, expression: Expression) -> str | None:
        """The part of the filter a list index can apply (it holds the task)."""
        if self.task is None:
            return None
        return f"{expression.name('task')} = {expression.value({'S': self.task})}"

    def match(self, item: Item) -> bool:
        def has(attribute: str, wanted: str | None) -> bool:
            return wanted is None or item.get(attribute, {}).get("S") == wanted

        return (
            has("status", None if self.status is None else str(self.status))
            and has("task", self.task)
            and has("error_code", self.error_code)
        )


async def summary_items(dynamodb: Any, table: str, job_ids: Iterable[str]) -> list[Item]:
    """The summary attributes of the named jobs' items that exist (any order)."""
    return await job_attributes(dynamodb, table, job_ids, layout.SUMMARY_ATTRIBUTES)


@dataclass(slots=True)
class _Partition:
    """One index partition read newest first, a page at a time."""

    query: dict[str, Any]
    filters: Filters
    buffer: deque[Item] = field(default_factory=deque)
    start: dict[str, Any] | None = None
    done: bool = False

    async def fill(self, clients: AwsClients) -> None:
        """Read pages until one summary is buffered or the partition is read out."""
        while not self.buffer and not self.done:
            arguments = dict(self.query)
            if self.start is not None:
                arguments["ExclusiveStartKey"] = self.start
            with translate_errors("dynamodb"):
                response = await clients.dynamodb.query(**arguments)
            self.start = response.get("LastEvaluatedKey")
            self.done = self.start is None
            ids = [entry["job_id"]["S"] for entry in response.get("Items", [])]
            found = await summary_items(clients.dynamodb, self.query["TableName"], ids)
            kept = [item for item in found if self.filters.match(item)]
            self.buffer.extend(sorted(kept, key=lambda i: i["job_id"]["S"], reverse=True))


def _partitions(
    table: str, tenant_id: str | None, filters: Filters, before: str | None, page: int
) -> list[_Partition]:
    if tenant_id is not None:
        index = layout.INDEX_BY_TENANT
        names = [layout.tenant_partition(tenant_id)]
    elif is_dead_letter(filters.status, filters.error_code):
        index = layout.INDEX_DEAD_LETTERS
        names = [layout.dead_letter_partition(n) for n in range(layout.DEAD_LETTER_SHARDS)]
    else:
        index = layout.INDEX_ALL_JOBS
        names = [layout.all_jobs_partition(n) for n in range(layout.ALL_JOBS_SHARDS)]
    hash_key, range_key = layout.index_keys(index)
    out = []
    for name in names:
        expression = Expression()
        condition = f"{expression.name(hash_key)} = {expression.value({'S': name})}"
        if before is not None:
            condition += f" AND {expression.name(range_key)} < {expression.value({'S': before})}"
        query: dict[str, Any] = {
            "TableName": table,
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ScanIndexForward": False,
            "Limit": page,
        }
        filtered = filters.index_expression(expression)
        if filtered is not None:
            query["FilterExpression"] = filtered
        query.update(expression.arguments())
        out.append(_Partition(query, filters))
    return out


async def _merged(clients: AwsClients, partitions: list[_Partition]) -> AsyncIterator[Item]:
    """The partitions' items, newest first across them."""
    await asyncio.gather(*(p.fill(clients) for p in partitions))
    while True:
        heads = [p for p in partitions if p.buffer]
        if not heads:
            return
        newest = max(heads, key=lambda p: p.buffer[0]["job_id"]["S"])
        yield newest.buffer.popleft()
        await newest.fill(clients)


async def page_from(items: AsyncIterator[Item], *, limit: int, max_bytes: int | None) -> JobPage:
    """A page of ``items`` (newest first): at most ``limit`` jobs, none after the one that
    would take it over ``max_bytes`` (always one); a next cursor when another follows."""
    jobs: list[JobSummary] = []
    listed = 0
    async for item in items:
        weight = LIST_ITEM_BYTES + listed_bytes(item)
        over = max_bytes is not None and listed + weight > max_bytes
        if len(jobs) == limit or (jobs and over):
            return JobPage(
                jobs=jobs, next_cursor=cursor_after(jobs[-1].job_id), listed_bytes=listed
            )
        jobs.append(summary_from_item(item))
        listed += weight
    return JobPage(jobs=jobs, next_cursor=None, listed_bytes=listed)


async def list_jobs(
    clients: AwsClients,
    table: str,
    *,
    tenant_id: str | None,
    filters: Filters,
    limit: int,
    cursor: str | None,
    max_bytes: int | None,
) -> JobPage:
    limit = max(1, limit)
    before = None if cursor is None else position_of(cursor)
    partitions = _partitions(table, tenant_id, filters, before, limit + 1)
    return await page_from(_merged(clients, partitions), limit=limit, max_bytes=max_bytes)


async def _listed(items: Iterable[Item]) -> AsyncIterator[Item]:
    for item in items:
        yield item


async def list_named_jobs(
    items: Iterable[Item],
    *,
    tenant_id: str | None,
    filters: Filters,
    limit: int,
    cursor: str | None,
    max_bytes: int | None,
) -> JobPage:
    """A page of the named jobs (their summary attributes read by key): only the
    tenant's own, filtered, newest first after the cursor."""
    limit = max(1, limit)
    before = None if cursor is None else position_of(cursor)
    kept = sorted(
        (
            item
            for item in items
            if (tenant_id is None or item["tenant_id"]["S"] == tenant_id)
            and (before is None or item["job_id"]["S"] < before)
            and filters.match(item)
        ),
        key=lambda item: item["job_id"]["S"],
        reverse=True,
    )
    return await page_from(_listed(kept), limit=limit, max_bytes=max_bytes)
