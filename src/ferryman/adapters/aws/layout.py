"""The DynamoDB table's shape: its keys, its indexes, its TTL attribute, and its shards.

One table holds everything the engine keeps (a single-table design): each item's
``pk`` and ``sk`` say what it is. ``ferryman migrate`` creates the table from
``table_definition`` and checks an existing one against it (adapters/aws/provision.py);
the job store (adapters/aws/store.py) is the only writer of the items below.

Item kinds (pk / sk):

- a job: ``job#<job_id>`` / ``job``; its input ``input`` (written once, apart, so the
  job item each change rewrites stays small: a write costs a unit per KB); its events ``event#<seq:010d>`` and attempts
  ``attempt#<attempt_id>`` under the same pk, so one Query reads a job's history and
  a change names an attempt it closes by the id the change carries;
- an idempotency entry: ``idem#<tenant>#<key>`` / ``idem``, with TTL;
- the per-tenant counters, sharded so no single item takes a tenant's every write:
  ``usage#<tenant>`` / ``shard#<n>``;
- the readiness probe's item: ``probe`` / ``probe``;
- a tenant's webhook signing secrets, sealed: ``webhook_secret#<tenant>`` / ``secret``
  (webhook_secrets.py);
- a purge marker: ``purging`` / ``<job_id>``, written in the transaction that deletes
  a job whose history is over one transaction's room, deleted once the rest is gone
  (store_upkeep.py: a purge stopped in between is finished by the next);
- API keys, operator switches, the audit log, shared limits: see their modules.

Indexes (every one sparse: an item is in an index only while it has that index's keys):

- ``by_tenant``: a tenant's jobs, newest first (``t#<tenant>`` / job id, a ULID);
- ``all_jobs``: every tenant's jobs over ALL_JOBS_SHARDS partitions (``all#<n>`` / job
  id), merged newest first by the reader, so no single partition takes every write;
- ``sweep``: what the sweeper and retention look for, by time, over SWEEP_SHARDS
  partitions each: ``open#<n>`` the unfinished jobs something may fail to drive (all
  but QUEUED jobs whose message was sent), by update time; ``done#<n>`` the finished
  jobs, by completion; ``idem#<n>`` the idempotency entries that expire, by expiry;
- ``attempts_by_day``: attempt items by the UTC day they started, each day over
  ATTEMPT_DAY_SHARDS partitions (``day#<YYYY-MM-DD>#<n>`` / ``<tenant>#<attempt_id>``);
- ``dead_letters``: the jobs failed because their message was dead-lettered, over
  DEAD_LETTER_SHARDS partitions (``dead#<n>`` / job id): the operators' dead-letter
  list reads these few jobs, not every job there is;
- ``webhooks``: the finished jobs whose completion webhook is owed (ports/store.py's
  webhook outbox), over WEBHOOK_SHARDS partitions (``hook#<n>`` /
  ``<due time>#<job_id>``), so the dispatcher reads what is due, earliest first, and
  never a job that owes nothing. A job is in it exactly while its ``webhook_due_at`` is
  set, and meanwhile out of the sweep index's ``done`` partitions (retention keeps an
  owed job: the purge never sees it until its notification is delivered or given up).

A shard is chosen from the item's own id (crc32, stable across processes), so a job's
every write lands on the same shard of each sharded thing: its create and its finish
move the same counter item.
"""

from __future__ import annotations

import zlib
from datetime import UTC, datetime
from typing import Any

# Epoch seconds (a Number) after which DynamoDB may delete the item. Deletion lags by
# up to days: every read that cares filters on it (an expired entry is not there).
TTL_ATTRIBUTE = "ttl"

# Global secondary indexes.
INDEX_BY_TENANT = "by_tenant"
INDEX_ALL_JOBS = "all_jobs"
INDEX_SWEEP = "sweep"
INDEX_ATTEMPTS = "attempts_by_day"
INDEX_DEAD_LETTERS = "dead_letters"
INDEX_WEBHOOKS = "webhooks"

ALL_JOBS_SHARDS = 16
SWEEP_SHARDS = 16
ATTEMPT_DAY_SHARDS = 8
# Dead letters are few, but a queue emptied into the DLQ at once brings many together.
DEAD_LETTER_SHARDS = 4
# Each owed notification moves its entry about three times (owed, claimed, settled):
# enough partitions for several thousand finishes a second, few enough that the
# dispatcher's read of every one of them stays cheap when nothing is due.
WEBHOOK_SHARDS = 8
# A tenant's counters: one transaction may touch an item once, and items of one
# partition take about 1,000 writes a second, so a tenant's jobs spread over these.
COUNTER_SHARDS = 8

JOB_SK = "job"
INPUT_SK = "input"
PURGING_PK = "purging"
IDEM_SK = "idem"
EVENT_PREFIX = "event#"
ATTEMPT_PREFIX = "attempt#"

# What a list of jobs reads of each job's item (ports/store.py's JobSummary), never its
# input; with error_code, which lists filter on.
SUMMARY_ATTRIBUTES = (
    "tenant_id",
    "job_id",
    "status",
    "task",
    "model",
    "created_at",
    "updated_at",
    "completed_at",
    "attempt_count",
    "correlation_id",
    "metadata",
    "error",
    "error_code",
    "cancel_requested",
    "attempt_id",
    "result_ref",
    "fallback_level",
)
# What the sweeper's scans filter on (and what a purge needs besides the keys).
SWEEP_ATTRIBUTES = (
    "status",
    "dispatch_state",
    "updated_at",
    "lease_until",
    "not_before",
    "completed_at",
    "expires_at",
)
# What a usage report sums (never an attempt's raw output).
ATTEMPT_REPORT_ATTRIBUTES = (
    "tenant_id",
    "task",
    "model",
    "started_at",
    "outcome",
    "failure_class",
    "input_tokens",
    "output_tokens",
    "cost_nano_usd",
    "finish_reason",
)

_KEYS = {
    INDEX_BY_TENANT: ("tpk", "tsk"),
    INDEX_ALL_JOBS: ("apk", "ask"),
    INDEX_SWEEP: ("spk", "ssk"),
    INDEX_ATTEMPTS: ("dpk", "dsk"),
    INDEX_DEAD_LETTERS: ("lpk", "lsk"),
    INDEX_WEBHOOKS: ("wpk", "wsk"),
}
# What the list indexes hold besides their keys: only what never changes after a job is
# stored, so no change to a job rewrites its entries there (an index entry written is a
# write unit); a list reads the summaries from the jobs' own items (store_listing.py).
LIST_INDEX_ATTRIBUTES = ("job_id", "task")
_PROJECTIONS: dict[str, dict[str, Any]] = {
    INDEX_BY_TENANT: {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(LIST_INDEX_ATTRIBUTES)},
    INDEX_ALL_JOBS: {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(LIST_INDEX_ATTRIBUTES)},
    INDEX_SWEEP: {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(SWEEP_ATTRIBUTES)},
    INDEX_ATTEMPTS: {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": list(ATTEMPT_REPORT_ATTRIBUTES),
    },
    INDEX_DEAD_LETTERS: {
        "ProjectionType": "INCLUDE",
        "NonKeyAttributes": list(LIST_INDEX_ATTRIBUTES),
    },
    # The keys say which job is due when; the dispatcher reads each due job whole from
    # the table anyway (the index lags it), so an entry holds nothing a change rewrites.
    INDEX_WEBHOOKS: {"ProjectionType": "KEYS_ONLY"},
}


def _attribute_definitions() -> list[dict[str, str]]:
    names = ["pk", "sk"] + [name for pair in _KEYS.values() for name in pair]
    return [{"AttributeName": name, "AttributeType": "S"} for name in names]


def _indexes() -> list[dict[str, Any]]:
    return [
        {
            "IndexName": index,
            "KeySchema": [
                {"AttributeName": hash_key, "KeyType": "HASH"},
                {"AttributeName": range_key, "KeyType": "RANGE"},
            ],
            "Projection": _PROJECTIONS[index],
        }
        for index, (hash_key, range_key) in _KEYS.items()
    ]


def table_definition(table_name: str) -> dict[str, Any]:
    """CreateTable's arguments for the engine's table (on-demand capacity)."""
    return {
        "TableName": table_name,
        "AttributeDefinitions": _attribute_definitions(),
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": _indexes(),
        "BillingMode": "PAY_PER_REQUEST",
        "SSESpecification": {"Enabled": True},
    }


def index_keys(index: str) -> tuple[str, str]:
    """The (partition, sort) key attributes of an index."""
    return _KEYS[index]


# --- keys -------------------------------------------------------------------------


def shard_of(value: str, shards: int) -> int:
    """A stable shard for an id: crc32, the same in every process (``hash`` is not)."""
    return zlib.crc32(value.encode()) % shards


def job_pk(job_id: str) -> str:
    return f"job#{job_id}"


def event_sk(seq: int) -> str:
    return f"{EVENT_PREFIX}{seq:010d}"


def attempt_sk(attempt_id: str) -> str:
    return f"{ATTEMPT_PREFIX}{attempt_id}"


def idem_pk(tenant_id: str, key: str) -> str:
    return f"idem#{tenant_id}#{key}"


def counter_pk(tenant_id: str) -> str:
    return f"usage#{tenant_id}"


def counter_sk(job_id: str) -> str:
    return f"shard#{shard_of(job_id, COUNTER_SHARDS)}"


def tenant_partition(tenant_id: str) -> str:
    return f"t#{tenant_id}"


def all_jobs_partition(shard: int) -> str:
    return f"all#{shard}"


def dead_letter_partition(shard: int) -> str:
    return f"dead#{shard}"


def webhook_partition(shard: int) -> str:
    return f"hook#{shard}"


def sweep_partition(kind: str, shard: int) -> str:
    """``open``, ``done`` or ``idem``, and a shard."""
    return f"{kind}#{shard}"


def day_partition(day: str, shard: int) -> str:
    return f"day#{day}#{shard}"


def utc_day(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d")


# Epoch seconds as text that sorts as the number does: 10 integer digits and
# microseconds (clamped to [0, 1e10), 2286 AD). Rounding is monotonic, so a bound
# written the same way, followed by "~" (after "#" and every id), covers every time
# below it; readers filter on the exact Number beside it.
_MAX_SORTABLE = 9_999_999_999.999999


def sortable_time(at: float) -> str:
    return f"{min(max(at, 0.0), _MAX_SORTABLE):017.6f}"


def time_bound(at: float) -> str:
    """A sort key bound above every ``sortable_time(t)#...`` with t <= at."""
    return sortable_time(at) + "~"
