"""``ferryman migrate`` on an ``aws://`` URL: create what is missing, check what exists.

Creates the table (adapters/aws/layout.py, TTL on), the dead-letter queue, the job
queue with its redrive policy (``maxReceiveCount`` = the engine's max_receives) and,
when FERRYMAN_RESULTS_URL is ``s3://``, the bucket (encrypted, public access blocked).
What exists is checked, not changed: each attribute that disagrees with the settings is
named with the value it should have, for the operator (or their IaC) to fix.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.errors import MISSING_CODES, error_code
from ferryman.adapters.aws.layout import TTL_ATTRIBUTE, table_definition

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation, QueueName

# The queue's default visibility timeout: a worker sets its own on every receive; this
# one only matters to a consumer that does not (the Lambda event source mapping, whose
# rule is at least 6x the function timeout: ``ferryman doctor`` checks it).
DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 900
# Messages are kept 14 days (the SQS maximum): a job waits out any outage shorter.
MESSAGE_RETENTION_SECONDS = 14 * 86_400
# Long polling by default, so a consumer that forgets WaitTimeSeconds still long-polls.
RECEIVE_WAIT_SECONDS = 20


@dataclass(slots=True)
class ProvisionReport:
    """What ``migrate`` did and found."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    # Each: what disagrees and the value it should have.
    disagreements: list[str] = field(default_factory=list)


async def queue_url(clients: AwsClients, queue: QueueName) -> str | None:
    """The queue's URL (None when it does not exist)."""
    if queue.url is not None:
        return queue.url
    try:
        response = await clients.sqs.get_queue_url(QueueName=queue.name)
    except Exception as exc:
        if error_code(exc) in MISSING_CODES:
            return None
        raise
    return str(response["QueueUrl"])


async def _ensure_table(clients: AwsClients, table: str, report: ProvisionReport) -> None:
    try:
        await clients.dynamodb.describe_table(TableName=table)
    except Exception as exc:
        if error_code(exc) not in MISSING_CODES:
            raise
        await clients.dynamodb.create_table(**table_definition(table))
        waiter = clients.dynamodb.get_waiter("table_exists")
        await waiter.wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
        await clients.dynamodb.update_time_to_live(
            TableName=table,
            TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
        )
        report.created.append(f"table {table}")
        return
    report.existing.append(f"table {table}")


async def _ensure_queue(
    clients: AwsClients,
    queue: QueueName,
    attributes: dict[str, str],
    report: ProvisionReport,
) -> str:
    url = await queue_url(clients, queue)
    if url is None:
        response = await clients.sqs.create_queue(QueueName=queue.name, Attributes=attributes)
        report.created.append(f"queue {queue.name}")
        return str(response["QueueUrl"])
    report.existing.append(f"queue {queue.name}")
    return url


async def _queue_arn(clients: AwsClients, url: str) -> str:
    response = await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(response["Attributes"]["QueueArn"])


def redrive_policy(dlq_arn: str, max_receives: int) -> str:
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receives})


async def provision(
    clients: AwsClients,
    location: AwsLocation,
    *,
    max_receives: int,
    bucket: str | None = None,
) -> ProvisionReport:
    """Create what is missing of the table, the queues and the bucket."""
    report = ProvisionReport()
    await _ensure_table(clients, location.table, report)
    dlq_url = await _ensure_queue(
        clients,
        location.dlq,
        {"MessageRetentionPeriod": str(MESSAGE_RETENTION_SECONDS)},
        report,
    )
    dlq_arn = await _queue_arn(clients, dlq_url)
    await _ensure_queue(
        clients,
        location.queue,
        {
            "VisibilityTimeout": str(DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
            "MessageRetentionPeriod": str(MESSAGE_RETENTION_SECONDS),
            "ReceiveMessageWaitTimeSeconds": str(RECEIVE_WAIT_SECONDS),
            "RedrivePolicy": redrive_policy(dlq_arn, max_receives),
        },
        report,
    )
    if bucket is not None:
        await _ensure_bucket(clients, bucket, report)
    return report


async def _ensure_bucket(clients: AwsClients, bucket: str, report: ProvisionReport) -> None:
    try:
        await clients.s3.head_bucket(Bucket=bucket)
    except Exception as exc:
        if error_code(exc) not in {*MISSING_CODES, "404", "NotFound"}:
            raise
        create: dict[str, Any] = {"Bucket": bucket}
        if clients.region != "us-east-1":
            create["CreateBucketConfiguration"] = {"LocationConstraint": clients.region}
        await clients.s3.create_bucket(**create)
        await asyncio.gather(
            clients.s3.put_public_access_block(
                Bucket=bucket,
                PublicAccessBlockConfiguration={
                    "BlockPublicAcls": True,
                    "IgnorePublicAcls": True,
                    "BlockPublicPolicy": True,
                    "RestrictPublicBuckets": True,
                },
            ),
            clients.s3.put_bucket_encryption(
                Bucket=bucket,
                ServerSideEncryptionConfiguration={
                    "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
                },
            ),
        )
        report.created.append(f"bucket {bucket}")
        return
    report.existing.append(f"bucket {bucket}")
