"""adapters/aws/drift.py: what AWS described, against what ferryman needs (no AWS here)."""

from __future__ import annotations

import copy
from typing import Any

from ferryman.adapters.aws.drift import (
    bucket_disagreements,
    dlq_disagreements,
    queue_disagreements,
    table_disagreements,
)
from ferryman.adapters.aws.layout import (
    INDEX_ALL_JOBS,
    INDEX_BY_TENANT,
    INDEX_WEBHOOKS,
    table_definition,
)

TTL_ON = {"TimeToLiveStatus": "ENABLED", "AttributeName": "ttl"}
DLQ_ARN = "arn:aws:sqs:us-east-1:123456789012:app-jobs-dlq"
ALL_BLOCKED = dict.fromkeys(
    ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy", "RestrictPublicBuckets"), True
)
AES = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]}


def _described() -> dict[str, Any]:
    return copy.deepcopy(table_definition("app"))


def _index(described: dict[str, Any], name: str) -> dict[str, Any]:
    return next(i for i in described["GlobalSecondaryIndexes"] if i["IndexName"] == name)


def test_the_table_as_defined_agrees() -> None:
    assert table_disagreements(_described(), TTL_ON) == []
    assert table_disagreements(_described(), {**TTL_ON, "TimeToLiveStatus": "ENABLING"}) == []


def test_an_index_with_other_keys_or_a_narrower_projection_is_named() -> None:
    described = _described()
    _index(described, INDEX_BY_TENANT)["KeySchema"] = [{"AttributeName": "tpk", "KeyType": "HASH"}]
    _index(described, INDEX_ALL_JOBS)["Projection"] = {"ProjectionType": "KEYS_ONLY"}

    assert table_disagreements(described, TTL_ON) == [
        f"table app: index {INDEX_BY_TENANT} has keys tpk (HASH); it should have "
        "tpk (HASH), tsk (RANGE)",
        f"table app: index {INDEX_ALL_JOBS} projects KEYS_ONLY; it should project INCLUDE",
    ]


def test_an_include_projection_missing_attributes_is_named_and_all_is_enough() -> None:
    described = _described()
    projection = _index(described, INDEX_BY_TENANT)["Projection"]
    projection["NonKeyAttributes"] = [a for a in projection["NonKeyAttributes"] if a != "task"]
    _index(described, INDEX_ALL_JOBS)["Projection"] = {"ProjectionType": "ALL"}

    assert table_disagreements(described, TTL_ON) == [
        f"table app: index {INDEX_BY_TENANT} does not project task; it should"
    ]


def test_a_table_made_before_webhooks_is_told_to_add_their_index() -> None:
    described = _described()
    described["GlobalSecondaryIndexes"] = [
        i for i in described["GlobalSecondaryIndexes"] if i["IndexName"] != INDEX_WEBHOOKS
    ]

    assert table_disagreements(described, TTL_ON) == [
        f"table app: index {INDEX_WEBHOOKS} is missing; it should exist with keys "
        "wpk (HASH), wsk (RANGE)"
    ]


def test_ttl_on_another_attribute_or_a_key_of_another_type_is_named() -> None:
    described = _described()
    described["AttributeDefinitions"][0] = {"AttributeName": "pk", "AttributeType": "N"}

    assert table_disagreements(
        described, {"TimeToLiveStatus": "ENABLED", "AttributeName": "exp"}
    ) == [
        "table app: attribute pk has type N; it should be S",
        "table app: time to live is ENABLED on attribute exp; it should be ENABLED on attribute "
        "ttl (expired idempotency entries are never deleted otherwise)",
    ]


def test_an_unreadable_redrive_policy_is_named() -> None:
    attributes = {"RedrivePolicy": "not json", "MessageRetentionPeriod": "1209600"}

    assert queue_disagreements(
        "app-jobs", attributes, dlq="app-jobs-dlq", dlq_arn=DLQ_ARN, max_receives=10
    ) == [
        f"queue app-jobs: RedrivePolicy is unreadable; it should send to {DLQ_ARN} after "
        "maxReceiveCount=10"
    ]


def test_a_dlq_keeping_messages_longer_than_the_queue_agrees() -> None:
    assert (
        dlq_disagreements("d", {"MessageRetentionPeriod": "1209600"}, queue_retention="345600")
        == []
    )
    assert (
        dlq_disagreements("d", {"MessageRetentionPeriod": "345600"}, queue_retention="345600") == []
    )


def test_a_bucket_with_kms_encryption_agrees_and_without_any_is_named() -> None:
    kms = {"Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "aws:kms"}}]}
    assert bucket_disagreements("b", ALL_BLOCKED, kms) == []
    assert bucket_disagreements("b", ALL_BLOCKED, AES) == []
    assert bucket_disagreements("b", ALL_BLOCKED, None) == [
        "bucket b: default encryption is off; it should be on (SSEAlgorithm AES256 or aws:kms)"
    ]
