"""SqsJobQueue against the emulator (moto's SQS and DynamoDB, over HTTP).

moto runs on the wall clock: visibility timeouts here are 1 s, and every wait is for
a condition, with a generous deadline, never a fixed sleep taken as the assertion.
"""

from __future__ import annotations

import asyncio
import collections
import time
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.provision import provision
from ferryman.adapters.aws.queue import VISIBILITY_BUDGET_SECONDS, SqsJobQueue
from ferryman.adapters.aws.queue_letters import UndecodableLetters
from ferryman.core.clock import SystemClock
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import DeadLetterReason, QueueMessage, TenantBudget

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable

pytestmark = pytest.mark.timeout(90)

DEADLINE_SECONDS = 20.0


def _message(tenant_id: str = "t1", **fields: Any) -> QueueMessage:
    return QueueMessage(job_id=new_job_id(), tenant_id=tenant_id, **fields)


@asynccontextmanager
async def _opened(url: str, *, max_receives: int = 10, **options: Any) -> AsyncIterator[Any]:
    async with open_clients() as clients:
        queue = await SqsJobQueue.open(
            clients, parse_aws_url(url), clock=SystemClock(), max_receives=max_receives, **options
        )
        try:
            yield queue, clients
        finally:
            await queue.close()


async def _until(look: Callable[[], Awaitable[Any]], *, deadline: float = DEADLINE_SECONDS) -> Any:
    """``look()``'s first truthy answer; fails the test after ``deadline`` seconds."""
    give_up = time.monotonic() + deadline
    while True:
        answer = await look()
        if answer:
            return answer
        assert time.monotonic() < give_up, "the condition did not come true in time"
        await asyncio.sleep(0.1)


async def _receive(queue: SqsJobQueue, **overrides: Any) -> list[Any]:
    arguments: dict[str, Any] = {"max_messages": 10, "visibility_timeout_seconds": 1.0}
    return await queue.receive(**(arguments | overrides))


async def _raw_receive(clients: Any, url: str, *, wait: int = 0) -> list[dict[str, Any]]:
    response = await clients.sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=10,
        VisibilityTimeout=30,
        WaitTimeSeconds=wait,
        MessageAttributeNames=["All"],
        MessageSystemAttributeNames=["All"],
    )
    return list(response.get("Messages") or [])


def _url_of(queue: SqsJobQueue) -> str:
    return queue._url


def _budget(max_per_tenant: int) -> tuple[TenantBudget, collections.Counter[str]]:
    in_flight: collections.Counter[str] = collections.Counter()
    return TenantBudget(max_per_tenant, in_flight, asyncio.Event()), in_flight


async def test_a_message_round_trips_with_its_attributes(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, clients):
        traced = _message("acme", traceparent="00-abc-def-01", correlation_id="order-7")
        plain = _message("acme")
        before = time.time()
        await queue.send(traced)
        await queue.send(plain)

        deliveries = await _receive(queue, wait_seconds=5)
        assert {d.message for d in deliveries} == {traced, plain}
        assert all(d.receive_count == 1 for d in deliveries)
        assert all(before - 1 <= d.sent_at <= time.time() + 1 for d in deliveries)
        for delivery in deliveries:  # shown again, to read them raw
            assert await queue.change_visibility(delivery.receipt, timeout_seconds=0)
        raw = {m["Body"]: m for m in await _until(lambda: _raw_receive(clients, _url_of(queue)))}

    traced_raw, plain_raw = raw[traced.to_body()], raw[plain.to_body()]
    assert {k: v["StringValue"] for k, v in traced_raw["MessageAttributes"].items()} == {
        "traceparent": "00-abc-def-01",
        "correlation_id": "order-7",
        "payload_version": str(traced.payload_version),
    }
    assert traced_raw["MessageAttributes"]["payload_version"]["DataType"] == "Number"
    assert set(plain_raw["MessageAttributes"]) == {"payload_version"}  # absent ones omitted
    assert traced_raw["Attributes"]["MessageGroupId"] == "acme"


async def test_delete_acknowledges_and_deleting_twice_is_not_an_error(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, _clients):
        await queue.send(_message())
        [delivery] = await _receive(queue, wait_seconds=5, visibility_timeout_seconds=30)

        await queue.delete(delivery.receipt)
        await queue.delete(delivery.receipt)

        assert await queue.change_visibility(delivery.receipt, timeout_seconds=0) is False
        stats = await queue.stats()
        assert (stats.visible, stats.in_flight, stats.dead_letters) == (0, 0, 0)
        assert stats.oldest_age_seconds == 0


async def test_an_expired_visibility_delivers_again_and_the_old_receipt_is_stale(
    aws_url: str,
) -> None:
    async with _opened(aws_url) as (queue, _clients):
        message = _message()
        await queue.send(message)
        [first] = await _receive(queue, wait_seconds=5)

        [second] = await _until(lambda: _receive(queue, wait_seconds=1))

        assert second.message == message
        assert (first.receive_count, second.receive_count) == (1, 2)
        assert second.receipt != first.receipt
        # The old receipt neither shows nor acknowledges the newer delivery.
        assert await queue.change_visibility(first.receipt, timeout_seconds=0) is False
        await queue.delete(first.receipt)
        assert await queue.change_visibility(second.receipt, timeout_seconds=30) is True
        assert (await queue.stats()).in_flight == 1


async def test_a_receipt_sqs_refuses_is_stale_and_deleting_it_is_not_an_error(
    aws_url: str,
) -> None:
    async with _opened(aws_url) as (queue, _clients):
        assert await queue.change_visibility("not-a-receipt", timeout_seconds=10) is False
        await queue.delete("not-a-receipt")
        await queue.delete_dead_letter("not-a-receipt")


async def test_a_message_is_redriven_after_max_receives_and_read_as_a_dead_letter(
    aws_env: dict[str, str],
) -> None:
    from aws_emulator import fresh_name

    url = f"aws://{fresh_name()}"
    async with open_clients() as clients:
        await provision(clients, parse_aws_url(url), max_receives=2)
    async with _opened(url, max_receives=2) as (queue, _clients):
        message = _message()
        await queue.send(message)
        counts = [d.receive_count for d in await _receive(queue, wait_seconds=5)]
        counts += [d.receive_count for d in await _until(lambda: _receive(queue, wait_seconds=1))]
        # The third receive finds it received twice: SQS moves it to the DLQ instead.
        await _until(lambda: _dead_letters_at_least(queue, 1))
        assert await _receive(queue) == []

        [dead] = await queue.receive_dead_letters(max_messages=10)
        assert counts == [1, 2]
        assert dead.message == message
        assert dead.receive_count == 2
        assert dead.reason is DeadLetterReason.MAX_RECEIVES
        assert await queue.receive_dead_letters(max_messages=10) == []  # hidden meanwhile

        await queue.delete_dead_letter(dead.dead_letter_id)
        await queue.delete_dead_letter(dead.dead_letter_id)
        stats = await queue.stats()
        assert (stats.visible, stats.in_flight, stats.dead_letters) == (0, 0, 0)


async def _dead_letters_at_least(queue: SqsJobQueue, n: int) -> bool:
    await _receive(queue)  # a receive is what makes SQS redrive
    return (await queue.stats()).dead_letters >= n


async def test_an_undecodable_message_is_moved_out_listed_paged_and_purged(
    aws_url: str,
) -> None:
    async with _opened(aws_url) as (queue, clients):
        for body in ("{not json", '{"tenant_id": "t1"}', "[]"):
            await clients.sqs.send_message(QueueUrl=_url_of(queue), MessageBody=body)
        good = _message()
        await queue.send(good)

        delivered = await _until(
            lambda: _receive(queue, wait_seconds=1, visibility_timeout_seconds=60)
        )
        letters = await queue.undecodable_letters(limit=10)

        assert [d.message for d in delivered] == [good]
        assert sorted(letter.body for letter in letters) == sorted(
            ["{not json", '{"tenant_id": "t1"}', "[]"]
        )
        assert [(x.dead_lettered_at, x.dead_letter_id) for x in letters] == sorted(
            (x.dead_lettered_at, x.dead_letter_id) for x in letters
        )
        assert all(x.dead_letter_id.startswith("dl_") for x in letters)
        assert all(x.receive_count == 0 and x.sent_at > 0 for x in letters)
        first, second, third = letters
        assert await queue.undecodable_letters(limit=2) == [first, second]
        after = (first.dead_lettered_at, first.dead_letter_id)
        assert await queue.undecodable_letters(limit=10, after=after) == [second, third]
        last = (third.dead_lettered_at, third.dead_letter_id)
        assert await queue.undecodable_letters(limit=10, after=last) == []
        assert await queue.undecodable_letter(second.dead_letter_id) == second
        assert await queue.undecodable_letter("dl_0000") is None
        assert await queue.undecodable_letter("a receipt of a job's letter") is None
        stats = await queue.stats()
        # Out of SQS: only the good message is left there (in flight).
        assert (stats.visible, stats.in_flight) == (0, 1)
        assert (stats.dead_letters, stats.undecodable_letters) == (3, 3)

        assert await queue.delete_undecodable_letter(second.dead_letter_id) is True
        assert await queue.delete_undecodable_letter(second.dead_letter_id) is False
        assert await queue.delete_undecodable_letter("not-a-letter-id") is False
        assert await queue.undecodable_letters(limit=10) == [first, third]
        assert (await queue.stats()).undecodable_letters == 2


async def test_an_undecodable_message_in_the_dead_letter_queue_is_moved_out(
    aws_url: str,
) -> None:
    async with _opened(aws_url) as (queue, clients):
        await clients.sqs.send_message(QueueUrl=queue._dlq_url, MessageBody="junk")

        assert await queue.receive_dead_letters(max_messages=10) == []
        [letter] = await queue.undecodable_letters(limit=10)
        assert letter.body == "junk"
        stats = await queue.stats()
        assert (stats.dead_letters, stats.undecodable_letters) == (1, 1)


async def test_a_tenant_over_its_allowance_is_parked_not_received_again(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, clients):
        budget, in_flight = _budget(max_per_tenant=1)
        flood = [_message("a") for _ in range(3)]
        for message in flood:
            await queue.send(message)

        taken = await _until(lambda: _receive(queue, wait_seconds=1, budget=budget))
        in_flight["a"] += len(taken)  # as the worker counts what it starts
        assert await queue.change_visibility(taken[0].receipt, timeout_seconds=60)
        # The rest are parked: hidden past their 1 s visibility, never received again,
        # but 10 s at a time (the least a parked one is hidden), so a process that dies
        # leaves them hidden no longer: not a minute, as it was.
        await _until(lambda: _parked(queue, 2))
        await _until(lambda: _all_hidden_for_a_park(queue))
        assert await _raw_receive(clients, _url_of(queue), wait=3) == []
        assert await _receive(queue, budget=budget) == []

        quiet = _message("b")
        await queue.send(quiet)
        [other] = await _until(lambda: _receive(queue, wait_seconds=1, budget=budget))
        assert other.message == quiet
        await queue.delete(other.receipt)

        in_flight["a"] = 0  # "a"'s delivery finished: the receiver frees its slot
        budget.freed.set()  # type: ignore[union-attr]
        [unparked] = await _receive(queue, budget=budget, visibility_timeout_seconds=60)
        in_flight["a"] += 1
        [last] = await asyncio.wait_for(
            _free_later(queue, budget, in_flight, "a"), timeout=DEADLINE_SECONDS
        )

    assert len(taken) == 1
    assert {taken[0].message, unparked.message, last.message} == set(flood)
    # Parked, each kept its one receive: none was counted toward redrive again.
    assert (unparked.receive_count, last.receive_count) == (1, 1)


async def _parked(queue: SqsJobQueue, n: int) -> bool:
    return len(queue._lot) == n


async def _all_hidden_for_a_park(queue: SqsJobQueue) -> bool:
    """Every parked delivery hidden by the keeper (past the receive's 1 s), and until
    at most 10 s on."""
    now = queue._clock.now()
    lot = queue._lot.all()
    return all(1.0 < p.hidden_until - now <= 10.0 for p in lot)


async def _free_later(
    queue: SqsJobQueue, budget: TenantBudget, in_flight: collections.Counter[str], tenant: str
) -> list[Any]:
    """A waiting receive, and a slot freed while it waits: it hands out a parked one."""
    waiting = asyncio.create_task(_receive(queue, wait_seconds=15, budget=budget))
    await asyncio.sleep(0.3)
    in_flight[tenant] = 0
    budget.freed.set()  # type: ignore[union-attr]
    return await waiting


async def test_a_full_parking_lot_lets_its_oldest_go_and_takes_no_more(aws_url: str) -> None:
    async with _opened(aws_url, parking_capacity=2) as (queue, _clients):
        budget, in_flight = _budget(max_per_tenant=1)
        in_flight["a"] = 1  # "a" is at its share already
        for _ in range(3):
            await queue.send(_message("a"))

        received = await _receive(queue, wait_seconds=2, budget=budget)

        assert received == []
        assert len(queue._lot) == 2
        # The oldest parked was let go (visible again); a full lot takes no more.
        stats = await _until(lambda: _stats_if(queue, visible=1))
        assert stats.in_flight == 2
        assert await _receive(queue, wait_seconds=1, budget=budget) == []
        assert (await queue.stats()).visible == 1


async def _stats_if(queue: SqsJobQueue, **expected: int) -> Any:
    stats = await queue.stats()
    return stats if all(getattr(stats, k) == v for k, v in expected.items()) else None


async def test_close_lets_parked_deliveries_go(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, _clients):
        budget, in_flight = _budget(max_per_tenant=1)
        in_flight["a"] = 1
        await queue.send(_message("a"))
        await _until(lambda: _park_one(queue, budget))

        await queue.close()

        await _until(lambda: _stats_if(queue, visible=1, in_flight=0))


async def _park_one(queue: SqsJobQueue, budget: TenantBudget) -> bool:
    assert await _receive(queue, wait_seconds=1, budget=budget) == []
    return len(queue._lot) == 1


async def test_extendable_until_is_set_and_change_visibility_clamps_to_it(
    aws_url: str,
) -> None:
    async with _opened(aws_url) as (queue, _clients):
        await queue.send(_message())
        before = time.time()
        [delivery] = await _receive(queue, wait_seconds=5)
        assert delivery.extendable_until is not None
        assert before + VISIBILITY_BUDGET_SECONDS <= delivery.extendable_until
        assert delivery.extendable_until <= time.time() + VISIBILITY_BUDGET_SECONDS
        # Beyond SQS's 12 hours: clamped, not refused.
        assert await queue.change_visibility(delivery.receipt, timeout_seconds=50_000) is True

    async with _opened(aws_url, visibility_budget_seconds=3) as (queue, _clients):
        await queue.send(_message())
        [short] = await _until(lambda: _receive(queue, wait_seconds=1))
        assert short.extendable_until is not None

        # Asked for 60 s, hidden only until extendable_until: it shows within seconds.
        assert await queue.change_visibility(short.receipt, timeout_seconds=60) is True
        [again] = await _until(lambda: _receive(queue, wait_seconds=1))
        assert again.receive_count == short.receive_count + 1

        await _until(lambda: _after(again.extendable_until))
        assert await queue.change_visibility(again.receipt, timeout_seconds=30) is False


async def _after(moment: float | None) -> bool:
    assert moment is not None
    return time.time() > moment


async def test_stats_count_visible_in_flight_delayed_and_the_oldest_held(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, _clients):
        assert (await queue.stats()).oldest_age_seconds == 0
        for _ in range(3):
            await queue.send(_message())
        await queue.send(_message(), delay_seconds=0.2)  # rounded up to 1 s
        await queue.send(_message(), delay_seconds=5_000)  # sent with SQS's 900 s

        [held] = await _receive(
            queue, max_messages=1, wait_seconds=5, visibility_timeout_seconds=30
        )
        stats = await queue.stats()

        assert stats.in_flight >= 2  # the held one and the long-delayed one at least
        assert stats.visible + stats.in_flight == 5
        assert 0 <= stats.oldest_age_seconds < 60
        assert stats.dead_letters == 0
        await queue.delete(held.receipt)
        assert (await queue.stats()).oldest_age_seconds == 0


async def test_any_visible_answers_from_the_queue_counts(aws_url: str) -> None:
    async with _opened(aws_url) as (queue, _clients):
        assert await queue.any_visible() is False
        await queue.send(_message(), delay_seconds=900)
        await queue.send(_message("t2"))

        assert await _until(queue.any_visible)
        [delivery] = await _receive(queue, wait_seconds=5, visibility_timeout_seconds=30)
        assert await _until(lambda: _not(queue.any_visible))
        assert await queue.change_visibility(delivery.receipt, timeout_seconds=0)
        assert await _until(queue.any_visible)


async def _not(look: Callable[[], Awaitable[bool]]) -> bool:
    return not await look()


async def test_a_missing_queue_is_unavailable_and_names_migrate(aws_env: dict[str, str]) -> None:
    from aws_emulator import fresh_name

    async with open_clients() as clients:
        with pytest.raises(StoreUnavailableError, match="ferryman migrate"):
            await SqsJobQueue.open(
                clients,
                parse_aws_url(f"aws://{fresh_name()}"),
                clock=SystemClock(),
                max_receives=10,
            )


@pytest.mark.usefixtures("aws_retries_at_once")
async def test_an_unreachable_sqs_is_store_unavailable(
    aws_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aws_emulator import _free_port

    async with _opened(aws_url) as (queue, _clients):
        urls = (queue._url, queue._dlq_url)
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_free_port()}")
    async with open_clients() as clients:
        queue = SqsJobQueue(
            clients,
            queue_url=urls[0],
            dlq_url=urls[1],
            letters=UndecodableLetters(clients, "t"),
            clock=SystemClock(),
            max_receives=10,
        )
        with pytest.raises(StoreUnavailableError):
            await queue.send(_message())
        with pytest.raises(StoreUnavailableError):
            await _receive(queue)
