"""The sweeper's and retention's reads and purges, from the ``sweep`` index (no Scan).

The index (layout.py) keeps three kinds of partition, SWEEP_SHARDS of each, in time
order: ``open`` (unfinished jobs something may fail to drive, by update time), ``done``
(finished jobs, by completion) and ``idem`` (expiring idempotency entries, by expiry).
Each scan reads every shard of its kind in time order, only up to what it needs, and
merges them; the index is eventually consistent, so every candidate is read again from
the table (or conditioned on what was seen) before anything is returned or deleted.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.cancellation import MAX_ATTEMPTS, back_off
from ferryman.adapters.aws.errors import error_code, translate_errors
from ferryman.adapters.aws.job_items import number
from ferryman.adapters.aws.store_changes import counter_update
from ferryman.adapters.aws.store_reads import query_all, query_up_to
from ferryman.adapters.aws.store_writes import (
    MAX_TRANSACTION_ITEMS,
    Expression,
    TransactionCancelled,
    key,
    transact,
)
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import WAITING_STATUSES, DispatchState, JobStatus

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item
    from ferryman.core.job import Job

# A scan's filter, written with the placeholders of the Query it goes into.
Filter = Callable[[Expression], str]
# BatchWriteItem's limit of requests per call.
BATCH_WRITE_ITEMS = 25


def _sweep_query(
    table: str, kind: str, shard: int, below: float, filtered: str, expression: Expression
) -> dict[str, Any]:
    hash_key, range_key = layout.index_keys(layout.INDEX_SWEEP)
    partition = expression.value({"S": layout.sweep_partition(kind, shard)})
    bound = expression.value({"S": layout.time_bound(below)})
    return {
        "TableName": table,
        "IndexName": layout.INDEX_SWEEP,
        "KeyConditionExpression": (
            f"{expression.name(hash_key)} = {partition} AND {expression.name(range_key)} < {bound}"
        ),
        "FilterExpression": filtered,
        "ScanIndexForward": True,
        **expression.arguments(),
    }


async def _oldest(
    clients: AwsClients, table: str, kind: str, below: float, filtered: Filter, limit: int
) -> list[Item]:
    """Up to ``limit`` items of each ``kind`` shard below the time, as the filter keeps."""

    async def shard(n: int) -> list[Item]:
        expression = Expression()
        query = _sweep_query(table, kind, n, below, filtered(expression), expression)
        return await query_up_to(clients.dynamodb, query, limit)

    found = await asyncio.gather(*(shard(n) for n in range(layout.SWEEP_SHARDS)))
    return [item for items in found for item in items]


# --- stalled ------------------------------------------------------------------------


def is_stalled(job: Job, cutoff: float) -> bool:
    """JobUpkeep.stalled's rule (ports/store.py), as memory applies it."""

    def before_cutoff(at: float | None) -> bool:
        return at is not None and at < cutoff

    if job.status.terminal or not before_cutoff(job.updated_at):
        return False
    return (
        (job.dispatch_state is DispatchState.PENDING and job.status in WAITING_STATUSES)
        or (job.status is JobStatus.PROCESSING and before_cutoff(job.lease_until))
        or (job.status is JobStatus.RETRY_SCHEDULED and before_cutoff(job.not_before))
    )


def _stalled_filter(cutoff: float) -> Filter:
    def build(e: Expression) -> str:
        c = e.value({"N": number(cutoff)})
        status, dispatch = e.name("status"), e.name("dispatch_state")
        queued = e.value({"S": str(JobStatus.QUEUED)})
        retry = e.value({"S": str(JobStatus.RETRY_SCHEDULED)})
        processing = e.value({"S": str(JobStatus.PROCESSING)})
        pending = e.value({"S": str(DispatchState.PENDING)})
        return (
            f"{e.name('updated_at')} < {c} AND ("
            f"({dispatch} = {pending} AND {status} IN ({queued}, {retry}))"
            f" OR ({status} = {processing} AND {e.name('lease_until')} < {c})"
            f" OR ({status} = {retry} AND {e.name('not_before')} < {c}))"
        )

    return build


async def stalled_ids(clients: AwsClients, table: str, *, cutoff: float, limit: int) -> list[str]:
    """The ids of up to ``limit`` jobs the index says are stalled, oldest update first
    (each shard holds its own oldest, so the merge's first ``limit`` are everyone's)."""
    items = await _oldest(clients, table, "open", cutoff, _stalled_filter(cutoff), limit)
    items.sort(key=lambda i: (float(i["updated_at"]["N"]), i["pk"]["S"]))
    return [item["pk"]["S"].removeprefix("job#") for item in items[:limit]]


# --- purges ---------------------------------------------------------------------------


def _before_filter(attribute: str, at: float, *, inclusive: bool = False) -> Filter:
    def build(e: Expression) -> str:
        op = "<=" if inclusive else "<"
        return f"{e.name(attribute)} {op} {e.value({'N': number(at)})}"

    return build


async def finished_ids(
    clients: AwsClients, table: str, *, completed_before: float, limit: int
) -> list[str]:
    """Up to ``limit`` finished jobs completed before the time, oldest first."""
    items = await _oldest(
        clients,
        table,
        "done",
        completed_before,
        _before_filter("completed_at", completed_before),
        limit,
    )
    items.sort(key=lambda i: (float(i["completed_at"]["N"]), i["pk"]["S"]))
    return [item["pk"]["S"].removeprefix("job#") for item in items[:limit]]


async def purge_job(clients: AwsClients, table: str, job_id: str, completed_before: float) -> bool:
    """Delete a finished job's item collection, its idempotency entry and its count, in
    one transaction conditioned on the job being as read (a replay meanwhile keeps it).
    History beyond one transaction's room (a job of over ~95 events and attempts) is
    deleted right after it, by BatchWriteItem, under a purge marker the transaction
    writes (finish_stopped_purges). False when the job moved or is gone."""
    expression = Expression()
    collection = await query_all(
        clients.dynamodb,
        {
            "TableName": table,
            "KeyConditionExpression": f"{expression.name('pk')} = "
            f"{expression.value({'S': layout.job_pk(job_id)})}",
            "ConsistentRead": True,
            "ProjectionExpression": "pk, sk, #r, #s, #c, #t, #k, #w",
            "ExpressionAttributeNames": {
                **expression.names,
                "#r": "revision",
                "#s": "status",
                "#c": "completed_at",
                "#t": "tenant_id",
                "#k": "idempotency_key",
                "#w": "webhook_due_at",
            },
            "ExpressionAttributeValues": expression.values,
        },
    )
    job = next((i for i in collection if i["sk"]["S"] == layout.JOB_SK), None)
    if job is None or not _purgeable(job, completed_before):
        return False
    tenant = job["tenant_id"]["S"]
    ops: list[dict[str, Any]] = [
        {
            "Delete": {
                "TableName": table,
                "Key": key(layout.job_pk(job_id), layout.JOB_SK),
                "ConditionExpression": "#r = :r",
                "ExpressionAttributeNames": {"#r": "revision"},
                "ExpressionAttributeValues": {":r": job["revision"]},
            }
        },
        counter_update(table, tenant, layout.counter_sk(job_id), unfinished=0, stored=-1),
    ]
    if "idempotency_key" in job:
        entry_op = await _entry_delete(clients, table, tenant, job["idempotency_key"]["S"], job_id)
        if entry_op is not None:
            ops.append(entry_op)
    # The input's item goes with the job's in the transaction; events and attempts past
    # its 100 items follow it (a job is never read without its input), and a marker
    # written in the transaction names the job until they are gone: a purge stopped in
    # between (a process killed, an outage) is finished by the next.
    history = sorted(
        ({"pk": i["pk"], "sk": i["sk"]} for i in collection if i["sk"]["S"] != layout.JOB_SK),
        key=lambda k: k["sk"]["S"] != layout.INPUT_SK,
    )
    room = MAX_TRANSACTION_ITEMS - len(ops)
    rest: list[dict[str, Any]] = []
    if len(history) > room:
        room -= 1
        rest = history[room:]
        ops.append({"Put": {"TableName": table, "Item": _marker_key(job_id)}})
    ops.extend({"Delete": {"TableName": table, "Key": k}} for k in history[:room])
    try:
        await transact(clients, ops)
    except TransactionCancelled:
        return False
    if rest:
        await _delete_keys(clients, table, rest)
        await _delete_keys(clients, table, [_marker_key(job_id)])
    return True


def _marker_key(job_id: str) -> dict[str, Any]:
    """The purge marker's key, which is all the item holds."""
    return key(layout.PURGING_PK, job_id)


async def finish_stopped_purges(clients: AwsClients, table: str) -> int:
    """Delete what purges stopped after their transaction left behind (layout.py's
    purge markers): each such job's remaining items, then its marker; how many jobs."""
    markers = await query_all(
        clients.dynamodb,
        {
            "TableName": table,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": layout.PURGING_PK}},
            "ConsistentRead": True,
        },
    )
    for marker in markers:
        job_id = marker["sk"]["S"]
        left = await query_all(
            clients.dynamodb,
            {
                "TableName": table,
                "KeyConditionExpression": "pk = :p",
                "ExpressionAttributeValues": {":p": {"S": layout.job_pk(job_id)}},
                "ProjectionExpression": "pk, sk",
                "ConsistentRead": True,
            },
        )
        await _delete_keys(clients, table, [{"pk": i["pk"], "sk": i["sk"]} for i in left])
        await _delete_keys(clients, table, [_marker_key(job_id)])
    return len(markers)


def _purgeable(job: Item, completed_before: float) -> bool:
    """Finished before the time and owing no webhook: an owed job is out of the
    ``done`` partitions (job_items.sweep_keys), but the index lags the table."""
    status = JobStatus(job["status"]["S"])
    completed = job.get("completed_at")
    return (
        status.terminal
        and "webhook_due_at" not in job
        and completed is not None
        and float(completed["N"]) < completed_before
    )


async def _entry_delete(
    clients: AwsClients, table: str, tenant: str, name: str, job_id: str
) -> dict[str, Any] | None:
    """The Delete of the job's idempotency entry, if the entry still names this job (an
    expired one may have been taken by a newer job since)."""
    entry_key = key(layout.idem_pk(tenant, name), layout.IDEM_SK)
    with translate_errors("dynamodb"):
        response = await clients.dynamodb.get_item(
            TableName=table, Key=entry_key, ConsistentRead=True, ProjectionExpression="job_id"
        )
    entry = response.get("Item")
    if entry is None or entry["job_id"]["S"] != job_id:
        return None
    return {
        "Delete": {
            "TableName": table,
            "Key": entry_key,
            "ConditionExpression": "job_id = :j",
            "ExpressionAttributeValues": {":j": {"S": job_id}},
        }
    }


async def _delete_keys(clients: AwsClients, table: str, keys: list[dict[str, Any]]) -> None:
    for start in range(0, len(keys), BATCH_WRITE_ITEMS):
        requests = [{"DeleteRequest": {"Key": k}} for k in keys[start : start + BATCH_WRITE_ITEMS]]
        for attempt in range(MAX_ATTEMPTS):
            with translate_errors("dynamodb"):
                response = await clients.dynamodb.batch_write_item(RequestItems={table: requests})
            # What the table had no capacity for now comes back: send it again.
            requests = response.get("UnprocessedItems", {}).get(table, [])
            if not requests:
                break
            await back_off(attempt)
        else:
            raise StoreUnavailableError("dynamodb: a purge's deletes kept being left unprocessed")


async def purge_expired_keys(clients: AwsClients, table: str, *, now: float, limit: int) -> int:
    """Delete up to ``limit`` expired idempotency entries; how many. Each delete is
    conditioned on the expiry the index showed, so an entry taken anew meanwhile stays."""
    if limit <= 0:
        return 0
    items = await _oldest(
        clients, table, "idem", now, _before_filter("expires_at", now, inclusive=True), limit
    )
    items.sort(key=lambda i: float(i["expires_at"]["N"]))
    deleted = await asyncio.gather(*(_delete_entry(clients, table, i) for i in items[:limit]))
    return sum(deleted)


async def _delete_entry(clients: AwsClients, table: str, seen: Item) -> bool:
    try:
        with translate_errors("dynamodb"):
            await clients.dynamodb.delete_item(
                TableName=table,
                Key={"pk": seen["pk"], "sk": seen["sk"]},
                ConditionExpression="expires_at = :e",
                ExpressionAttributeValues={":e": seen["expires_at"]},
            )
    except Exception as exc:
        if error_code(exc) == "ConditionalCheckFailedException":
            return False
        raise
    return True
