"""``ferryman migrate`` on an ``aws://`` URL: create what is missing, check what exists.

Creates the table (adapters/aws/layout.py, TTL on), the dead-letter queue, the job
queue with its redrive policy (``maxReceiveCount`` = the engine's max_receives) and,
when FERRYMAN_RESULTS_URL is ``s3://``, the bucket (encrypted, public access blocked).
What exists is checked, not changed: each attribute that disagrees with the settings is
named with the value it should have, for the operator (or their IaC) to fix
(adapters/aws/drift.py says which and why). ``check`` does the same reading and
creates nothing, for ``ferryman doctor``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws import drift
from ferryman.adapters.aws.drift import MESSAGE_RETENTION_SECONDS
from ferryman.adapters.aws.errors import MISSING_CODES, error_code, translate_errors
from ferryman.adapters.aws.layout import TTL_ATTRIBUTE, table_definition

if TYPE_CHECKING:
    from collections.abc import Awaitable

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation, QueueName

# The queue's default visibility timeout: a worker sets its own on every receive; this
# one only matters to a consumer that does not (the Lambda event source mapping, whose
# rule is at least 6x the function timeout: ``ferryman doctor`` checks it).
DEFAULT_VISIBILITY_TIMEOUT_SECONDS = 900
# Long polling by default, so a consumer that forgets WaitTimeSeconds still long-polls.
RECEIVE_WAIT_SECONDS = 20


# What GetPublicAccessBlock and GetBucketEncryption answer for a bucket with none set.
_NO_PUBLIC_ACCESS_BLOCK = "NoSuchPublicAccessBlockConfiguration"
_NO_ENCRYPTION = "ServerSideEncryptionConfigurationNotFoundError"
_BUCKET_MISSING = frozenset({*MISSING_CODES, "404", "NotFound"})
_PUBLIC_ACCESS_BLOCK = dict.fromkeys(drift.PUBLIC_ACCESS_BLOCK, True)

__all__ = [
    "MESSAGE_RETENTION_SECONDS",
    "ProvisionReport",
    "check",
    "provision",
    "queue_url",
    "redrive_policy",
]


@dataclass(slots=True)
class ProvisionReport:
    """What ``migrate`` (or ``check``) did and found."""

    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    # What ``check`` found missing (``provision`` creates it instead).
    missing: list[str] = field(default_factory=list)
    # Each: what disagrees and the value it should have.
    disagreements: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        """Everything is there and as ferryman needs it."""
        return not self.missing and not self.disagreements


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


def redrive_policy(dlq_arn: str, max_receives: int) -> str:
    return json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": max_receives})


async def provision(
    clients: AwsClients,
    location: AwsLocation,
    *,
    max_receives: int,
    bucket: str | None = None,
) -> ProvisionReport:
    """Create what is missing of the table, the queues and the bucket; check what
    exists (``ProvisionReport.disagreements``), changing none of it."""
    return await _survey(clients, location, max_receives=max_receives, bucket=bucket, create=True)


async def check(
    clients: AwsClients,
    location: AwsLocation,
    *,
    max_receives: int,
    bucket: str | None = None,
) -> ProvisionReport:
    """Only look: what is missing (``ProvisionReport.missing``) and what disagrees.
    Creates and changes nothing (``ferryman doctor``)."""
    return await _survey(clients, location, max_receives=max_receives, bucket=bucket, create=False)


async def _survey(
    clients: AwsClients,
    location: AwsLocation,
    *,
    max_receives: int,
    bucket: str | None,
    create: bool,
) -> ProvisionReport:
    report = ProvisionReport()
    # An outage is StoreUnavailableError naming the service; a refusal (AccessDenied,
    # a limit) propagates as the SDK's error for the caller to show.
    with translate_errors("dynamodb"):
        await _table(clients, location.table, report, create=create)
    with translate_errors("sqs"):
        await _queues(clients, location, report, max_receives=max_receives, create=create)
    if bucket is not None:
        with translate_errors("s3"):
            await _bucket(clients, bucket, report, create=create)
    return report


# --- the table ---


async def _table(clients: AwsClients, table: str, report: ProvisionReport, *, create: bool) -> None:
    try:
        described = await clients.dynamodb.describe_table(TableName=table)
    except Exception as exc:
        if error_code(exc) not in MISSING_CODES:
            raise
        if not create:
            report.missing.append(f"table {table}")
            return
        await _create_table(clients, table)
        report.created.append(f"table {table}")
        return
    report.existing.append(f"table {table}")
    ttl = await clients.dynamodb.describe_time_to_live(TableName=table)
    report.disagreements += drift.table_disagreements(
        described["Table"], ttl.get("TimeToLiveDescription") or {}
    )


async def _create_table(clients: AwsClients, table: str) -> None:
    await clients.dynamodb.create_table(**table_definition(table))
    waiter = clients.dynamodb.get_waiter("table_exists")
    await waiter.wait(TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 120})
    await clients.dynamodb.update_time_to_live(
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )


# --- the queues ---


async def _queues(
    clients: AwsClients,
    location: AwsLocation,
    report: ProvisionReport,
    *,
    max_receives: int,
    create: bool,
) -> None:
    dlq_attributes = {"MessageRetentionPeriod": str(MESSAGE_RETENTION_SECONDS)}
    dlq_url, dlq_found = await _queue(clients, location.dlq, dlq_attributes, report, create=create)
    dlq_arn = dlq_found.get("QueueArn")
    if dlq_url is not None and dlq_arn is None:
        dlq_arn = await _queue_arn(clients, dlq_url)
    queue_attributes = {
        "VisibilityTimeout": str(DEFAULT_VISIBILITY_TIMEOUT_SECONDS),
        "MessageRetentionPeriod": str(MESSAGE_RETENTION_SECONDS),
        "ReceiveMessageWaitTimeSeconds": str(RECEIVE_WAIT_SECONDS),
    }
    if dlq_arn is not None:
        queue_attributes["RedrivePolicy"] = redrive_policy(dlq_arn, max_receives)
    _, queue_found = await _queue(clients, location.queue, queue_attributes, report, create=create)
    if queue_found:
        report.disagreements += drift.queue_disagreements(
            location.queue.name,
            queue_found,
            dlq=location.dlq.name,
            dlq_arn=dlq_arn,
            max_receives=max_receives,
        )
    if dlq_found:
        queue_retention = (queue_found or queue_attributes)["MessageRetentionPeriod"]
        report.disagreements += drift.dlq_disagreements(
            location.dlq.name, dlq_found, queue_retention=queue_retention
        )


async def _queue(
    clients: AwsClients,
    queue: QueueName,
    attributes: dict[str, str],
    report: ProvisionReport,
    *,
    create: bool,
) -> tuple[str | None, dict[str, str]]:
    """The queue's URL (None: missing and not created) and, when it existed, its
    attributes ({} for one made here: it has the attributes given)."""
    url = await queue_url(clients, queue)
    found = None if url is None else await _attributes(clients, url)
    if url is not None and found is not None:
        report.existing.append(f"queue {queue.name}")
        return url, found
    if not create:
        report.missing.append(f"queue {queue.name}")
        return None, {}
    response = await clients.sqs.create_queue(QueueName=queue.name, Attributes=attributes)
    report.created.append(f"queue {queue.name}")
    return str(response["QueueUrl"]), {}


async def _attributes(clients: AwsClients, url: str) -> dict[str, str] | None:
    """Every attribute of the queue at ``url``; None when there is none (a queue URL
    given in the aws:// URL names a queue that may not exist)."""
    try:
        response = await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    except Exception as exc:
        if error_code(exc) in MISSING_CODES:
            return None
        raise
    return {str(k): str(v) for k, v in response.get("Attributes", {}).items()}


async def _queue_arn(clients: AwsClients, url: str) -> str:
    response = await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
    return str(response["Attributes"]["QueueArn"])


# --- the bucket ---


async def _bucket(
    clients: AwsClients, bucket: str, report: ProvisionReport, *, create: bool
) -> None:
    try:
        await clients.s3.head_bucket(Bucket=bucket)
    except Exception as exc:
        if error_code(exc) not in _BUCKET_MISSING:
            raise
        if not create:
            report.missing.append(f"bucket {bucket}")
            return
        await _create_bucket(clients, bucket)
        report.created.append(f"bucket {bucket}")
        return
    report.existing.append(f"bucket {bucket}")
    public_access, encryption = await asyncio.gather(
        _optional(
            clients.s3.get_public_access_block(Bucket=bucket),
            "PublicAccessBlockConfiguration",
            _NO_PUBLIC_ACCESS_BLOCK,
        ),
        _optional(
            clients.s3.get_bucket_encryption(Bucket=bucket),
            "ServerSideEncryptionConfiguration",
            _NO_ENCRYPTION,
        ),
    )
    report.disagreements += drift.bucket_disagreements(bucket, public_access, encryption)


async def _optional(call: Awaitable[dict[str, Any]], field_name: str, absent: str) -> Any:
    """``field_name`` of the call's answer; None when S3 says none is set (``absent``)."""
    try:
        response = await call
    except Exception as exc:
        if error_code(exc) == absent:
            return None
        raise
    return response.get(field_name)


async def _create_bucket(clients: AwsClients, bucket: str) -> None:
    create: dict[str, Any] = {"Bucket": bucket}
    if clients.region != "us-east-1":
        create["CreateBucketConfiguration"] = {"LocationConstraint": clients.region}
    await clients.s3.create_bucket(**create)
    await asyncio.gather(
        clients.s3.put_public_access_block(
            Bucket=bucket, PublicAccessBlockConfiguration=_PUBLIC_ACCESS_BLOCK
        ),
        clients.s3.put_bucket_encryption(
            Bucket=bucket,
            ServerSideEncryptionConfiguration={
                "Rules": [{"ApplyServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]
            },
        ),
    )
