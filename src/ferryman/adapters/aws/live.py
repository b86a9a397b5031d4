"""What ``ferryman doctor`` reads of a live AWS deployment, for adapters/aws/timeouts.py.

The job queue's attributes and redrive policy, its dead-letter queue's retention,
and each Lambda event source mapping that consumes the queue with its function's
timeout. It only reads: nothing is created or changed, whatever it finds.

The Lambda client is made here, from the same aiobotocore session and configuration
the engine's clients use (adapters/aws/clients.py), for the length of one look: the
engine itself never calls Lambda, so AwsClients does not carry one.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.clients import _config
from ferryman.adapters.aws.errors import MISSING_CODES, error_code, translate_errors
from ferryman.adapters.aws.provision import queue_url
from ferryman.adapters.aws.timeouts import MappingObserved, QueueObserved

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import AwsLocation, QueueName

# A handful of mappings at most consume one queue; one page says them all.
_MAPPINGS_PAGE = 100


class QueueNotFoundError(LookupError):
    """The job queue the aws:// URL names does not exist."""


@dataclass(frozen=True, slots=True)
class LiveSetup:
    """The queue and the Lambda mappings as read; ``missing`` names what was not there."""

    queue: QueueObserved
    mappings: list[MappingObserved] = field(default_factory=list)
    # What was looked for and not found (a named function, a DLQ), for people.
    missing: list[str] = field(default_factory=list)


async def read_live(
    clients: AwsClients, location: AwsLocation, *, function_name: str | None
) -> LiveSetup:
    """The queue's and its consumers' live configuration.

    Args:
        clients: the engine's clients (their SQS client is used).
        location: the aws:// URL's table and queues.
        function_name: the Lambda worker to look at; None looks for every event source
            mapping on the queue (none found: a container worker, no Lambda rules).

    Raises:
        QueueNotFoundError: the job queue does not exist.
        StoreUnavailableError: SQS or Lambda cannot be reached.
    """
    missing: list[str] = []
    queue, queue_arn = await _read_queue(clients, location.queue, missing)
    mappings = await _read_mappings(clients, queue_arn, function_name, missing)
    return LiveSetup(queue=queue, mappings=mappings, missing=missing)


async def read_table_status(clients: AwsClients, table: str) -> str | None:
    """The table's status (``ACTIVE``, ...); None when there is no such table."""
    response = await _unless_missing("dynamodb", clients.dynamodb.describe_table, TableName=table)
    return None if response is None else str(response["Table"]["TableStatus"])


async def _unless_missing(
    service: str, call: Callable[..., Awaitable[Any]], **arguments: Any
) -> Any:
    """The call's response; None when what it names does not exist (an outage is
    StoreUnavailableError, as everywhere in the engine)."""
    try:
        return await call(**arguments)
    except Exception as exc:
        if error_code(exc) in MISSING_CODES:
            return None
        with translate_errors(service):
            raise


async def _attributes(clients: AwsClients, url: str) -> dict[str, str]:
    with translate_errors("sqs"):
        response = await clients.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    return dict(response.get("Attributes", {}))


async def _read_queue(
    clients: AwsClients, queue: QueueName, missing: list[str]
) -> tuple[QueueObserved, str]:
    with translate_errors("sqs"):
        url = await queue_url(clients, queue)
    if url is None:
        raise QueueNotFoundError(f"queue {queue.name} does not exist")
    attributes = await _attributes(clients, url)
    redrive = json.loads(attributes.get("RedrivePolicy") or "{}")
    dlq_arn = redrive.get("deadLetterTargetArn")
    dlq_retention = await _dlq_retention(clients, dlq_arn) if dlq_arn else None
    if dlq_arn and dlq_retention is None:
        missing.append(f"dead-letter queue {dlq_arn}")
    observed = QueueObserved(
        name=queue.name,
        visibility_timeout_seconds=int(attributes.get("VisibilityTimeout", 30)),
        retention_seconds=int(attributes.get("MessageRetentionPeriod", 345_600)),
        receive_wait_seconds=int(attributes.get("ReceiveMessageWaitTimeSeconds", 0)),
        max_receive_count=int(redrive["maxReceiveCount"]) if "maxReceiveCount" in redrive else None,
        dlq_arn=dlq_arn,
        dlq_retention_seconds=dlq_retention,
    )
    return observed, attributes["QueueArn"]


async def _dlq_retention(clients: AwsClients, arn: str) -> int | None:
    """The retention of the queue the redrive policy names (by ARN: it may be any
    queue, in any account the policy allows, not necessarily the URL's dlq=)."""
    _arn, _aws, _sqs, _region, account, name = arn.split(":", 5)
    response = await _unless_missing(
        "sqs", clients.sqs.get_queue_url, QueueName=name, QueueOwnerAWSAccountId=account
    )
    if response is None:
        return None
    attributes = await _attributes(clients, str(response["QueueUrl"]))
    return int(attributes.get("MessageRetentionPeriod", 345_600))


async def _read_mappings(
    clients: AwsClients, queue_arn: str, function_name: str | None, missing: list[str]
) -> list[MappingObserved]:
    from aiobotocore.session import get_session

    async with get_session().create_client(
        "lambda", region_name=clients.region, config=_config(2)
    ) as client:
        return await _mappings(client, queue_arn, function_name, missing)


async def _mappings(
    client: Any, queue_arn: str, function_name: str | None, missing: list[str]
) -> list[MappingObserved]:
    query: dict[str, Any] = {"EventSourceArn": queue_arn, "MaxItems": _MAPPINGS_PAGE}
    if function_name is not None:
        query["FunctionName"] = function_name
    response = await _unless_missing("lambda", client.list_event_source_mappings, **query)
    if response is None:  # the named function does not exist
        missing.append(f"Lambda function {function_name or '(any)'}")
        return []
    found = [
        await _observed(client, mapping) for mapping in response.get("EventSourceMappings", [])
    ]
    if function_name is not None and not found:
        missing.append(f"an event source mapping from the queue to {function_name}")
    return found


async def _observed(client: Any, mapping: dict[str, Any]) -> MappingObserved:
    with translate_errors("lambda"):
        function = await client.get_function_configuration(FunctionName=mapping["FunctionArn"])
    scaling = mapping.get("ScalingConfig") or {}
    return MappingObserved(
        function_name=str(function["FunctionName"]),
        function_timeout_seconds=int(function["Timeout"]),
        batch_size=int(mapping.get("BatchSize", 10)),
        batching_window_seconds=int(mapping.get("MaximumBatchingWindowInSeconds", 0)),
        report_batch_item_failures="ReportBatchItemFailures"
        in mapping.get("FunctionResponseTypes", []),
        maximum_concurrency=scaling.get("MaximumConcurrency"),
        state=str(mapping.get("State", "")),
    )
