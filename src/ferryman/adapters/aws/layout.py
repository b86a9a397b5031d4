"""The DynamoDB table's shape: its keys, its indexes and its TTL attribute.

One table holds everything the engine keeps (a single-table design): each item's
``pk`` and ``sk`` say what it is. ``ferryman migrate`` creates the table from
``TABLE`` and checks an existing one against it (adapters/aws/provision.py); the
store (adapters/aws/store.py) is the only writer of the items.

Item kinds (pk / sk):

- a job: ``job#<job_id>`` / ``job``; its events ``event#<seq:010d>`` and attempts
  ``attempt#<no:06d>`` under the same pk, so one Query reads a job's history;
- an idempotency entry: ``idem#<tenant>#<key>`` / ``idem``, with TTL;
- the per-tenant counters, sharded so no single item takes a tenant's every write:
  ``usage#<tenant>`` / ``shard#<n>``;
- API keys, operator switches, the audit log, shared limits: see their modules.
"""

from __future__ import annotations

from typing import Any

# Epoch seconds (a Number) after which DynamoDB may delete the item. Deletion lags by
# up to days: every read that cares filters on it (an expired entry is not there).
TTL_ATTRIBUTE = "ttl"

# Global secondary indexes: name -> (partition key, sort key, projection).
INDEX_BY_TENANT = "by_tenant"  # a tenant's jobs, newest first (sort key: job id, a ULID)
INDEX_ALL_JOBS = "all_jobs"  # every tenant's jobs, over ALL_JOBS_SHARDS partitions
INDEX_SWEEP = "sweep"  # sparse: unfinished jobs by update time, finished by completion
INDEX_ATTEMPTS = "attempts_by_day"  # attempt items by the UTC day they started

ALL_JOBS_SHARDS = 16

# What a list of jobs reads (ports/store.py's JobSummary), never a job's input.
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
    "cancel_requested",
    "attempt_id",
    "result_ref",
    "fallback_level",
)

_KEYS = {
    INDEX_BY_TENANT: ("tpk", "tsk"),
    INDEX_ALL_JOBS: ("apk", "ask"),
    INDEX_SWEEP: ("spk", "ssk"),
    INDEX_ATTEMPTS: ("dpk", "dsk"),
}
_PROJECTIONS: dict[str, dict[str, Any]] = {
    INDEX_BY_TENANT: {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(SUMMARY_ATTRIBUTES)},
    INDEX_ALL_JOBS: {"ProjectionType": "INCLUDE", "NonKeyAttributes": list(SUMMARY_ATTRIBUTES)},
    INDEX_SWEEP: {"ProjectionType": "KEYS_ONLY"},
    INDEX_ATTEMPTS: {"ProjectionType": "ALL"},
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
