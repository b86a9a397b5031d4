"""How a job message travels on SQS: what a send carries and what a receive returns.

The body is ``QueueMessage.to_body()``, the one source of truth a worker reads. The
message attributes repeat the trace context, the correlation id and the payload
version so that what sees only SQS (a Lambda filter, an operator's console, a tracer)
reads them without parsing the body; an absent one is omitted, as SQS wants no empty
attribute. ``MessageGroupId`` is the tenant: on a standard queue that makes it an SQS
fair queue, which keeps a quiet tenant's dwell time low while another floods.

SQS counts in whole seconds: delays, visibility timeouts and long-poll waits are
rounded up (a message is never shown before the caller asked, a receive never gives
up before it), then held to SQS's limits.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ferryman.ports.queue import QueueMessage

# SQS's limits (API reference: SendMessage DelaySeconds, ChangeMessageVisibility,
# ReceiveMessage WaitTimeSeconds and MaxNumberOfMessages).
MAX_DELAY_SECONDS = 900
MAX_VISIBILITY_SECONDS = 43_200
MAX_WAIT_SECONDS = 20
MAX_BATCH = 10

SYSTEM_ATTRIBUTES = ("ApproximateReceiveCount", "SentTimestamp", "ApproximateFirstReceiveTimestamp")
MESSAGE_ATTRIBUTES = ("traceparent", "correlation_id", "payload_version")

# What SQS answers for a receipt it will not act on: not a receipt of this queue, a
# receipt that has expired ("InvalidParameterValue ... The receipt handle has
# expired"), or a message no longer in flight (its visibility ran out, or it was
# deleted). InvalidParameterValue is also the answer to a visibility beyond the
# 12-hour budget (moto: "Total VisibilityTimeout for the message is beyond the
# limit"): either way this receipt cannot hide the message, which is what False means.
STALE_RECEIPT_CODES = frozenset(
    {
        "ReceiptHandleIsInvalid",
        "InvalidParameterValue",
        "MessageNotInflight",
        "AWS.SimpleQueueService.MessageNotInflight",
    }
)


def whole_seconds(seconds: float, *, limit: int) -> int:
    """``seconds`` rounded up to whole seconds, within 0..limit."""
    if not math.isfinite(seconds):
        return limit if seconds > 0 else 0
    return max(0, min(limit, math.ceil(seconds)))


def delay_seconds(seconds: float) -> int:
    """A send's DelaySeconds. Longer than SQS's 900 s is sent with 900: the message
    comes early, and the worker that meets it early reads the job's own time
    (``not_before``) and hides it again. No service asks more today (the longest is a
    paused provider's 30 s recheck)."""
    return whole_seconds(seconds, limit=MAX_DELAY_SECONDS)


def visibility_seconds(seconds: float) -> int:
    return whole_seconds(seconds, limit=MAX_VISIBILITY_SECONDS)


def wait_seconds(seconds: float) -> int:
    return whole_seconds(seconds, limit=MAX_WAIT_SECONDS)


def message_attributes(message: QueueMessage) -> dict[str, dict[str, str]]:
    attributes = {
        "payload_version": {"DataType": "Number", "StringValue": str(message.payload_version)}
    }
    for name, value in (
        ("traceparent", message.traceparent),
        ("correlation_id", message.correlation_id),
    ):
        if value:
            attributes[name] = {"DataType": "String", "StringValue": value}
    return attributes


def send_arguments(queue_url: str, message: QueueMessage, *, delay: float) -> dict[str, Any]:
    """SendMessage's arguments for ``message``."""
    arguments: dict[str, Any] = {
        "QueueUrl": queue_url,
        "MessageBody": message.to_body(),
        "MessageAttributes": message_attributes(message),
        "DelaySeconds": delay_seconds(delay),
    }
    if message.tenant_id:  # SQS refuses an empty MessageGroupId
        arguments["MessageGroupId"] = message.tenant_id
    return arguments


@dataclass(frozen=True, slots=True)
class ReceivedMessage:
    """One message as ReceiveMessage returned it (before its body is read)."""

    message_id: str
    receipt: str
    body: str
    receive_count: int
    sent_at: float


def _attribute(attributes: Mapping[str, Any], name: str, default: int) -> int:
    try:
        return int(attributes.get(name, default))
    except (TypeError, ValueError):
        return default


def received_message(raw: Mapping[str, Any]) -> ReceivedMessage:
    attributes = raw.get("Attributes") or {}
    return ReceivedMessage(
        message_id=str(raw["MessageId"]),
        receipt=str(raw["ReceiptHandle"]),
        body=str(raw.get("Body", "")),
        receive_count=max(1, _attribute(attributes, "ApproximateReceiveCount", 1)),
        sent_at=_attribute(attributes, "SentTimestamp", 0) / 1000.0,
    )


def letter_id(message_id: str) -> str:
    """The dead-letter id of an SQS message: ``dl_`` and hex, the shape the letter
    cursors of services/operations.py accept (an SQS MessageId is a UUID)."""
    try:
        return f"dl_{uuid.UUID(message_id).hex}"
    except ValueError:
        import hashlib

        return f"dl_{hashlib.blake2b(message_id.encode(), digest_size=16).hexdigest()}"
