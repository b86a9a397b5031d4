"""SQS event records as deliveries: the documented shape, lean bodies completed from
message attributes, and every malformed record kept with its reason, never raised."""

from __future__ import annotations

from typing import Any

import pytest

from ferryman.aws_lambda.records import parse_event, parse_record
from ferryman.ports.queue import Delivery, QueueMessage
from lambda_events import sqs_event, sqs_record

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
BODY = QueueMessage(job_id="gen_1", tenant_id="t1", correlation_id="cor_1").to_body()


def test_a_record_is_the_delivery_its_receive_made() -> None:
    record = parse_record(sqs_record("m-1", "r-1", BODY, 3, 1545082649.183))
    assert record is not None
    assert record.message_id == "m-1"
    assert record.problem is None
    assert record.delivery == Delivery(
        message=QueueMessage(job_id="gen_1", tenant_id="t1", correlation_id="cor_1"),
        receipt="r-1",
        receive_count=3,
        sent_at=1545082649.183,
    )


def test_attributes_fill_what_the_body_lacks() -> None:
    lean = '{"job_id": "gen_1", "tenant_id": "t1"}'
    raw = sqs_record(
        "m-1",
        "r-1",
        lean,
        1,
        0,
        message_attributes={
            "traceparent": TRACEPARENT,
            "correlation_id": "cor_9",
            "payload_version": "2",
        },
    )
    raw["messageAttributes"]["payload_version"]["dataType"] = "Number"
    record = parse_record(raw)
    assert record is not None and record.delivery is not None
    message = record.delivery.message
    assert (message.traceparent, message.correlation_id, message.payload_version) == (
        TRACEPARENT,
        "cor_9",
        2,
    )


def test_the_body_wins_over_the_attributes() -> None:
    raw = sqs_record(
        "m-1",
        "r-1",
        BODY,
        1,
        0,
        message_attributes={"correlation_id": "cor_other", "payload_version": "7"},
    )
    record = parse_record(raw)
    assert record is not None and record.delivery is not None
    assert record.delivery.message.correlation_id == "cor_1"
    assert record.delivery.message.payload_version == 1


def _spoil(**changes: Any) -> dict[str, Any]:
    return {**sqs_record("m-1", "r-1", BODY, 1, 0), **changes}


@pytest.mark.parametrize(
    ("raw", "problem"),
    [
        (_spoil(body="{not json"), "not JSON"),
        (_spoil(body="[1]"), "not a JSON object"),
        (_spoil(body='{"tenant_id": "t1"}'), "no job_id or tenant_id"),
        (_spoil(body=None), "no body"),
        (_spoil(attributes=None), "no attributes"),
        (_spoil(attributes={"SentTimestamp": "1"}), "ApproximateReceiveCount is not an integer"),
        (
            _spoil(attributes={"ApproximateReceiveCount": "1", "SentTimestamp": "x"}),
            "SentTimestamp is not an integer",
        ),
        (
            _spoil(
                body='{"job_id": "gen_1", "tenant_id": "t1"}',
                messageAttributes={"payload_version": {"stringValue": "v2", "dataType": "Number"}},
            ),
            "payload_version is not an integer",
        ),
        (_spoil(receiptHandle=None), "no receiptHandle"),
    ],
    ids=[
        "not-json",
        "not-an-object",
        "no-job-id",
        "no-body",
        "no-attributes",
        "no-receive-count",
        "bad-sent-timestamp",
        "bad-version-attribute",
        "no-receipt",
    ],
)
def test_a_malformed_record_is_kept_with_its_reason(raw: dict[str, Any], problem: str) -> None:
    record = parse_record(raw)
    assert record is not None
    assert (record.message_id, record.delivery, record.problem) == ("m-1", None, problem)


def test_the_reason_never_quotes_the_body() -> None:
    record = parse_record(_spoil(body="secret prompt text"))
    assert record is not None and record.problem is not None
    assert "secret" not in record.problem


@pytest.mark.parametrize("raw", [None, "text", {}, {"messageId": ""}, {"messageId": 7}], ids=str)
def test_a_record_without_a_message_id_cannot_be_answered_for(raw: Any) -> None:
    assert parse_record(raw) is None


def test_an_event_counts_the_records_it_cannot_name() -> None:
    event = sqs_event([("m-1", "r-1", BODY, 1, 0.0)])
    event["Records"].append({"body": BODY})
    parsed = parse_event(event)
    assert [r.message_id for r in parsed.records] == ["m-1"]
    assert parsed.unnamed == 1
