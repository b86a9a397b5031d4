"""SqliteJobQueue specifics: receipts, redrive at max_receives, wake-ups."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest

from ferryman.adapters.sqlite import SqliteDatabase, SqliteJobQueue
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import QueueMessage


def _message() -> QueueMessage:
    return QueueMessage(job_id=new_job_id(), tenant_id="t1")


async def test_a_receipt_goes_stale_when_the_message_is_received_again(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock)
    await queue.send(_message())
    [first] = await queue.receive(max_messages=1, visibility_timeout_seconds=30)
    clock.advance(31)
    [second] = await queue.receive(max_messages=1, visibility_timeout_seconds=30)
    assert second.receive_count == 2
    assert first.receipt != second.receipt

    assert await queue.change_visibility(first.receipt, timeout_seconds=0) is False
    await queue.delete(first.receipt)  # stale: a silent no-op
    assert (await queue.stats()).in_flight == 1

    assert await queue.change_visibility(second.receipt, timeout_seconds=0) is True
    assert (await queue.stats()).visible == 1
    await queue.delete(second.receipt)
    await queue.delete(second.receipt)  # already deleted: still fine
    stats = await queue.stats()
    assert (stats.visible, stats.in_flight, stats.oldest_age_seconds) == (0, 0, 0.0)
    assert await queue.change_visibility("garbage", timeout_seconds=1) is False


async def test_a_message_moves_to_dead_letters_after_max_receives(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock, max_receives=3)
    message = _message()
    await queue.send(message)
    counts = []
    for _ in range(3):
        [delivery] = await queue.receive(max_messages=1, visibility_timeout_seconds=10)
        counts.append(delivery.receive_count)
        clock.advance(11)
    assert counts == [1, 2, 3]

    assert await queue.receive(max_messages=1, visibility_timeout_seconds=10) == []
    [letter] = await queue.receive_dead_letters(max_messages=10)
    assert letter.message == message
    assert letter.receive_count == 3
    assert (await queue.stats()).dead_letters == 1
    assert len(await queue.receive_dead_letters(max_messages=10)) == 1  # not removed by reading

    await queue.delete_dead_letter(letter.dead_letter_id)
    assert await queue.receive_dead_letters(max_messages=10) == []


async def test_receive_skips_dead_letters_and_still_fills_the_batch(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock, max_receives=1)
    poison, fresh = _message(), _message()
    await queue.send(poison)
    await queue.receive(max_messages=1, visibility_timeout_seconds=0)
    clock.advance(1)
    await queue.send(fresh)
    deliveries = await queue.receive(max_messages=1, visibility_timeout_seconds=30)
    assert [d.message for d in deliveries] == [fresh]
    assert (await queue.stats()).dead_letters == 1


async def test_a_zero_visibility_receive_delivers_each_message_once(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock)
    for _ in range(3):
        await queue.send(_message())
    deliveries = await queue.receive(max_messages=10, visibility_timeout_seconds=0)
    assert len({d.message.job_id for d in deliveries}) == len(deliveries) == 3


async def test_delayed_messages_are_in_flight_until_due(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock)
    await queue.send(_message(), delay_seconds=5)
    clock.advance(2)
    stats = await queue.stats()
    assert (stats.visible, stats.in_flight, stats.oldest_age_seconds) == (0, 1, 2.0)
    assert await queue.receive(max_messages=1, visibility_timeout_seconds=30) == []
    clock.advance(3)
    assert len(await queue.receive(max_messages=1, visibility_timeout_seconds=30)) == 1


async def test_a_send_in_this_process_wakes_a_waiting_receive(db, clock) -> None:
    # A long poll interval: only the in-process wake-up can answer in time.
    queue = SqliteJobQueue(db, clock=clock, poll_interval_seconds=10)
    waiting = asyncio.ensure_future(
        queue.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=5)
    )
    await asyncio.sleep(0.05)
    assert not waiting.done()
    started = time.monotonic()
    await queue.send(_message())
    deliveries = await asyncio.wait_for(waiting, timeout=2)
    assert len(deliveries) == 1
    assert time.monotonic() - started < 1


async def test_a_send_by_another_process_is_found_by_polling(db, db_path, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock, poll_interval_seconds=0.02)
    other = await SqliteDatabase.open(db_path)
    try:
        waiting = asyncio.ensure_future(
            queue.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=3)
        )
        await asyncio.sleep(0.05)
        await SqliteJobQueue(other, clock=clock).send(_message())
        assert len(await asyncio.wait_for(waiting, timeout=2)) == 1
    finally:
        await other.close()


async def test_an_empty_receive_waits_about_wait_seconds(db, clock) -> None:
    queue = SqliteJobQueue(db, clock=clock, poll_interval_seconds=0.02)
    started = time.monotonic()
    assert (
        await queue.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=0.1) == []
    )
    assert 0.09 <= time.monotonic() - started < 1


def _insert_raw(db_path, body: str, *, tenant_id: str = "t1", at: float = 0.0) -> None:
    """A message written by something other than this code (a bug, an operator, a newer
    version): only its body differs from ours."""
    conn = sqlite3.connect(db_path)
    try:
        conn.execute(
            "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at, receive_count) "
            "VALUES (?, ?, ?, ?, ?, 0)",
            (f"msg_raw_{abs(hash(body))}", body, tenant_id, at, at),
        )
        conn.commit()
    finally:
        conn.close()


@pytest.mark.parametrize(
    "body",
    [
        "{not json",
        "[1, 2, 3]",
        '{"tenant_id": "t1"}',  # no job id
        '{"job_id": 7, "tenant_id": "t1"}',
        '{"job_id": "gen_1", "tenant_id": "t1", "payload_version": "two"}',
    ],
)
async def test_an_undecodable_message_is_dead_lettered_at_once_and_the_rest_flow(
    db, db_path, clock, body
) -> None:
    queue = SqliteJobQueue(db, clock=clock, max_receives=10)
    _insert_raw(db_path, body, at=clock.now() - 10)  # the oldest: first in line
    good = [_message() for _ in range(3)]
    for message in good:
        await queue.send(message)

    delivered = await queue.receive(max_messages=10, visibility_timeout_seconds=30)

    assert [d.message.job_id for d in delivered] == [m.job_id for m in good]
    stats = await queue.stats()
    assert stats.dead_letters == 1
    # It names no job, so the sweeper is never handed it; it stays for an operator.
    assert await queue.receive_dead_letters(max_messages=10) == []
    conn = sqlite3.connect(db_path)
    try:
        row = conn.execute("SELECT reason, job_id, body FROM dead_letters").fetchone()
    finally:
        conn.close()
    assert row == ("undecodable", None, body)


async def test_an_unknown_payload_version_is_delivered_for_a_worker_that_knows_it(
    db, db_path, clock
) -> None:
    queue = SqliteJobQueue(db, clock=clock, max_receives=2)
    body = '{"job_id": "gen_future", "tenant_id": "t1", "payload_version": 99}'
    _insert_raw(db_path, body, at=clock.now())

    [delivery] = await queue.receive(max_messages=1, visibility_timeout_seconds=1)
    assert delivery.message.payload_version == 99
    for _ in range(2):  # never deleted by a worker that does not know it: the budget applies
        clock.advance(2)
        await queue.receive(max_messages=1, visibility_timeout_seconds=1)

    [letter] = await queue.receive_dead_letters(max_messages=10)
    assert (letter.message.job_id, letter.reason) == ("gen_future", "max_receives")


async def test_a_receive_held_back_by_a_tenants_share_looks_again_when_a_slot_frees(
    db, clock
) -> None:
    """Not at the next poll: a worker whose one tenant holds its share would idle."""
    from collections import Counter

    from ferryman.ports.queue import TenantBudget

    queue = SqliteJobQueue(db, clock=clock, poll_interval_seconds=5.0)
    await queue.send(_message())
    held = Counter({"t1": 1})
    budget = TenantBudget(max_per_tenant=1, in_flight=held, freed=asyncio.Event())
    receiving = asyncio.create_task(
        queue.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=5, budget=budget)
    )
    await asyncio.sleep(0.1)
    assert not receiving.done()  # the tenant holds its share: nothing for it yet

    started = time.monotonic()
    held["t1"] = 0
    assert budget.freed is not None
    budget.freed.set()
    [delivery] = await asyncio.wait_for(receiving, timeout=2)

    assert delivery.message.tenant_id == "t1"
    assert time.monotonic() - started < 1.0


async def test_a_receive_run_twice_by_the_writer_moves_the_tenant_cursor_once(db, clock) -> None:
    # Another op in the receive's batch raises: the writer undoes the batch and runs it
    # again. The receive must then start from where it started, or a window of tenants
    # would be skipped (a fairness bug a tenant could set off with a bad request).
    queue = SqliteJobQueue(db, clock=clock)
    tenants = [f"t{i:03}" for i in range(3 * 64)]
    for tenant in tenants:
        await queue.send(QueueMessage(job_id=new_job_id(), tenant_id=tenant))
    entered, release = threading.Event(), threading.Event()

    def block(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(5)

    def fail(conn: sqlite3.Connection) -> None:
        raise ValueError("this op changes its mind")

    blocker = asyncio.ensure_future(db.write(block))
    await asyncio.to_thread(entered.wait, 5)
    received = asyncio.ensure_future(queue.receive(max_messages=1, visibility_timeout_seconds=60))
    failing = asyncio.ensure_future(db.write(fail))
    await asyncio.sleep(0.05)  # both queued behind the blocker: one batch
    release.set()
    await blocker
    [first] = await received
    with pytest.raises(ValueError):
        await failing

    # A receive alone from the same start moves the cursor one window on; the next
    # receive then begins with the second window's tenants.
    [second] = await queue.receive(max_messages=1, visibility_timeout_seconds=60)
    assert first.message.tenant_id in tenants[:64]
    assert second.message.tenant_id in tenants[64:128]
