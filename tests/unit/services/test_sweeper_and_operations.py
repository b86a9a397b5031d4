"""Sweeper and operations: nothing stranded (I2), replays explained."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import (
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.services.sweeper import Sweeper


async def test_dead_lettered_message_fails_its_job_and_can_be_replayed(make_world) -> None:
    world = make_world(max_receives=2)
    job = await world.submit("x")
    for _ in range(2):  # two deliveries that crash: no outcome recorded
        deliveries = await world.queue.receive(max_messages=1, visibility_timeout_seconds=1)
        assert len(deliveries) == 1
        now = world.clock.now()
        await world.store.claim(
            job.job_id,
            attempt_id=new_attempt_id(),
            worker_id="dead",
            now=now,
            lease_until=now + 1,
            max_deliveries_without_outcome=world.max_receives,
        )
        world.clock.advance(2)
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=1) == []
    report = await world.sweeper().sweep_once()
    assert report.dead_lettered == 1
    failed = await world.job(job.job_id)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    assert (failed.error.code, failed.error.failure_class) == (
        "dead_lettered",
        FailureClass.DELIVERY,
    )
    assert all(
        a.outcome is AttemptOutcome.ABANDONED for a in await world.store.attempts(job.job_id)
    )
    page = await world.operations.dead_letters()
    assert [j.job_id for j in page.jobs] == [job.job_id]

    replay = await world.operations.replay([job.job_id, "gen_missing"], actor="ops", reason="fixed")
    assert replay.replayed == [job.job_id]
    assert replay.skipped == [("gen_missing", "not_found")]
    events = await world.store.events(job.job_id)
    replayed = [e for e in events if e.kind is EventKind.REPLAYED]
    assert replayed and replayed[0].detail == {"actor": "ops", "reason": "fixed"}
    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


async def test_replay_skips_a_succeeded_job(make_world) -> None:
    world = make_world()
    job = await world.submit("x")
    await world.worker().run_until_idle()
    report = await world.operations.replay([job.job_id], actor="ops", reason="oops")
    assert report.replayed == []
    assert report.skipped == [(job.job_id, "status_succeeded")]


async def test_replay_on_the_outbox_path_sends_a_message(make_world) -> None:
    world = make_world(outbox=True)
    job = await world.submit("x", simulate={"script": ["refuse", "ok"]})
    await world.worker().run_until_idle()
    assert (await world.job(job.job_id)).status is JobStatus.FAILED
    await world.operations.replay(
        [job.job_id], actor="ops", reason="policy changed", include_failed=True
    )
    assert (await world.job(job.job_id)).dispatch_state is DispatchState.DISPATCHED
    await world.worker().run_until_idle()
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


async def test_stalled_processing_job_without_a_message_is_redispatched_once(make_world) -> None:
    world = make_world()
    job = await _orphaned(world, lease_seconds=60)
    sweeper = world.sweeper(stalled_after_seconds=120)
    assert (await sweeper.sweep_once()).redispatched == 0  # not stalled yet
    world.clock.advance(200)
    assert (await sweeper.sweep_once()).redispatched == 1
    assert (await sweeper.sweep_once()).redispatched == 0  # once, not every round
    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert EventKind.REDISPATCHED in [e.kind for e in await world.store.events(job.job_id)]


async def test_a_crashed_job_whose_message_waits_to_be_taken_over_is_not_resent(
    make_world,
) -> None:
    """A worker died holding the job; its message comes back after the visibility
    timeout but waits behind busy workers longer than the stall threshold. It is not
    stranded: re-sending it would only deliver the job twice."""
    world = make_world()
    job, delivery = await _held_by_a_dead_worker(world, lease_seconds=60)
    world.clock.advance(500)  # lease and visibility long over, nobody received it yet

    assert (await world.sweeper(stalled_after_seconds=120).sweep_once()).redispatched == 0

    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert EventKind.REDISPATCHED not in {e.kind for e in await world.store.events(job.job_id)}
    assert delivery.receive_count == 1
    stats = await world.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 0)


@pytest.mark.parametrize("outbox", [False, True])
async def test_a_job_that_fails_after_the_stalled_scan_ends_its_history_there(
    make_world, monkeypatch, outbox: bool
) -> None:
    world = make_world(outbox=outbox)
    job = await _orphaned(world, lease_seconds=60)
    world.clock.advance(200)
    scan = world.store.stalled

    async def scan_then_fail(**kwargs: object) -> list[Job]:
        found = await scan(**kwargs)
        # Between the sweeper's scan and its re-send, the job is failed elsewhere.
        await world.store.fail_unowned(
            job.job_id,
            now=world.clock.now(),
            error=JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="x"),
            kind=EventKind.DEAD_LETTERED,
            detail={},
        )
        return found

    monkeypatch.setattr(world.store, "stalled", scan_then_fail)
    report = await world.sweeper(stalled_after_seconds=120).sweep_once()
    # A stray message (the outbox path sends before it records) finds the job finished.
    await world.worker().run_until_idle()

    events = await world.store.events(job.job_id)
    assert events[-1].kind is EventKind.DEAD_LETTERED
    assert EventKind.REDISPATCHED not in {e.kind for e in events}
    assert report.redispatched == (1 if outbox else 0)
    assert world.provider.invocations == 0
    stats = await world.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 0)


async def test_outbox_gap_is_closed_by_the_sweeper(make_world) -> None:
    world = make_world(outbox=True)
    # A crash between storing the job and sending its message: PENDING, no message.
    from ferryman.core.idempotency import request_fingerprint
    from ferryman.core.ids import new_correlation_id, new_job_id
    from ferryman.core.job import Job

    now = world.clock.now()
    job = Job(
        tenant_id="t1",
        job_id=new_job_id(),
        task="generate",
        model="sim",
        input={"prompt": "x"},
        request_hash=request_fingerprint(task="generate", input={"prompt": "x"}, model="sim"),
        created_at=now,
        updated_at=now,
        correlation_id=new_correlation_id(),
    )
    await world.store.create(job, idempotency_expires_at=None, now=now)
    world.clock.advance(121)
    assert (await world.sweeper(stalled_after_seconds=120).sweep_once()).redispatched == 1
    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


async def _dead_letter_every_message(world) -> None:
    """Receive every message until the queue moves it to its dead-letter queue."""
    for _ in range(world.max_receives + 1):
        await world.queue.receive(max_messages=10, visibility_timeout_seconds=1)
        world.clock.advance(2)
    assert await world.queue.receive(max_messages=10, visibility_timeout_seconds=1) == []


async def test_every_dead_letter_is_removed_and_only_jobs_it_fails_are_counted(make_world):
    world = make_world(max_receives=2)
    poison = await world.submit("a")
    finished = await world.submit("b")
    busy = await world.submit("c")
    await _dead_letter_every_message(world)
    now = world.clock.now()
    for job in (finished, busy):
        claimed = await world.store.claim(
            job.job_id,
            attempt_id=new_attempt_id(),
            worker_id="w",
            now=now,
            lease_until=now + 60,
            max_deliveries_without_outcome=world.max_receives,
        )
    assert await world.store.succeed(
        finished.job_id,
        attempt_id=(await world.job(finished.job_id)).attempt_id,
        now=now,
        result_ref="ref",
        report=AttemptReport(outcome=AttemptOutcome.SUCCEEDED),
    )

    report = await world.sweeper().sweep_once()

    # The poison message's job fails; a finished job and one a live attempt owns are
    # left alone (if that owner dies, the stalled scan sends a new message).
    assert report.dead_lettered == 1
    failed = await world.job(poison.job_id)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None and "received 2 times" in failed.error.message
    last = (await world.store.events(poison.job_id))[-1]
    assert (last.kind, last.detail) == (EventKind.DEAD_LETTERED, {"receive_count": 2})
    assert (await world.job(finished.job_id)).status is JobStatus.SUCCEEDED
    assert await world.job(busy.job_id) == claimed.job
    assert await world.queue.receive_dead_letters(max_messages=10) == []


async def test_several_dead_letters_fail_as_many_jobs(make_world):
    world = make_world(max_receives=1)
    jobs = [await world.submit(f"p{n}") for n in range(3)]
    await _dead_letter_every_message(world)

    assert (await world.sweeper().sweep_once()).dead_lettered == 3
    assert {(await world.job(j.job_id)).status for j in jobs} == {JobStatus.FAILED}


async def _held_by_a_dead_worker(world, *, lease_seconds: float):
    """A job claimed under a lease of ``lease_seconds`` by a worker that then died, and
    the delivery of its message that worker held (hidden for 60 s)."""
    job = await world.submit("x")
    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    now = world.clock.now()
    await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="dead",
        now=now,
        lease_until=now + lease_seconds,
        max_deliveries_without_outcome=world.max_receives,
    )
    return job, delivery


async def _orphaned(world, *, lease_seconds: float):
    """A job whose owner died holding a lease of ``lease_seconds`` and whose message is gone."""
    job, delivery = await _held_by_a_dead_worker(world, lease_seconds=lease_seconds)
    await world.queue.delete(delivery.receipt)
    return job


async def test_a_redispatch_restarts_the_stall_clock(make_world):
    world = make_world()
    job = await _orphaned(world, lease_seconds=0.5)
    sweeper = world.sweeper(stalled_after_seconds=120)
    world.clock.advance(121)

    assert (await sweeper.sweep_once()).redispatched == 1

    assert (await world.job(job.job_id)).updated_at == world.clock.now()
    # The re-sent message is lost too (a worker took it and died before its claim).
    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    await world.queue.delete(delivery.receipt)
    world.clock.advance(119)
    assert (await sweeper.sweep_once()).redispatched == 0
    world.clock.advance(2)
    assert (await sweeper.sweep_once()).redispatched == 1


async def test_a_job_stalls_after_two_minutes_by_default(make_world):
    world = make_world()
    await _orphaned(world, lease_seconds=0.5)
    sweeper = Sweeper(store=world.store, ledger=world.store, queue=world.queue, clock=world.clock)

    world.clock.advance(119)
    assert (await sweeper.sweep_once()).redispatched == 0
    world.clock.advance(2)
    assert (await sweeper.sweep_once()).redispatched == 1


async def test_the_sweeper_runs_rounds_until_told_to_stop(make_world, eventually):
    world = make_world(max_receives=1)
    job = await world.submit("x")
    await _dead_letter_every_message(world)
    stop = asyncio.Event()
    task = asyncio.create_task(world.sweeper(interval_seconds=0.01).run(stop))

    async def failed() -> bool:
        return (await world.job(job.job_id)).status is JobStatus.FAILED

    await eventually(failed, within_seconds=5)
    stop.set()
    await asyncio.wait_for(task, timeout=5)


async def _send_undecodable(world, body: str) -> None:
    """A message ferryman did not write, received once: dead-lettered as undecodable."""
    at = world.clock.now()
    await world.queue._db.write(
        lambda conn: conn.execute(
            "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at) "
            "VALUES (?, ?, 't1', ?, ?)",
            (f"raw_{at}", body, at, at),
        )
    )
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=1) == []
    world.clock.advance(1)


async def test_each_undecodable_dead_letter_is_logged_once_without_its_body(
    sqlite_world, capsys
) -> None:
    world = sqlite_world
    sweeper = world.sweeper()
    await _send_undecodable(world, "secret-looking junk")

    first = await sweeper.sweep_once()
    again = await sweeper.sweep_once()
    await _send_undecodable(world, "more junk")
    later = await sweeper.sweep_once()

    assert (first.undecodable, again.undecodable, later.undecodable) == (1, 0, 1)
    lines = [x for x in capsys.readouterr().out.splitlines() if "undecodable_dead_letter" in x]
    letters = await world.queue.undecodable_letters(limit=10)
    assert len(lines) == 2
    for line, letter in zip(lines, letters, strict=True):
        assert letter.dead_letter_id in line and "ferryman dlq" in line
        assert "junk" not in line
    # A sweeper started later (another process, a restart) tells of what is there.
    assert (await world.sweeper().sweep_once()).undecodable == 2
