"""The records of an SQS event, as the Lambda event source mapping hands them over.

Each record of ``event["Records"]`` is one received message::

    {"messageId": "...", "receiptHandle": "...", "body": "...",
     "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1545082649183",
                    "SenderId": "...", "ApproximateFirstReceiveTimestamp": "..."},
     "messageAttributes": {"traceparent": {"stringValue": "...", "dataType": "String"}},
     "md5OfBody": "...", "eventSource": "aws:sqs", "eventSourceARN": "arn:...",
     "awsRegion": "..."}

It becomes the same ``Delivery`` a worker's own receive makes. The message's
traceparent, correlation id and payload version are read from the body and, where the
body lacks one, from the message attribute of the same name (the queue may carry them
there only). Parsing never raises: a record that is not a job message is kept with
the reason why (a fixed phrase, never the body), so it fails alone.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from ferryman.ports.queue import Delivery, QueueMessage

# The message attributes that may carry what the body lacks (named as the body's keys).
TRACEPARENT_ATTRIBUTE = "traceparent"
CORRELATION_ID_ATTRIBUTE = "correlation_id"
PAYLOAD_VERSION_ATTRIBUTE = "payload_version"


@dataclass(frozen=True, slots=True)
class SqsRecord:
    """One record of the event: its message id (what a batch item failure names), and
    its delivery, or why it has none."""

    message_id: str
    receipt: str | None
    delivery: Delivery | None
    # Why there is no delivery: a fixed phrase, safe to log (never the body).
    problem: str | None = None


@dataclass(frozen=True, slots=True)
class SqsEvent:
    """The records that can be answered for, and how many could not (no message id:
    a batch item failure must name one, so such a record is left to the mapping)."""

    records: tuple[SqsRecord, ...]
    unnamed: int = 0


def parse_event(event: object) -> SqsEvent:
    """The event's records; an event of any other shape has none."""
    raw = event.get("Records") if isinstance(event, dict) else None
    if not isinstance(raw, list):
        return SqsEvent(records=())
    records: list[SqsRecord] = []
    unnamed = 0
    for item in raw:
        record = parse_record(item)
        if record is None:
            unnamed += 1
        else:
            records.append(record)
    return SqsEvent(records=tuple(records), unnamed=unnamed)


def parse_record(record: object) -> SqsRecord | None:
    """One record as a delivery; None when it has no message id to answer with."""
    if not isinstance(record, dict):
        return None
    message_id = record.get("messageId")
    if not isinstance(message_id, str) or not message_id:
        return None
    receipt = record.get("receiptHandle")
    if not isinstance(receipt, str) or not receipt:
        return SqsRecord(message_id, None, None, problem="no receiptHandle")
    try:
        delivery = _delivery(record, receipt)
    except ValueError as exc:
        return SqsRecord(message_id, receipt, None, problem=str(exc))
    return SqsRecord(message_id, receipt, delivery)


def _delivery(record: dict[str, Any], receipt: str) -> Delivery:
    body = record.get("body")
    if not isinstance(body, str):
        raise ValueError("no body")
    attributes = record.get("attributes")
    if not isinstance(attributes, dict):
        raise ValueError("no attributes")
    receive_count = _integer(attributes.get("ApproximateReceiveCount"), "ApproximateReceiveCount")
    sent_ms = _integer(attributes.get("SentTimestamp"), "SentTimestamp")
    message_attributes = record.get("messageAttributes")
    return Delivery(
        message=_message(body, message_attributes if isinstance(message_attributes, dict) else {}),
        receipt=receipt,
        receive_count=receive_count,
        sent_at=sent_ms / 1000,
    )


def _message(body: str, message_attributes: dict[str, Any]) -> QueueMessage:
    """The body's job message (ValueError if it is none), completed from the attributes."""
    message = QueueMessage.from_body(body)
    data = json.loads(body)  # a JSON object: from_body has just read it
    fills: dict[str, Any] = {}
    if message.traceparent is None:
        fills["traceparent"] = _string(message_attributes, TRACEPARENT_ATTRIBUTE)
    if message.correlation_id is None:
        fills["correlation_id"] = _string(message_attributes, CORRELATION_ID_ATTRIBUTE)
    if "payload_version" not in data:
        version = _string(message_attributes, PAYLOAD_VERSION_ATTRIBUTE)
        if version is not None:
            fills["payload_version"] = _integer(version, PAYLOAD_VERSION_ATTRIBUTE)
    return dataclasses.replace(message, **{k: v for k, v in fills.items() if v is not None})


def _string(message_attributes: dict[str, Any], name: str) -> str | None:
    attribute = message_attributes.get(name)
    if not isinstance(attribute, dict):
        return None
    value = attribute.get("stringValue")
    return value if isinstance(value, str) else None


def _integer(value: object, name: str) -> int:
    """A decimal integer, as SQS writes counts, timestamps and Number attributes."""
    if isinstance(value, str) and value.strip().isdecimal():
        return int(value)
    raise ValueError(f"{name} is not an integer")
