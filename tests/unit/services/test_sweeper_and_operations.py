"""Sweeper and operations: nothing stranded (I2), replays explained."""

from __future__ import annotations

from ferryman.core.errors import FailureClass
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import AttemptOutcome, DispatchState, EventKind, JobStatus


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
    job = await world.submit("x")
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
    now = world.clock.now()
    await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="dead",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=world.max_receives,
    )
    await world.queue.delete(delivery.receipt)  # the message is gone, the owner died
    sweeper = world.sweeper(stalled_after_seconds=120)
    assert (await sweeper.sweep_once()).redispatched == 0  # not stalled yet
    world.clock.advance(200)
    assert (await sweeper.sweep_once()).redispatched == 1
    assert (await sweeper.sweep_once()).redispatched == 0  # once, not every round
    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert EventKind.REDISPATCHED in [e.kind for e in await world.store.events(job.job_id)]


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
