"""The SQS queue's pure parts: rounding to SQS's whole seconds, the parking lot, the
receipt book (adapters/aws/queue_wire.py, queue_parking.py, queue_receipts.py)."""

from __future__ import annotations

import collections
import math

import pytest

from ferryman.adapters.aws.queue_parking import Allowance, Parked, ParkingLot
from ferryman.adapters.aws.queue_receipts import Held, ReceiptBook
from ferryman.adapters.aws.queue_wire import (
    delay_seconds,
    letter_id,
    send_arguments,
    visibility_seconds,
    wait_seconds,
)
from ferryman.ports.queue import Delivery, QueueMessage, TenantBudget


@pytest.mark.parametrize(
    ("asked", "delay", "visibility", "wait"),
    [
        (0.0, 0, 0, 0),
        (-3.0, 0, 0, 0),
        (0.2, 1, 1, 1),
        (1.0, 1, 1, 1),
        (25.5, 26, 26, 20),
        (5_000.0, 900, 5_000, 20),
        (100_000.0, 900, 43_200, 20),
        (math.inf, 900, 43_200, 20),
        (math.nan, 0, 0, 0),
    ],
)
def test_seconds_are_rounded_up_and_held_to_sqs_limits(asked, delay, visibility, wait):
    assert (delay_seconds(asked), visibility_seconds(asked), wait_seconds(asked)) == (
        delay,
        visibility,
        wait,
    )


def test_send_arguments_omit_absent_attributes_and_group_by_tenant():
    message = QueueMessage(job_id="j1", tenant_id="acme", correlation_id="c-1")
    arguments = send_arguments("https://q", message, delay=0.5)
    assert arguments["MessageGroupId"] == "acme"
    assert arguments["DelaySeconds"] == 1
    assert set(arguments["MessageAttributes"]) == {"payload_version", "correlation_id"}
    assert QueueMessage.from_body(arguments["MessageBody"]) == message
    no_tenant = send_arguments("https://q", QueueMessage(job_id="j2", tenant_id=""), delay=0)
    assert "MessageGroupId" not in no_tenant  # SQS refuses an empty group id


def test_a_letter_id_is_dl_and_hex_for_any_message_id():
    assert (
        letter_id("1ceb040a-9ba2-4655-beee-3c9fe9970f2a") == "dl_1ceb040a9ba24655beee3c9fe9970f2a"
    )
    odd = letter_id("not a uuid")
    assert odd.startswith("dl_") and int(odd[3:], 16) >= 0
    assert letter_id("not a uuid") == odd


def _parked(tenant: str, sent_at: float, n: int) -> Parked:
    delivery = Delivery(
        message=QueueMessage(job_id=f"j{n}", tenant_id=tenant),
        receipt=f"r{n}",
        receive_count=1,
        sent_at=sent_at,
    )
    return Parked(delivery=delivery, message_id=f"m{n}", hidden_until=100.0 + n, hide_seconds=30)


def test_a_short_hiding_is_renewed_a_third_of_it_before_it_ends():
    short = _parked("a", 1.0, 1)
    short.hide_seconds = 12

    assert short.due_at == short.hidden_until - 4.0
    assert _parked("a", 1.0, 2).due_at == 102.0 - 10.0  # 30 s: at most 10 s ahead


def test_the_lot_hands_out_oldest_first_within_the_budget_and_lets_the_oldest_go():
    in_flight = collections.Counter({"a": 1})
    budget = TenantBudget(max_per_tenant=2, in_flight=in_flight)
    lot = ParkingLot(capacity=3)
    assert lot.park(_parked("a", 30.0, 1)) == []
    assert lot.park(_parked("a", 10.0, 2)) == []
    assert lot.park(_parked("b", 20.0, 3)) == []
    released = lot.park(_parked("a", 40.0, 4))
    assert [p.message_id for p in released] == ["m2"]  # the oldest sent
    assert lot.full

    taken = lot.take(Allowance(10, budget))

    # "a" may take one more (it holds one of two); "b" has room.
    assert [p.message_id for p in taken] == ["m3", "m1"]
    assert [p.message_id for p in lot.all()] == ["m4"]
    assert lot.take(Allowance(0, None)) == []


def test_the_lot_keeps_one_delivery_per_message_and_says_which_are_due():
    lot = ParkingLot(capacity=5)
    lot.park(_parked("a", 1.0, 1))
    lot.park(_parked("a", 2.0, 2))
    again = _parked("a", 1.0, 3)
    again.message_id = "m1"
    lot.park(again)
    assert sorted(p.delivery.receipt for p in lot.all()) == ["r2", "r3"]
    # Hidden 30 s at a time: each is hidden again 10 s before it would show.
    assert [p.delivery.receipt for p in lot.due(now=92.5)] == ["r2"]
    assert lot.next_due_at() == 92.0
    lot.drop({"r2"})
    assert [p.delivery.receipt for p in lot.empty()] == ["r3"]
    assert not lot
    with pytest.raises(ValueError, match="capacity"):
        ParkingLot(capacity=0)


def test_the_receipt_book_makes_an_earlier_receipt_of_a_message_stale():
    book = ReceiptBook(stale_capacity=2)
    book.issued("r1", Held("m1", sent_at=5.0, hidden_until=20.0, extendable_until=99.0))
    book.issued("r2", Held("m1", sent_at=5.0, hidden_until=30.0, extendable_until=99.0))
    book.issued("r3", Held("m2", sent_at=7.0, hidden_until=10.0, extendable_until=99.0))

    assert book.is_stale("r1") and book.get("r1") is None
    assert book.get("r2") is not None and not book.is_stale("r2")
    assert book.oldest_sent_at(now=15.0) == 5.0  # r3's hiding has ended
    book.retire("r2")
    assert book.oldest_sent_at(now=15.0) is None
    book.retire("r3")
    assert not book.is_stale("r1")  # the oldest stale receipt is forgotten past capacity
    book.issued("r4", Held("m3", sent_at=1.0, hidden_until=10.0, extendable_until=99.0))
    book.prune(now=100.0, grace_seconds=60)
    assert book.get("r4") is None and not book.is_stale("r4")
    assert len(book) == 0
