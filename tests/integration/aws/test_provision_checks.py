"""``provision`` and ``check`` on what already exists: each attribute that disagrees
with what ferryman needs is named with the value it should have, and left as it is."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.layout import INDEX_SWEEP, TTL_ATTRIBUTE, table_definition
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import check, provision, queue_url, redrive_policy

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation

FOUR_DAYS = str(4 * 86_400)


@pytest.fixture
async def clients(aws_env: dict[str, str]) -> AsyncIterator[AwsClients]:
    async with open_clients() as opened:
        yield opened


@pytest.fixture
def location() -> AwsLocation:
    from aws_emulator import fresh_name

    return parse_aws_url(f"aws://{fresh_name()}")


async def _url(clients: AwsClients, location: AwsLocation, *, dlq: bool = False) -> str:
    url = await queue_url(clients, location.dlq if dlq else location.queue)
    assert url is not None
    return url


async def test_what_provision_made_agrees_with_itself(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=10, bucket=location.name)

    again = await provision(clients, location, max_receives=10, bucket=location.name)
    looked = await check(clients, location, max_receives=10, bucket=location.name)

    assert again.disagreements == []
    assert looked.agrees
    assert looked.existing == again.existing
    assert len(looked.existing) == 4


async def test_a_redrive_after_3_receives_is_named_against_the_configured_10(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=3)

    report = await provision(clients, location, max_receives=10)

    assert report.disagreements == [
        f"queue {location.queue.name}: RedrivePolicy.maxReceiveCount is 3; it should be 10 "
        "(FERRYMAN_MAX_RECEIVES): SQS would dead-letter a job after a different number of "
        "deliveries than ferryman counts"
    ]
    # Reported, not changed: the operator's (or their IaC's) to fix.
    attributes = await clients.sqs.get_queue_attributes(
        QueueUrl=await _url(clients, location), AttributeNames=["RedrivePolicy"]
    )
    assert json.loads(attributes["Attributes"]["RedrivePolicy"])["maxReceiveCount"] == 3


async def test_a_redrive_to_another_queue_and_a_missing_one_are_named(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=10)
    other = await clients.sqs.create_queue(QueueName=f"{location.name}-elsewhere")
    other_arn = (
        await clients.sqs.get_queue_attributes(
            QueueUrl=other["QueueUrl"], AttributeNames=["QueueArn"]
        )
    )["Attributes"]["QueueArn"]
    url = await _url(clients, location)
    await clients.sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"RedrivePolicy": redrive_policy(other_arn, 10)}
    )

    wrong_target = await check(clients, location, max_receives=10)
    await clients.sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    no_policy = await check(clients, location, max_receives=10)

    [line] = wrong_target.disagreements
    assert f"RedrivePolicy.deadLetterTargetArn is {other_arn}; it should be arn:" in line
    assert line.endswith(f":{location.dlq.name}")
    [line] = no_policy.disagreements
    assert line.startswith(f"queue {location.queue.name}: RedrivePolicy is not set; it should")
    assert line.endswith(f":{location.dlq.name} after maxReceiveCount=10")


async def test_short_retention_on_the_queue_and_the_dlq_is_named(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=10)
    await clients.sqs.set_queue_attributes(
        QueueUrl=await _url(clients, location, dlq=True),
        Attributes={"MessageRetentionPeriod": FOUR_DAYS},
    )

    dlq_short = await check(clients, location, max_receives=10)

    assert dlq_short.disagreements == [
        f"queue {location.dlq.name}: MessageRetentionPeriod is 345600 s (4 days), shorter "
        "than the job queue's; it should be at least 1209600 s (14 days) (a dead letter "
        "keeps its first enqueue time and would expire early)"
    ]
    # The job queue at 4 days too: its own retention is named; the DLQ's then agrees.
    await clients.sqs.set_queue_attributes(
        QueueUrl=await _url(clients, location), Attributes={"MessageRetentionPeriod": FOUR_DAYS}
    )
    both_short = await check(clients, location, max_receives=10)
    assert both_short.disagreements == [
        f"queue {location.queue.name}: MessageRetentionPeriod is 345600 s (4 days); it "
        "should be 1209600 s (14 days)"
    ]


async def _table_without(clients: AwsClients, table: str, index: str, *, ttl: bool) -> None:
    definition: dict[str, Any] = table_definition(table)
    kept = [i for i in definition["GlobalSecondaryIndexes"] if i["IndexName"] != index]
    used = {"pk", "sk"} | {k["AttributeName"] for i in kept for k in i["KeySchema"]}
    definition["GlobalSecondaryIndexes"] = kept
    # DynamoDB refuses an attribute definition no key uses.
    definition["AttributeDefinitions"] = [
        d for d in definition["AttributeDefinitions"] if d["AttributeName"] in used
    ]
    await clients.dynamodb.create_table(**definition)
    if ttl:
        await clients.dynamodb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )


async def test_a_table_missing_an_index_is_named(
    clients: AwsClients, location: AwsLocation
) -> None:
    await _table_without(clients, location.table, INDEX_SWEEP, ttl=True)

    report = await provision(clients, location, max_receives=10)

    assert report.disagreements == [
        f"table {location.table}: index {INDEX_SWEEP} is missing; it should exist with keys "
        "spk (HASH), ssk (RANGE)"
    ]
    assert f"table {location.table}" in report.existing


async def test_time_to_live_off_is_named_and_left_off(
    clients: AwsClients, location: AwsLocation
) -> None:
    await _table_without(clients, location.table, "no such index", ttl=False)

    report = await provision(clients, location, max_receives=10)

    assert report.disagreements == [
        f"table {location.table}: time to live is DISABLED; it should be ENABLED on attribute "
        "ttl (expired idempotency entries are never deleted otherwise)"
    ]
    ttl = await clients.dynamodb.describe_time_to_live(TableName=location.table)
    assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "DISABLED"


async def test_a_table_with_other_keys_is_named(clients: AwsClients, location: AwsLocation) -> None:
    await clients.dynamodb.create_table(
        TableName=location.table,
        AttributeDefinitions=[{"AttributeName": "id", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )

    report = await check(clients, location, max_receives=10)

    assert report.disagreements[0] == (
        f"table {location.table}: key schema is id (HASH); it should be pk (HASH), sk (RANGE) "
        "(a table's keys cannot change: make a new table)"
    )
    # Every index is missing too, and TTL is off: each named on its own line.
    assert len(report.disagreements) == 1 + len(table_definition("t")["GlobalSecondaryIndexes"]) + 1


async def test_public_access_block_off_is_named(clients: AwsClients, location: AwsLocation) -> None:
    await provision(clients, location, max_receives=10, bucket=location.name)
    await clients.s3.put_public_access_block(
        Bucket=location.name,
        PublicAccessBlockConfiguration={
            "BlockPublicAcls": True,
            "IgnorePublicAcls": True,
            "BlockPublicPolicy": False,
            "RestrictPublicBuckets": False,
        },
    )

    partly = await check(clients, location, max_receives=10, bucket=location.name)
    await clients.s3.delete_public_access_block(Bucket=location.name)
    none = await check(clients, location, max_receives=10, bucket=location.name)

    assert partly.disagreements == [
        f"bucket {location.name}: public access block BlockPublicPolicy is false; it should be true",
        f"bucket {location.name}: public access block RestrictPublicBuckets is false; it should "
        "be true",
    ]
    assert none.disagreements == [
        f"bucket {location.name}: has no public access block; it should have BlockPublicAcls, "
        "IgnorePublicAcls, BlockPublicPolicy, RestrictPublicBuckets all true"
    ]


async def test_a_bucket_without_default_encryption_is_named(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=10, bucket=location.name)
    await clients.s3.delete_bucket_encryption(Bucket=location.name)

    report = await check(clients, location, max_receives=10, bucket=location.name)

    assert report.disagreements == [
        f"bucket {location.name}: default encryption is off; it should be on (SSEAlgorithm "
        "AES256 or aws:kms)"
    ]


async def test_check_creates_nothing_and_lists_what_is_missing(
    clients: AwsClients, location: AwsLocation
) -> None:
    report = await check(clients, location, max_receives=10, bucket=location.name)

    assert report.missing == [
        f"table {location.table}",
        f"queue {location.dlq.name}",
        f"queue {location.queue.name}",
        f"bucket {location.name}",
    ]
    assert report.created == []
    assert not report.agrees
    tables = await clients.dynamodb.list_tables()
    assert location.table not in tables["TableNames"]
    assert await queue_url(clients, location.queue) is None
    assert await queue_url(clients, location.dlq) is None
    buckets = await clients.s3.list_buckets()
    assert location.name not in {b["Name"] for b in buckets["Buckets"]}


async def test_check_with_the_dlq_missing_names_the_redrive_by_the_dlq_s_name(
    clients: AwsClients, location: AwsLocation
) -> None:
    await provision(clients, location, max_receives=10)
    await clients.sqs.delete_queue(QueueUrl=await _url(clients, location, dlq=True))

    report = await check(clients, location, max_receives=10)

    # The redrive still names the DLQ by its ARN: only the queue itself is missing.
    assert report.missing == [f"queue {location.dlq.name}"]
    assert report.disagreements == []
