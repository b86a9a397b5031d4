"""DynamoJobStore: jobs, their events and attempts in one DynamoDB table (layout.py).

Every write is one TransactWriteItems (store_writes.py): a change is the job's Update
conditioned on the revision it expects (``ALL_OLD`` on failure, so a conflict is read in
the same call), the Puts of its events and of the attempt it opens, the conditional
Updates of the attempts it closes, and the ADDs of its tenant's counters
(store_changes.py). New jobs come in with their idempotency entries the same way
(store_intake.py). Reads of a job or its history read the table, strongly consistent;
lists, scans and reports read the indexes (store_listing.py, store_upkeep.py,
store_usage.py), which DynamoDB keeps eventually consistent. Nothing scans the table.

The queue is SQS, elsewhere: ``enqueues_with_job`` is False, so intake takes the outbox
path, and ``stalled`` lists a job whose message may still be queued (the sweeper's
re-send is then a harmless duplicate, as the port allows).

What differs from the SQL engines, stated: ``max_atomic_batch`` (a transaction holds
100 items), ``max_job_bytes`` (an item holds 400 KB); ``purge_finished`` deletes each
job whole in its own transaction, not the whole batch in one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.errors import translate_errors
from ferryman.adapters.aws.job_items import (
    attempt_from_item,
    event_from_item,
    job_from_items,
    value_of,
)
from ferryman.adapters.aws.store_changes import change_ops
from ferryman.adapters.aws.store_intake import MAX_ATOMIC_BATCH, MAX_JOB_BYTES, create_many
from ferryman.adapters.aws.store_listing import (
    Filters,
    list_jobs,
    list_named_jobs,
    summary_items,
)
from ferryman.adapters.aws.store_reads import batch_get, job_attributes, query_all
from ferryman.adapters.aws.store_upkeep import (
    finish_stopped_purges,
    finished_ids,
    is_stalled,
    purge_expired_keys,
    purge_job,
    stalled_ids,
)
from ferryman.adapters.aws.store_usage import tenant_usage, usage_report
from ferryman.adapters.aws.store_webhooks import due_ids
from ferryman.adapters.aws.store_writes import TransactionCancelled, key, transact
from ferryman.adapters.wakeup import Wakeup
from ferryman.core.errors import StateConflictError
from ferryman.ports.store import JobPage, StoreCapabilities

if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item
    from ferryman.core.changes import Change
    from ferryman.core.clock import Clock
    from ferryman.core.job import Attempt, Event, Job, JobStatus
    from ferryman.ports.store import Accepted, CreateOutcome, TenantUsage, UsageGroup, UsageRow

STORE_CAPABILITIES = StoreCapabilities(
    max_atomic_batch=MAX_ATOMIC_BATCH, usage_exact=True, max_job_bytes=MAX_JOB_BYTES
)
_PROBE_KEY = key("probe", "probe")


# How many more candidates a scan that skips tenants reads, and the most it reads.
SKIP_READ_FACTOR = 4
MAX_DUE_READ = 400


class DynamoJobStore:
    """The JobStore port on DynamoDB (adapters/aws/layout.py's table)."""

    def __init__(self, clients: AwsClients, table: str, *, clock: Clock) -> None:
        self._clients = clients
        self._table = table
        self._clock = clock
        self._cancel_hints = Wakeup()
        self._status_hints = Wakeup()

    @property
    def capabilities(self) -> StoreCapabilities:
        return STORE_CAPABILITIES

    @property
    def enqueues_with_job(self) -> bool:
        return False

    @property
    def cancel_hints(self) -> Wakeup:
        """Nudged by this process's own changes that ask a running attempt to stop.
        Another process's cancel reaches a worker by its periodic cancel check only:
        DynamoDB has no notification this engine listens to."""
        return self._cancel_hints

    @property
    def status_hints(self) -> Wakeup:
        """Nudged by this process's own status changes only (as ``cancel_hints``): a
        wait on another process's change learns of it at the watcher's fallback poll."""
        return self._status_hints

    # --- writes ---------------------------------------------------------------

    async def create(self, change: Change, *, idempotency_expires_at: float | None) -> Accepted:
        [outcome] = await self.create_many([change], idempotency_expires_at=idempotency_expires_at)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def create_many(
        self, changes: Sequence[Change], *, idempotency_expires_at: float | None
    ) -> list[CreateOutcome]:
        if not changes:
            return []
        return await create_many(
            self._clients,
            self._table,
            changes,
            expires_at=idempotency_expires_at,
            read_entry=self._read_entry,
            read_jobs=self.get_many,
        )

    async def _read_entry(self, entry: tuple[str, str]) -> Item | None:
        tenant, name = entry
        with translate_errors("dynamodb"):
            response = await self._clients.dynamodb.get_item(
                TableName=self._table,
                Key=key(layout.idem_pk(tenant, name), layout.IDEM_SK),
                ConsistentRead=True,
            )
        item: Item | None = response.get("Item")
        return item

    async def apply(self, change: Change) -> bool:
        """One transaction; False, with nothing written, when the job's revision moved
        or the job is gone. An attempt that already has its ending keeps it: the change
        is written again without that ending (at most once per attempt it closes)."""
        skipped: set[str] = set()
        for _ in range(len(change.closed) + 1):
            ops, closes = change_ops(self._table, change, without=frozenset(skipped))
            try:
                await transact(self._clients, ops)
            except TransactionCancelled as cancelled:
                if cancelled.failed(0):
                    return False
                ended = {attempt for i, attempt in closes.items() if cancelled.failed(i)}
                if not ended:
                    raise StateConflictError("a change's transaction was refused") from None
                skipped |= ended
                continue
            if change.stops_running_attempt:
                self._cancel_hints.notify()
            if change.changes_status:
                self._status_hints.notify()
            return True
        raise StateConflictError("a change's attempt endings kept being refused")

    # --- reads ----------------------------------------------------------------

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        # The job's item and its input's: one Query, their sort keys side by side.
        items = await query_all(
            self._clients.dynamodb,
            {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :p AND sk BETWEEN :input AND :job",
                "ExpressionAttributeValues": {
                    ":p": {"S": layout.job_pk(job_id)},
                    ":input": {"S": layout.INPUT_SK},
                    ":job": {"S": layout.JOB_SK},
                },
                "ConsistentRead": True,
            },
        )
        jobs = _jobs_from(items)
        job = jobs.get(job_id)
        if job is None or (tenant_id is not None and job.tenant_id != tenant_id):
            return None
        return job

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        keys = [
            key(layout.job_pk(job_id), sk)
            for job_id in set(job_ids)
            for sk in (layout.JOB_SK, layout.INPUT_SK)
        ]
        if not keys:
            return {}
        return _jobs_from(await batch_get(self._clients.dynamodb, self._table, keys))

    async def _get_items(self, job_ids: Collection[str], projection: Sequence[str]) -> list[Item]:
        return await job_attributes(self._clients.dynamodb, self._table, job_ids, projection)

    async def list_jobs(
        self,
        *,
        tenant_id: str | None,
        status: JobStatus | None = None,
        task: str | None = None,
        error_code: str | None = None,
        job_ids: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
        max_bytes: int | None = None,
    ) -> JobPage:
        filters = Filters(status=status, task=task, error_code=error_code)
        if job_ids is not None:
            items = await summary_items(self._clients.dynamodb, self._table, job_ids)
            return await list_named_jobs(
                items,
                tenant_id=tenant_id,
                filters=filters,
                limit=limit,
                cursor=cursor,
                max_bytes=max_bytes,
            )
        return await list_jobs(
            self._clients,
            self._table,
            tenant_id=tenant_id,
            filters=filters,
            limit=limit,
            cursor=cursor,
            max_bytes=max_bytes,
        )

    async def _history(self, job_id: str, prefix: str) -> list[Item]:
        return await query_all(
            self._clients.dynamodb,
            {
                "TableName": self._table,
                "KeyConditionExpression": "pk = :p AND begins_with(sk, :s)",
                "ExpressionAttributeValues": {
                    ":p": {"S": layout.job_pk(job_id)},
                    ":s": {"S": prefix},
                },
                "ConsistentRead": True,
            },
        )

    async def events(self, job_id: str) -> list[Event]:
        # Their sort keys are the zero-padded seq: the Query's order is theirs.
        return [event_from_item(i) for i in await self._history(job_id, layout.EVENT_PREFIX)]

    async def attempts(self, job_id: str) -> list[Attempt]:
        items = await self._history(job_id, layout.ATTEMPT_PREFIX)
        return sorted((attempt_from_item(i) for i in items), key=lambda a: a.attempt_no)

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        items = await self._get_items(job_ids, ("job_id", "cancel_requested"))
        return {
            item["job_id"]["S"]
            for item in items
            if item.get("cancel_requested", {}).get("BOOL") is True
        }

    async def existing(self, job_ids: Collection[str]) -> set[str]:
        items = await self._get_items(job_ids, ("job_id",))
        return {item["job_id"]["S"] for item in items}

    async def usage(self, tenant_id: str) -> TenantUsage:
        return await tenant_usage(self._clients, self._table, tenant_id)

    async def usage_report(
        self, *, tenant_id: str | None, start: float, end: float, group_by: UsageGroup
    ) -> list[UsageRow]:
        return await usage_report(
            self._clients,
            self._table,
            tenant_id=tenant_id,
            start=start,
            end=end,
            group_by=group_by,
        )

    async def ping(self, *, write: bool = False) -> None:
        """A consistent GetItem of the probe item (and with ``write`` a conditional Put
        of it): StoreUnavailableError while DynamoDB cannot serve them."""
        with translate_errors("dynamodb"):
            await self._clients.dynamodb.get_item(
                TableName=self._table, Key=_PROBE_KEY, ConsistentRead=True
            )
            if write:
                await self._clients.dynamodb.put_item(
                    TableName=self._table,
                    Item={**_PROBE_KEY, "kind": {"S": "probe"}, "at": value_of(self._clock.now())},
                    ConditionExpression="attribute_not_exists(pk) OR kind = :k",
                    ExpressionAttributeValues={":k": {"S": "probe"}},
                )

    # --- upkeep ---------------------------------------------------------------

    async def stalled(self, *, now: float, older_than_seconds: float, limit: int) -> list[Job]:
        """The sweep index's candidates, each read again from the table and kept only
        if still stalled (the index lags the table)."""
        if limit <= 0:
            return []
        cutoff = now - older_than_seconds
        ids = await stalled_ids(self._clients, self._table, cutoff=cutoff, limit=limit)
        jobs = await self.get_many(ids)
        found = [job for job in jobs.values() if is_stalled(job, cutoff)]
        return sorted(found, key=lambda j: (j.updated_at, j.job_id))[:limit]

    async def webhooks_due(
        self, *, now: float, limit: int, skip_tenants: Collection[str] = ()
    ) -> list[Job]:
        """The webhook index's candidates (store_webhooks.py), each read again from the
        table and kept only if its notification is still owed and due. The index holds
        keys only, so skipped tenants are left out after that read, from a few times
        ``limit`` candidates (SKIP_READ_FACTOR): a skipped tenant with more due than
        that at the head of the index still delays the others (docs/aws.md)."""
        skip = set(skip_tenants)
        wanted = limit if not skip else min(limit * SKIP_READ_FACTOR, MAX_DUE_READ)
        ids = await due_ids(self._clients, self._table, now=now, limit=wanted)
        jobs = await self.get_many(ids)
        due = [
            job
            for job in jobs.values()
            if job.webhook_due_at is not None
            and job.webhook_due_at <= now
            and job.tenant_id not in skip
        ]
        return sorted(due, key=lambda j: (j.webhook_due_at, j.job_id))[:limit]

    async def purge_finished(self, *, completed_before: float, limit: int) -> list[str]:
        """Oldest first; each job deleted whole (its item collection, its idempotency
        entry, its count) in its own transaction. A job whose webhook is owed is not in
        the index this reads (job_items.sweep_keys) and is checked again on the table."""
        if limit <= 0:
            return []
        await finish_stopped_purges(self._clients, self._table)
        ids = await finished_ids(
            self._clients, self._table, completed_before=completed_before, limit=limit
        )
        purged = []
        for job_id in ids:
            if await purge_job(self._clients, self._table, job_id, completed_before):
                purged.append(job_id)
        return purged

    async def purge_expired_keys(self, *, now: float, limit: int) -> int:
        return await purge_expired_keys(self._clients, self._table, now=now, limit=limit)


def _jobs_from(items: Collection[Item]) -> dict[str, Job]:
    """The jobs among job and input items (any order), by id: a job is there when both
    its items are (one transaction writes them, and one deletes them)."""
    jobs: dict[str, Item] = {}
    inputs: dict[str, Item] = {}
    for item in items:
        kind = jobs if item["sk"]["S"] == layout.JOB_SK else inputs
        kind[item["pk"]["S"]] = item
    return {
        item["job_id"]["S"]: job_from_items(item, inputs[pk])
        for pk, item in jobs.items()
        if pk in inputs
    }
