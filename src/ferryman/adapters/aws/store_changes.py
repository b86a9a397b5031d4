"""A Change as the operations of one TransactWriteItems, and the idempotency entries.

What a change writes is decided in core (core/changes.py); this module only spells it
in DynamoDB's terms, in one place for ``apply`` and the creates:

- the job: an Update of the attributes a change may move, conditioned on the revision
  the change expects (``ALL_OLD`` on failure); a new job is a Put conditioned on no
  job having its id;
- its events and the attempt it opens: Puts (their keys are new: the revision check
  makes the event numbers and the attempt id the job's next);
- the attempts it closes: Updates conditioned on the attempt having no outcome yet (or,
  for ``replaces_abandoned``, ``abandoned``): an attempt keeps its first ending. Such a
  condition that fails cancels the transaction like any other; ``apply`` then writes
  the change again without that ending (store.py), which is what the SQL engines'
  ``WHERE outcome IS NULL`` does;
- the tenant's counters: ADDs on the counter item of the job's shard.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import layout
from ferryman.adapters.aws.job_items import (
    attempt_item,
    attributes,
    ending_values,
    event_item,
    input_item,
    job_item,
    job_update_values,
    number,
)
from ferryman.adapters.aws.store_writes import Expression, key, put, update_expression
from ferryman.core.job import AttemptOutcome

if TYPE_CHECKING:
    from ferryman.adapters.aws.job_items import Item
    from ferryman.core.changes import AttemptEnding, Change
    from ferryman.core.job import Job

# Where the job's own operation is in a change's transaction.
JOB_OP = 0


def job_update(table: str, change: Change) -> dict[str, Any]:
    """The job's Update, only if its revision is still the one the change expects."""
    expression = Expression()
    update = update_expression(expression, job_update_values(change.after))
    condition = (
        f"{expression.name('revision')} = {expression.value({'N': str(change.expected_revision)})}"
    )
    return {
        "Update": {
            "TableName": table,
            "Key": key(layout.job_pk(change.job_id), layout.JOB_SK),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            **expression.arguments(),
        }
    }


def closing(table: str, job_id: str, ending: AttemptEnding) -> dict[str, Any]:
    """An attempt's ending, only onto an attempt that has none yet (or an abandoned one
    the worker's own account replaces)."""
    expression = Expression()
    update = update_expression(expression, ending_values(ending))
    outcome = expression.name("outcome")
    condition = f"attribute_exists(pk) AND (attribute_not_exists({outcome})"
    if ending.replaces_abandoned:
        abandoned = expression.value({"S": str(AttemptOutcome.ABANDONED)})
        condition += f" OR {outcome} = {abandoned}"
    condition += ")"
    return {
        "Update": {
            "TableName": table,
            "Key": key(layout.job_pk(job_id), layout.attempt_sk(ending.attempt_id)),
            "UpdateExpression": update,
            "ConditionExpression": condition,
            **expression.arguments(),
        }
    }


def counter_update(
    table: str, tenant_id: str, shard_sk: str, *, unfinished: int, stored: int
) -> dict[str, Any]:
    expression = Expression()
    adds = []
    if unfinished:
        adds.append(f"{expression.name('unfinished')} {expression.value({'N': str(unfinished)})}")
    if stored:
        adds.append(f"{expression.name('stored')} {expression.value({'N': str(stored)})}")
    return {
        "Update": {
            "TableName": table,
            "Key": key(layout.counter_pk(tenant_id), shard_sk),
            "UpdateExpression": "ADD " + ", ".join(adds),
            **expression.arguments(),
        }
    }


def change_ops(
    table: str, change: Change, *, without: frozenset[str] = frozenset()
) -> tuple[list[dict[str, Any]], dict[int, str]]:
    """The transaction of a change to a stored job (the job's Update first), leaving out
    the endings of the attempts in ``without``; and which operation closes which attempt."""
    ops = [job_update(table, change)]
    ops.extend(put(table, event_item(event)) for event in change.events)
    if change.opened is not None:
        ops.append(put(table, attempt_item(change.opened)))
    closes: dict[int, str] = {}
    for ending in change.closed:
        if ending.attempt_id in without:
            continue
        closes[len(ops)] = ending.attempt_id
        ops.append(closing(table, change.job_id, ending))
    if change.backlog_delta:
        job = change.after
        ops.append(
            counter_update(
                table,
                job.tenant_id,
                layout.counter_sk(job.job_id),
                unfinished=change.backlog_delta,
                stored=0,
            )
        )
    return ops, closes


def new_job_ops(table: str, change: Change) -> list[dict[str, Any]]:
    """A new job's Put (only where no job has its id), its input's and its events'."""
    ops = [
        put(table, job_item(change.after), condition="attribute_not_exists(pk)"),
        put(table, input_item(change.after)),
    ]
    ops.extend(put(table, event_item(event)) for event in change.events)
    return ops


# --- idempotency entries ------------------------------------------------------------


def entry_item(job: Job, expires_at: float | None) -> Item:
    """The entry naming ``job`` for its (tenant, key), with its TTL and, when it
    expires, its place in the sweep index (purge_expired_keys finds it there)."""
    assert job.idempotency_key is not None
    tenant, name = job.tenant_id, job.idempotency_key
    values: dict[str, Any] = {
        "pk": layout.idem_pk(tenant, name),
        "sk": layout.IDEM_SK,
        "tenant_id": tenant,
        "key": name,
        "job_id": job.job_id,
        "request_hash": job.request_hash,
    }
    if expires_at is not None:
        shard = layout.shard_of(f"{tenant}#{name}", layout.SWEEP_SHARDS)
        values["expires_at"] = expires_at
        values[layout.TTL_ATTRIBUTE] = math.ceil(expires_at)
        values["spk"] = layout.sweep_partition("idem", shard)
        values["ssk"] = f"{layout.sortable_time(expires_at)}#{tenant}#{name}"
    return attributes(values)


def entry_put(table: str, job: Job, *, expires_at: float | None, now: float) -> dict[str, Any]:
    """The entry's Put, only where no live entry holds the key (an expired one, which
    TTL may not have deleted yet, is replaced); ``ALL_OLD`` says whose it is."""
    expression = Expression()
    expiry = expression.name("expires_at")
    condition = f"attribute_not_exists(pk) OR {expiry} <= {expression.value({'N': number(now)})}"
    return put(
        table,
        entry_item(job, expires_at),
        condition=condition,
        ReturnValuesOnConditionCheckFailure="ALL_OLD",
        **expression.arguments(),
    )
