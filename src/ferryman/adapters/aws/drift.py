"""What exists against what ferryman needs: each attribute that disagrees, named.

``ferryman migrate`` (and ``ferryman doctor``) read the table, the queues and the
bucket that are already there and compare them with what the engine relies on.
Each function here takes what AWS described and returns one line per attribute
that disagrees, naming the resource, the attribute, its value and the value it
should have, so the operator (or their IaC) knows exactly what to change. Nothing
here calls AWS (adapters/aws/provision.py reads and passes the descriptions), and
nothing is changed behind the operator's back: a table's key schema cannot be
changed at all, and a redrive policy or retention someone chose is theirs to fix.
"""

from __future__ import annotations

import json
from typing import Any

from ferryman.adapters.aws.layout import TTL_ATTRIBUTE, table_definition

# Messages are kept 14 days (the SQS maximum): a job waits out any outage shorter.
MESSAGE_RETENTION_SECONDS = 14 * 86_400
PUBLIC_ACCESS_BLOCK = (
    "BlockPublicAcls",
    "IgnorePublicAcls",
    "BlockPublicPolicy",
    "RestrictPublicBuckets",
)
ENCRYPTION_ALGORITHMS = frozenset({"AES256", "aws:kms", "aws:kms:dsse"})
_TTL_ON = frozenset({"ENABLED", "ENABLING"})


def _keys(schema: list[dict[str, Any]]) -> str:
    """A key schema as people read it: ``pk (HASH), sk (RANGE)``."""
    return ", ".join(f"{k['AttributeName']} ({k['KeyType']})" for k in schema) or "none"


def _types(definitions: list[dict[str, Any]]) -> dict[str, str]:
    return {d["AttributeName"]: d["AttributeType"] for d in definitions}


def table_disagreements(described: dict[str, Any], ttl: dict[str, Any]) -> list[str]:
    """``described``: DescribeTable's ``Table``; ``ttl``: DescribeTimeToLive's
    ``TimeToLiveDescription``."""
    wanted = table_definition(str(described["TableName"]))
    where = f"table {wanted['TableName']}"
    found: list[str] = []
    if described.get("KeySchema") != wanted["KeySchema"]:
        found.append(
            f"{where}: key schema is {_keys(described.get('KeySchema', []))}; it should be "
            f"{_keys(wanted['KeySchema'])} (a table's keys cannot change: make a new table)"
        )
    types = _types(described.get("AttributeDefinitions", []))
    for name, kind in _types(wanted["AttributeDefinitions"]).items():
        if name in types and types[name] != kind:
            found.append(f"{where}: attribute {name} has type {types[name]}; it should be {kind}")
    indexes = {i["IndexName"]: i for i in described.get("GlobalSecondaryIndexes") or []}
    for index in wanted["GlobalSecondaryIndexes"]:
        found += _index_disagreements(where, index, indexes.get(index["IndexName"]))
    status = ttl.get("TimeToLiveStatus", "DISABLED")
    if status not in _TTL_ON or ttl.get("AttributeName") != TTL_ATTRIBUTE:
        on = f" on attribute {ttl['AttributeName']}" if ttl.get("AttributeName") else ""
        found.append(
            f"{where}: time to live is {status}{on}; it should be ENABLED on attribute "
            f"{TTL_ATTRIBUTE} (expired idempotency entries are never deleted otherwise)"
        )
    return found


def _index_disagreements(
    where: str, wanted: dict[str, Any], index: dict[str, Any] | None
) -> list[str]:
    name = wanted["IndexName"]
    if index is None:
        return [
            f"{where}: index {name} is missing; it should exist with keys "
            f"{_keys(wanted['KeySchema'])}"
        ]
    found: list[str] = []
    if index.get("KeySchema") != wanted["KeySchema"]:
        found.append(
            f"{where}: index {name} has keys {_keys(index.get('KeySchema', []))}; it should "
            f"have {_keys(wanted['KeySchema'])}"
        )
    projection, needed = index.get("Projection") or {}, wanted["Projection"]
    kind = projection.get("ProjectionType")
    if kind != "ALL" and kind != needed["ProjectionType"]:
        found.append(
            f"{where}: index {name} projects {kind}; it should project {needed['ProjectionType']}"
        )
    elif kind == "INCLUDE":
        lacking = sorted(
            set(needed["NonKeyAttributes"]) - set(projection.get("NonKeyAttributes", []))
        )
        if lacking:
            found.append(f"{where}: index {name} does not project {', '.join(lacking)}; it should")
    return found


def _seconds(value: str | None) -> str:
    if value is None:
        return "not set"
    days = int(value) / 86_400
    return f"{value} s ({days:g} days)"


def queue_disagreements(
    queue: str,
    attributes: dict[str, str],
    *,
    dlq: str,
    dlq_arn: str | None,
    max_receives: int,
) -> list[str]:
    """The job queue's: a redrive policy to this DLQ after ``max_receives`` receives,
    and 14 days' retention. ``dlq_arn`` None: the DLQ does not exist yet, so only its
    name is compared."""
    where = f"queue {queue}"
    found: list[str] = []
    raw = attributes.get("RedrivePolicy")
    policy = _redrive(raw)
    target = dlq_arn or f"the ARN of queue {dlq}"
    if policy is None:
        shown = "not set" if raw is None else "unreadable"
        found.append(
            f"{where}: RedrivePolicy is {shown}; it should send to {target} after "
            f"maxReceiveCount={max_receives}"
        )
    else:
        arn = str(policy.get("deadLetterTargetArn"))
        wrong = arn != dlq_arn if dlq_arn is not None else not arn.endswith(f":{dlq}")
        if wrong:
            found.append(
                f"{where}: RedrivePolicy.deadLetterTargetArn is {arn}; it should be {target}"
            )
        count = policy.get("maxReceiveCount")
        if str(count) != str(max_receives):
            found.append(
                f"{where}: RedrivePolicy.maxReceiveCount is {count}; it should be "
                f"{max_receives} (FERRYMAN_MAX_RECEIVES): SQS would dead-letter a job after "
                "a different number of deliveries than ferryman counts"
            )
    retention = attributes.get("MessageRetentionPeriod")
    if retention != str(MESSAGE_RETENTION_SECONDS):
        found.append(
            f"{where}: MessageRetentionPeriod is {_seconds(retention)}; it should be "
            f"{_seconds(str(MESSAGE_RETENTION_SECONDS))}"
        )
    return found


def _redrive(raw: str | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        policy = json.loads(raw)
    except ValueError:
        return None
    return policy if isinstance(policy, dict) else None


def dlq_disagreements(dlq: str, attributes: dict[str, str], *, queue_retention: str) -> list[str]:
    """The DLQ keeps messages at least as long as the job queue: a message moved to a
    standard DLQ keeps its first enqueue time, so a shorter retention there expires
    dead letters early (AWS's advice), before the sweeper marks their jobs FAILED."""
    retention = attributes.get("MessageRetentionPeriod")
    if retention is not None and int(retention) >= int(queue_retention):
        return []
    return [
        f"queue {dlq}: MessageRetentionPeriod is {_seconds(retention)}, shorter than the job "
        f"queue's; it should be at least {_seconds(queue_retention)} (a dead letter keeps "
        "its first enqueue time and would expire early)"
    ]


def bucket_disagreements(
    bucket: str, public_access: dict[str, Any] | None, encryption: dict[str, Any] | None
) -> list[str]:
    """``public_access``: GetPublicAccessBlock's configuration (None: none set);
    ``encryption``: GetBucketEncryption's (None: no default encryption)."""
    where = f"bucket {bucket}"
    found: list[str] = []
    if public_access is None:
        found.append(
            f"{where}: has no public access block; it should have {', '.join(PUBLIC_ACCESS_BLOCK)} "
            "all true"
        )
    else:
        found += [
            f"{where}: public access block {name} is "
            f"{str(public_access.get(name, False)).lower()}; it should be true"
            for name in PUBLIC_ACCESS_BLOCK
            if public_access.get(name) is not True
        ]
    rules = (encryption or {}).get("Rules") or []
    algorithms = {
        str(rule.get("ApplyServerSideEncryptionByDefault", {}).get("SSEAlgorithm"))
        for rule in rules
    }
    if not algorithms & ENCRYPTION_ALGORITHMS:
        found.append(
            f"{where}: default encryption is off; it should be on (SSEAlgorithm AES256 or aws:kms)"
        )
    return found
