"""New jobs: ``create`` and ``create_many`` as one TransactWriteItems per call.

A batch's transaction holds, per new job, its Put, its events' Puts and (with a key)
its idempotency entry's conditional Put; and one counter ADD per counter item the
batch touches (the counts of its jobs on that shard summed: a transaction may name an
item once). An entry's condition that fails cancels the transaction; its reason
carries the live entry (``ALL_OLD``), which decides that key's items at once (the
same request replays the entry's job, another is a mismatch), and the transaction is
written again without them. Each round settles at least one key, so a batch takes at
most one round per key it holds, and commits whole or not at all.

Items with one key resolve in order, as if created one after another: only the first
(the key's leader) writes the entry; each later one replays whatever job the entry
then names, or is a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.job_items import job_bytes
from ferryman.adapters.aws.store_changes import counter_update, entry_put, new_job_ops
from ferryman.adapters.aws.store_writes import (
    MAX_TRANSACTION_BYTES,
    MAX_TRANSACTION_ITEMS,
    TransactionCancelled,
    item_bytes,
    transact,
)
from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError
from ferryman.ports.store import Accepted

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item
    from ferryman.core.changes import Change
    from ferryman.core.job import Job
    from ferryman.ports.store import CreateOutcome

# The items one new job takes in a batch's transaction: its own, its input's, its
# ACCEPTED event (the outbox path: DISPATCHED comes later) and its idempotency entry.
# The counter items of one tenant's batch are at most COUNTER_SHARDS: (100 - 8) // 4 =
# 23 jobs.
ITEMS_PER_NEW_JOB = 4
MAX_ATOMIC_BATCH = (MAX_TRANSACTION_ITEMS - layout.COUNTER_SHARDS) // ITEMS_PER_NEW_JOB
# A job's input and metadata as JSON: a DynamoDB item holds at most 400 KB (the input
# has an item of its own, the metadata sits in the job's), and a transaction 4 MB.
MAX_JOB_BYTES = 350_000

Key = tuple[str, str]


@dataclass(slots=True)
class _Batch:
    changes: Sequence[Change]
    # For each key, the items that carry it, in order: the first is its leader.
    members: dict[Key, list[int]]
    # Keys a live entry already holds: the entry as it was found.
    taken: dict[Key, Item]

    def writers(self) -> list[int]:
        """The items this round writes: those without a key, and each free key's leader."""
        out = []
        for i, change in enumerate(self.changes):
            k = _key(change.after)
            if k is None or (k not in self.taken and self.members[k][0] == i):
                out.append(i)
        return out


def _key(job: Job) -> Key | None:
    return None if job.idempotency_key is None else (job.tenant_id, job.idempotency_key)


def check_batch(changes: Sequence[Change]) -> None:
    """Refuse what no transaction of this engine can hold, before anything is written."""
    if len(changes) > MAX_ATOMIC_BATCH:
        raise ValueError(
            f"a DynamoDB transaction holds at most {MAX_ATOMIC_BATCH} new jobs "
            f"({MAX_TRANSACTION_ITEMS} items), not {len(changes)}: send them in chunks of "
            "StoreCapabilities.max_atomic_batch"
        )
    for change in changes:
        size = job_bytes(change.after)
        if size > MAX_JOB_BYTES:
            raise ValueError(
                f"a job's input and metadata may hold at most {MAX_JOB_BYTES} bytes of JSON on "
                f"DynamoDB (an item holds at most 400 KB); this one holds {size}"
            )
    ids = [change.job_id for change in changes]
    if len(set(ids)) != len(ids):
        raise StateConflictError("two jobs of the batch have the same id")


def _ops(
    table: str, batch: _Batch, writers: list[int], expires_at: float | None
) -> tuple[list[dict[str, Any]], dict[int, tuple[str, Key | None]]]:
    """The round's transaction, and what each job and entry operation is for."""
    ops: list[dict[str, Any]] = []
    roles: dict[int, tuple[str, Key | None]] = {}
    counts: dict[tuple[str, str], int] = {}
    for i in writers:
        change = batch.changes[i]
        job = change.after
        roles[len(ops)] = ("job", None)
        ops.extend(new_job_ops(table, change))
        k = _key(job)
        if k is not None:
            roles[len(ops)] = ("entry", k)
            ops.append(entry_put(table, job, expires_at=expires_at, now=change.at))
        counter = (job.tenant_id, layout.counter_sk(job.job_id))
        counts[counter] = counts.get(counter, 0) + 1
    for (tenant, shard), n in sorted(counts.items()):
        ops.append(counter_update(table, tenant, shard, unfinished=n, stored=n))
    if len(ops) > MAX_TRANSACTION_ITEMS:
        raise ValueError(
            f"this batch takes {len(ops)} items in one transaction (DynamoDB holds "
            f"{MAX_TRANSACTION_ITEMS}): its jobs' counters span too many tenants"
        )
    size = sum(item_bytes(op["Put"]["Item"]) for op in ops if "Put" in op)
    if size > MAX_TRANSACTION_BYTES:
        raise ValueError(
            f"this batch's jobs take {size} bytes in one transaction (DynamoDB holds "
            f"{MAX_TRANSACTION_BYTES}): send fewer large jobs together"
        )
    return ops, roles


async def create_many(
    clients: AwsClients,
    table: str,
    changes: Sequence[Change],
    *,
    expires_at: float | None,
    read_entry: Callable[[Key], Awaitable[Item | None]],
    read_jobs: Callable[[list[str]], Awaitable[dict[str, Job]]],
) -> list[CreateOutcome]:
    """The new jobs in one transaction; per item, in order, its outcome (ports/store.py)."""
    check_batch(changes)
    members: dict[Key, list[int]] = {}
    for i, change in enumerate(changes):
        k = _key(change.after)
        if k is not None:
            members.setdefault(k, []).append(i)
    batch = _Batch(changes=changes, members=members, taken={})
    for _ in range(len(members) + 2):
        writers = batch.writers()
        if not writers:
            break
        ops, roles = _ops(table, batch, writers, expires_at)
        try:
            await transact(clients, ops)
            break
        except TransactionCancelled as cancelled:
            await _settle(cancelled, roles, batch, read_entry)
    else:
        raise StateConflictError("the batch's idempotency keys kept changing; nothing stored")
    return await _outcomes(batch, read_jobs)


async def _settle(
    cancelled: TransactionCancelled,
    roles: dict[int, tuple[str, Key | None]],
    batch: _Batch,
    read_entry: Callable[[Key], Awaitable[Item | None]],
) -> None:
    """Take what a cancelled round says: a job id in use fails the batch; each key a
    live entry holds is settled by that entry."""
    for index, (role, k) in roles.items():
        if not cancelled.failed(index):
            continue
        if role == "job":
            raise StateConflictError("a job with this id already exists")
        assert k is not None
        entry = cancelled.old_item(index) or await read_entry(k)
        if entry is not None:  # gone meanwhile (purged): the next round takes the key
            batch.taken[k] = entry


async def _outcomes(
    batch: _Batch, read_jobs: Callable[[list[str]], Awaitable[dict[str, Job]]]
) -> list[CreateOutcome]:
    replayed = sorted({entry["job_id"]["S"] for entry in batch.taken.values()})
    existing = await read_jobs(replayed) if replayed else {}
    outcomes: list[CreateOutcome] = []
    for change in batch.changes:
        job = change.after
        k = _key(job)
        if k is None:
            outcomes.append(Accepted(job=job, created=True))
            continue
        entry = batch.taken.get(k)
        if entry is None:
            leader = batch.changes[batch.members[k][0]].after
            if leader is job:
                outcomes.append(Accepted(job=job, created=True))
            elif leader.request_hash == job.request_hash:
                outcomes.append(Accepted(job=leader, created=False))
            else:
                outcomes.append(IdempotencyKeyMismatchError())
            continue
        if entry["request_hash"]["S"] != job.request_hash:
            outcomes.append(IdempotencyKeyMismatchError())
            continue
        found = existing.get(entry["job_id"]["S"])
        if found is None:
            raise StateConflictError("the job an idempotency entry names is gone")
        outcomes.append(Accepted(job=found, created=False))
    return outcomes
