"""SQS events as Lambda's event source mapping delivers them, built from real deliveries.

The shape is the documented one: ``Records[]`` of messageId, receiptHandle, body,
attributes (ApproximateReceiveCount, SentTimestamp in milliseconds, SenderId,
ApproximateFirstReceiveTimestamp, all strings), messageAttributes (name ->
{stringValue, dataType}), md5OfBody, eventSource "aws:sqs", eventSourceARN, awsRegion.
Any engine's receive gives the (receipt, body, receive count, sent at) of a record;
the message id is whatever the queue called the message (a fresh uuid where the
engine has none to show). A message SQS itself returned (``record_of_message``) keeps
everything SQS said of it: its MessageId, ReceiptHandle, system attributes and typed
message attributes, as the mapping passes them on.
"""

from __future__ import annotations

import base64
import hashlib
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from ferryman.ports.queue import Delivery

REGION = "us-east-1"
QUEUE_ARN = f"arn:aws:sqs:{REGION}:123456789012:ferryman-jobs"
SENDER_ID = "AIDAIENQZJOLO23YVJ4VO"

# (message_id, receipt, body, receive_count, sent_at in seconds)
RecordFacts = tuple[str, str, str, int, float]


def sqs_record(
    message_id: str,
    receipt: str,
    body: str,
    receive_count: int,
    sent_at: float,
    *,
    message_attributes: Mapping[str, str] | None = None,
    queue_arn: str = QUEUE_ARN,
) -> dict[str, Any]:
    """One record; ``message_attributes`` as name -> string value (dataType String)."""
    sent_ms = str(int(sent_at * 1000))
    return {
        "messageId": message_id,
        "receiptHandle": receipt,
        "body": body,
        "attributes": {
            "ApproximateReceiveCount": str(receive_count),
            "SentTimestamp": sent_ms,
            "SenderId": SENDER_ID,
            "ApproximateFirstReceiveTimestamp": sent_ms,
        },
        "messageAttributes": {
            name: {"stringValue": value, "dataType": "String"}
            for name, value in (message_attributes or {}).items()
        },
        "md5OfBody": hashlib.md5(body.encode(), usedforsecurity=False).hexdigest(),
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def sqs_event(records: Iterable[RecordFacts], *, queue_arn: str = QUEUE_ARN) -> dict[str, Any]:
    """An event of one record per (message_id, receipt, body, receive_count, sent_at)."""
    return {"Records": [sqs_record(*facts, queue_arn=queue_arn) for facts in records]}


def record_of_message(message: Mapping[str, Any], *, queue_arn: str) -> dict[str, Any]:
    """A message as SQS's ReceiveMessage returned it (asked for every system and message
    attribute), as the event source mapping hands it to the function: the same facts,
    in the event's camelCase names."""
    return {
        "messageId": message["MessageId"],
        "receiptHandle": message["ReceiptHandle"],
        "body": message["Body"],
        "attributes": dict(message.get("Attributes") or {}),
        "messageAttributes": {
            name: _event_attribute(value)
            for name, value in (message.get("MessageAttributes") or {}).items()
        },
        "md5OfMessageAttributes": message.get("MD5OfMessageAttributes"),
        "md5OfBody": message["MD5OfBody"],
        "eventSource": "aws:sqs",
        "eventSourceARN": queue_arn,
        "awsRegion": queue_arn.split(":")[3],
    }


def _event_attribute(value: Mapping[str, Any]) -> dict[str, Any]:
    """A message attribute as the event spells it ({stringValue | binaryValue (base64),
    stringListValues, binaryListValues, dataType})."""
    attribute: dict[str, Any] = {
        "stringListValues": [],
        "binaryListValues": [],
        "dataType": value["DataType"],
    }
    if "StringValue" in value:
        attribute["stringValue"] = value["StringValue"]
    if "BinaryValue" in value:
        attribute["binaryValue"] = base64.b64encode(value["BinaryValue"]).decode()
    return attribute


def event_of_messages(messages: Iterable[Mapping[str, Any]], *, queue_arn: str) -> dict[str, Any]:
    """An event of one record per message SQS returned."""
    return {"Records": [record_of_message(m, queue_arn=queue_arn) for m in messages]}


def facts_of(delivery: Delivery, message_id: str | None = None) -> RecordFacts:
    """A real delivery as a record's facts (its body as the queue carries it)."""
    return (
        message_id or str(uuid.uuid4()),
        delivery.receipt,
        delivery.message.to_body(),
        delivery.receive_count,
        delivery.sent_at,
    )


def failed_ids(response: Mapping[str, Any]) -> set[str]:
    """The message ids a handler's partial batch response names."""
    return {item["itemIdentifier"] for item in response["batchItemFailures"]}


def invoke(event: dict[str, Any], remaining_ms: int = 900_000) -> set[str]:
    """The worker function's handler run on ``event``, as Lambda calls it: the message
    ids its answer names (an answer with anything but ``batchItemFailures`` fails)."""
    from ferryman import aws_lambda

    response = aws_lambda.handler(event, FakeContext(remaining_ms=remaining_ms))
    assert set(response) == {"batchItemFailures"}
    return failed_ids(response)


@dataclass
class FakeContext:
    """Lambda's context object, as far as the handler reads it."""

    remaining_ms: int = 900_000
    function_name: str = "ferryman-worker"
    aws_request_id: str = "00000000-0000-0000-0000-000000000000"

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms
