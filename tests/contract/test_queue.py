"""JobQueue: SQS semantics (visibility, receipts, receive counts, redrive, stats).

The cases that move time (``clocked_engine``) run on engines whose queue follows the
Clock it was opened with (``QueueCapabilities.follows_clock``). An engine whose service
keeps its own time is left out of them by name, on purpose, and holds the same
behaviours on real time in its own suite (aws: tests/integration/aws/test_sqs_queue.py).
"""

from __future__ import annotations

import asyncio
import time

import pytest

from contract.conftest import ENGINES
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import QueueMessage

pytestmark = pytest.mark.timeout(30)

# Engines whose queue keeps its own time, and where the same cases run on real time.
KEEPS_ITS_OWN_TIME = {"aws": "tests/integration/aws/test_sqs_queue.py"}


@pytest.fixture(params=[name for name in ENGINES if name not in KEEPS_ITS_OWN_TIME])
async def clocked_engine(request, tmp_path, clock):
    """An engine whose queue's time the test moves. One that says otherwise fails here
    until it is left out by name above: it never silently passes."""
    async with ENGINES[request.param](request, tmp_path, clock) as built:
        assert built.queue.capabilities.follows_clock, (
            f"{built.name}'s queue keeps its own time: leave it out of the clocked cases"
        )
        yield built


def test_each_engine_left_out_of_the_clocked_cases_says_it_keeps_its_own_time():
    assert set(KEEPS_ITS_OWN_TIME) <= set(ENGINES)


async def test_every_engine_states_whose_time_its_queue_keeps(engine):
    assert engine.queue.capabilities.follows_clock is (engine.name not in KEEPS_ITS_OWN_TIME)


MAX_RECEIVES = 10


def _message(tenant_id="t1"):
    return QueueMessage(job_id=new_job_id(), tenant_id=tenant_id, traceparent="00-abc-def-01")


async def _receive(engine, *, max_messages=10, visibility=30.0, wait=0.0):
    return await engine.queue.receive(
        max_messages=max_messages, visibility_timeout_seconds=visibility, wait_seconds=wait
    )


async def test_a_message_round_trips(clocked_engine):
    message = _message()
    await clocked_engine.queue.send(message)

    [delivery] = await _receive(clocked_engine)

    assert delivery.message == message
    assert delivery.receive_count == 1
    assert delivery.sent_at == clocked_engine.now()


async def test_a_received_message_is_hidden_then_delivered_again(clocked_engine):
    message = _message()
    await clocked_engine.queue.send(message)
    [first] = await _receive(clocked_engine, visibility=30)

    hidden = await _receive(clocked_engine)
    clocked_engine.advance(31)
    [second] = await _receive(clocked_engine)

    assert hidden == []
    assert second.message.job_id == message.job_id
    assert second.receive_count == 2
    assert second.receipt != first.receipt


async def test_change_visibility_extends_the_hiding(clocked_engine):
    await clocked_engine.queue.send(_message())
    [delivery] = await _receive(clocked_engine, visibility=30)

    assert (
        await clocked_engine.queue.change_visibility(delivery.receipt, timeout_seconds=120) is True
    )
    clocked_engine.advance(31)
    assert await _receive(clocked_engine) == []
    clocked_engine.advance(90)
    assert len(await _receive(clocked_engine)) == 1


async def test_change_visibility_to_zero_shows_it_now(engine):
    await engine.queue.send(_message())
    [delivery] = await _receive(engine, visibility=300)

    assert await engine.queue.change_visibility(delivery.receipt, timeout_seconds=0) is True
    [again] = await _receive(engine)

    assert again.receive_count == 2


async def test_a_stale_receipt_changes_nothing(clocked_engine):
    message = _message()
    await clocked_engine.queue.send(message)
    [old] = await _receive(clocked_engine, visibility=30)
    clocked_engine.advance(31)
    [current] = await _receive(clocked_engine, visibility=30)

    assert await clocked_engine.queue.change_visibility(old.receipt, timeout_seconds=0) is False
    await clocked_engine.queue.delete(old.receipt)  # not an error, and not an acknowledgement
    assert await _receive(clocked_engine) == []
    clocked_engine.advance(31)
    [third] = await _receive(clocked_engine)

    assert third.message.job_id == message.job_id
    assert third.receive_count == 3
    assert current.receipt != third.receipt


async def test_delete_acknowledges(engine):
    await engine.queue.send(_message())
    [delivery] = await _receive(engine)

    await engine.queue.delete(delivery.receipt)
    await engine.queue.delete(delivery.receipt)  # deleting twice is not an error
    engine.advance(1_000)

    assert await _receive(engine) == []
    assert await engine.queue.change_visibility(delivery.receipt, timeout_seconds=0) is False
    stats = await engine.queue.stats()
    assert (stats.visible, stats.in_flight, stats.dead_letters) == (0, 0, 0)
    assert stats.oldest_age_seconds == 0


async def test_a_delayed_message_appears_after_its_delay(clocked_engine):
    await clocked_engine.queue.send(_message(), delay_seconds=60)

    assert await _receive(clocked_engine) == []
    stats = await clocked_engine.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 1)
    clocked_engine.advance(61)
    assert len(await _receive(clocked_engine)) == 1


async def test_messages_come_oldest_first_up_to_max_messages(engine):
    sent = []
    for _ in range(5):
        message = _message()
        await engine.queue.send(message)
        sent.append(message.job_id)
        engine.advance(1)

    first = await _receive(engine, max_messages=2)
    rest = await _receive(engine, max_messages=10)

    assert [d.message.job_id for d in first] == sent[:2]
    assert [d.message.job_id for d in rest] == sent[2:]


async def test_a_message_is_dead_lettered_after_max_receives(clocked_engine):
    message = _message()
    await clocked_engine.queue.send(message)

    counts: list[int] = []
    for _ in range(MAX_RECEIVES + 3):
        counts.extend(d.receive_count for d in await _receive(clocked_engine, visibility=30))
        clocked_engine.advance(31)

    assert counts == list(range(1, MAX_RECEIVES + 1))
    stats = await clocked_engine.queue.stats()
    assert (stats.visible, stats.in_flight, stats.dead_letters) == (0, 0, 1)
    [dead] = await clocked_engine.queue.receive_dead_letters(max_messages=10)
    assert dead.message == message
    assert dead.receive_count == MAX_RECEIVES

    await clocked_engine.queue.delete_dead_letter(dead.dead_letter_id)

    assert await clocked_engine.queue.receive_dead_letters(max_messages=10) == []
    assert (await clocked_engine.queue.stats()).dead_letters == 0


async def test_receive_dead_letters_respects_max_messages(clocked_engine):
    for _ in range(3):
        await clocked_engine.queue.send(_message())
    for _ in range(MAX_RECEIVES + 1):
        await _receive(clocked_engine, visibility=30)
        clocked_engine.advance(31)

    assert (await clocked_engine.queue.stats()).dead_letters == 3
    assert len(await clocked_engine.queue.receive_dead_letters(max_messages=2)) == 2


async def test_stats_count_visible_in_flight_and_the_oldest_age(clocked_engine):
    assert await clocked_engine.queue.stats() == type(await clocked_engine.queue.stats())(
        visible=0, in_flight=0, oldest_age_seconds=0, dead_letters=0
    )
    await clocked_engine.queue.send(_message())
    clocked_engine.advance(10)
    await clocked_engine.queue.send(_message())
    await clocked_engine.queue.send(_message())
    clocked_engine.advance(2)

    [received] = await _receive(clocked_engine, max_messages=1)
    stats = await clocked_engine.queue.stats()

    assert (stats.visible, stats.in_flight, stats.dead_letters) == (2, 1, 0)
    assert stats.oldest_age_seconds == pytest.approx(12, abs=0.01)
    await clocked_engine.queue.delete(received.receipt)
    assert (await clocked_engine.queue.stats()).oldest_age_seconds == pytest.approx(2, abs=0.01)


async def test_any_visible_sees_only_what_a_receive_could_take_now(clocked_engine):
    """Empty, delayed or received-and-hidden: nothing visible. Sent, due, or made
    visible again: something is, whatever its tenant."""
    assert await clocked_engine.queue.any_visible() is False
    await clocked_engine.queue.send(_message("t1"), delay_seconds=5)
    assert await clocked_engine.queue.any_visible() is False

    clocked_engine.advance(6)
    assert await clocked_engine.queue.any_visible() is True
    [received] = await _receive(clocked_engine)
    assert await clocked_engine.queue.any_visible() is False

    await clocked_engine.queue.send(_message("t2"))
    assert await clocked_engine.queue.any_visible() is True
    await clocked_engine.queue.delete((await _receive(clocked_engine))[0].receipt)
    assert await clocked_engine.queue.change_visibility(received.receipt, timeout_seconds=0)
    assert await clocked_engine.queue.any_visible() is True


@pytest.mark.timeout(10)
async def test_a_waiting_receive_returns_when_a_message_is_sent(engine):
    message = _message()
    started = time.monotonic()
    waiting = asyncio.create_task(_receive(engine, wait=5.0))
    await asyncio.sleep(0.2)
    assert not waiting.done()

    await engine.queue.send(message)
    deliveries = await asyncio.wait_for(waiting, timeout=4)

    assert [d.message.job_id for d in deliveries] == [message.job_id]
    assert time.monotonic() - started < 4


@pytest.mark.timeout(10)
async def test_a_waiting_receive_gives_up_after_wait_seconds(engine):
    started = time.monotonic()

    assert await _receive(engine, wait=0.3) == []

    assert 0.25 <= time.monotonic() - started < 3


# --- dead letters no worker can read ----------------------------------------------------


async def _undecodable(engine, *bodies):
    if engine.send_raw is None:
        pytest.skip(f"{engine.name} holds messages as objects: none is ever undecodable")
    for body in bodies:
        await engine.send_raw(body)
        engine.advance(1)
    good = _message()
    await engine.queue.send(good)
    # The undecodable ones go to the dead letters at once; the good one is delivered.
    assert [d.message.job_id for d in await _receive(engine)] == [good.job_id]


async def test_an_undecodable_letter_is_kept_for_an_operator_not_the_sweeper(engine):
    await _undecodable(engine, "{not json", '{"tenant_id": "t1"}')

    letters = await engine.queue.undecodable_letters(limit=10)

    # Dead-lettered by one receive, at one instant: in the order of their ids.
    assert sorted(letter.body for letter in letters) == ['{"tenant_id": "t1"}', "{not json"]
    assert [letter.dead_letter_id for letter in letters] == sorted(
        letter.dead_letter_id for letter in letters
    )
    assert [letter.receive_count for letter in letters] == [0, 0]
    assert all(letter.dead_lettered_at == engine.now() for letter in letters)
    assert await engine.queue.receive_dead_letters(max_messages=10) == []
    stats = await engine.queue.stats()
    assert (stats.dead_letters, stats.undecodable_letters) == (2, 2)
    first = letters[0]
    assert await engine.queue.undecodable_letter(first.dead_letter_id) == first
    assert await engine.queue.undecodable_letter("dl_none") is None


async def test_undecodable_letters_page_after_the_last_one_seen(engine):
    await _undecodable(engine, "a", "b", "c")
    [a, b, c] = await engine.queue.undecodable_letters(limit=10)

    after_a = await engine.queue.undecodable_letters(
        limit=10, after=(a.dead_lettered_at, a.dead_letter_id)
    )
    after_c = await engine.queue.undecodable_letters(
        limit=10, after=(c.dead_lettered_at, c.dead_letter_id)
    )

    # Dead-lettered in one receive (the same instant): the id orders them, none lost.
    assert {letter.body for letter in (a, b, c)} == {"a", "b", "c"}
    assert after_a == [b, c]
    assert after_c == []
    assert await engine.queue.undecodable_letters(limit=1) == [a]


async def test_only_an_undecodable_letter_is_purged(clocked_engine):
    await _undecodable(clocked_engine, "junk")
    [junk] = await clocked_engine.queue.undecodable_letters(limit=10)
    message = _message()
    await clocked_engine.queue.send(message)
    for _ in range(MAX_RECEIVES + 1):  # a job's message, redriven
        await _receive(clocked_engine, visibility=1)
        clocked_engine.advance(2)
    [job_letter] = await clocked_engine.queue.receive_dead_letters(max_messages=10)

    assert await clocked_engine.queue.delete_undecodable_letter(job_letter.dead_letter_id) is False
    assert await clocked_engine.queue.delete_undecodable_letter(junk.dead_letter_id) is True
    assert await clocked_engine.queue.delete_undecodable_letter(junk.dead_letter_id) is False

    assert await clocked_engine.queue.undecodable_letters(limit=10) == []
    assert await clocked_engine.queue.receive_dead_letters(max_messages=10) == [job_letter]
    stats = await clocked_engine.queue.stats()
    assert (stats.dead_letters, stats.undecodable_letters) == (1, 0)
