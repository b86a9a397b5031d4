"""JobStore retries, unowned failures, replay, attempt endings, the sweeper's view, history."""

from __future__ import annotations

import pytest

from ferryman.core.errors import FailureClass, IllegalTransitionError, JobNotFoundError
from ferryman.core.job import (
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    JobError,
    JobStatus,
)

pytestmark = pytest.mark.timeout(30)

TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
INVALID = JobError(code="invalid_output", failure_class=FailureClass.INVALID_OUTPUT, message="x")
DEAD = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="redriven")
RETRY = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
FAILED = AttemptReport(outcome=AttemptOutcome.FAILED, failure_class=FailureClass.TRANSIENT)
LEASE_LOST = AttemptReport(outcome=AttemptOutcome.LEASE_LOST, latency_ms=99)
ABANDONED = AttemptReport(outcome=AttemptOutcome.ABANDONED, latency_ms=7)


async def _queued(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    return job.job_id


async def _retry(engine, job_id, error, *, delay=10.0):
    claimed = await engine.claim(job_id)
    not_before = engine.now() + delay
    assert await engine.store.schedule_retry(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        not_before=not_before,
        error=error,
        report=RETRY,
    )
    return not_before


async def test_schedule_retry_counts_failures_and_invalid_outputs(engine, job_factory):
    job_id = await _queued(engine, job_factory)

    not_before = await _retry(engine, job_id, INVALID)
    job = await engine.store.get(job_id)
    assert job.status is JobStatus.RETRY_SCHEDULED
    assert job.not_before == not_before
    assert job.lease_until is None
    assert (job.failure_count, job.invalid_output_count) == (1, 1)
    assert job.error == INVALID
    event = (await engine.store.events(job_id))[-1]
    assert event.kind is EventKind.RETRY_SCHEDULED
    assert event.detail["not_before"] == not_before

    engine.advance(10)
    await _retry(engine, job_id, TRANSIENT)
    job = await engine.store.get(job_id)
    assert (job.failure_count, job.invalid_output_count, job.attempt_count) == (2, 1, 2)
    assert [a.outcome for a in await engine.store.attempts(job_id)] == [AttemptOutcome.RETRY] * 2


async def test_fail_unowned_fails_a_waiting_job(engine, job_factory):
    job_id = await _queued(engine, job_factory)

    job = await engine.store.fail_unowned(
        job_id, now=engine.now(), error=DEAD, kind=EventKind.DEAD_LETTERED, detail={"n": 10}
    )

    assert job is not None
    assert (job.status, job.error, job.completed_at) == (JobStatus.FAILED, DEAD, engine.now())
    assert await engine.store.get(job_id) == job
    event = (await engine.store.events(job_id))[-1]
    assert (event.kind, event.detail) == (EventKind.DEAD_LETTERED, {"n": 10})


async def test_fail_unowned_closes_an_expired_attempt_as_abandoned(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    await engine.claim(job_id, lease_seconds=60)
    engine.advance(61)

    job = await engine.store.fail_unowned(
        job_id, now=engine.now(), error=DEAD, kind=EventKind.DEAD_LETTERED, detail={}
    )

    assert job is not None
    assert job.status is JobStatus.FAILED
    [attempt] = await engine.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.ABANDONED
    assert attempt.ended_at == engine.now()


async def test_fail_unowned_refuses_a_live_owner_and_a_terminal_job(engine, job_factory):
    owned = await _queued(engine, job_factory)
    await engine.claim(owned, lease_seconds=60)
    engine.advance(60)
    owned_before = await engine.store.get(owned)
    done = await _queued(engine, job_factory)
    await engine.store.request_cancel(done, tenant_id="t1", now=engine.now())
    done_before = await engine.store.get(done)

    for job_id in (owned, done):
        assert (
            await engine.store.fail_unowned(
                job_id, now=engine.now(), error=DEAD, kind=EventKind.DEAD_LETTERED, detail={}
            )
            is None
        )

    assert await engine.store.get(owned) == owned_before
    assert await engine.store.get(done) == done_before
    assert [a.outcome for a in await engine.store.attempts(owned)] == [None]


# --- replay -----------------------------------------------------------------------


async def _failed(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    await _retry(engine, job_id, INVALID)
    engine.advance(10)
    claimed = await engine.claim(job_id)
    assert await engine.store.fail(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), error=TRANSIENT, report=FAILED
    )
    return job_id


async def test_replay_restarts_a_failed_job_keeping_its_fence(engine, job_factory):
    job_id = await _failed(engine, job_factory)
    assert await engine.drain() == [job_id]
    engine.advance(100)

    job = await engine.store.replay(
        job_id, now=engine.now(), actor="ops@t", reason="fixed", include_failed=True
    )

    assert job.status is JobStatus.QUEUED
    # The budgets start afresh; the attempts it had are still counted (its attempt list).
    assert (job.attempt_count, job.failure_count, job.invalid_output_count) == (2, 0, 0)
    assert job.fence == 2
    assert (job.error, job.result_ref, job.completed_at, job.attempt_id) == (None, None, None, None)
    assert job.cancel_requested is False
    assert await engine.store.get(job_id) == job
    replayed = [e for e in await engine.store.events(job_id) if e.kind is EventKind.REPLAYED]
    assert len(replayed) == 1
    assert replayed[0].detail["actor"] == "ops@t"
    assert replayed[0].detail["reason"] == "fixed"
    if engine.store.enqueues_with_job:
        assert job.dispatch_state is DispatchState.DISPATCHED
        assert await engine.drain() == [job_id]
    else:
        assert job.dispatch_state is DispatchState.PENDING
        assert await engine.drain() == []

    again = await engine.claim(job_id)
    assert again.claimed is True
    assert (again.job.fence, again.job.attempt_count) == (3, 3)
    assert [a.attempt_no for a in await engine.store.attempts(job_id)] == [1, 2, 3]


async def test_replay_by_default_takes_only_dead_lettered_jobs(engine, job_factory):
    model_failed = await _failed(engine, job_factory)
    before = await engine.store.get(model_failed)

    with pytest.raises(IllegalTransitionError, match="dead-lettered"):
        await engine.store.replay(model_failed, now=engine.now(), actor="ops", reason="x")
    assert await engine.store.get(model_failed) == before

    dead = await _queued(engine, job_factory)
    error = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="loop")
    await engine.store.fail_unowned(
        dead, now=engine.now(), error=error, kind=EventKind.DEAD_LETTERED, detail={}
    )
    replayed = await engine.store.replay(dead, now=engine.now(), actor="ops", reason="fixed")
    assert replayed.status is JobStatus.QUEUED


async def test_replay_never_restarts_a_job_its_client_cancelled(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())
    before = await engine.store.get(job_id)

    for include_failed in (False, True):
        with pytest.raises(IllegalTransitionError, match="cancelled"):
            await engine.store.replay(
                job_id,
                now=engine.now(),
                actor="ops",
                reason="oops",
                include_failed=include_failed,
            )
    assert await engine.store.get(job_id) == before


async def test_replay_refuses_a_succeeded_or_unknown_job(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id)
    assert await engine.store.succeed(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    before = await engine.store.get(job_id)

    with pytest.raises(IllegalTransitionError):
        await engine.store.replay(job_id, now=engine.now(), actor="ops", reason="again")
    with pytest.raises(JobNotFoundError):
        await engine.store.replay("gen_unknown", now=engine.now(), actor="ops", reason="x")

    assert await engine.store.get(job_id) == before


# --- stalled ----------------------------------------------------------------------


async def test_stalled_lists_jobs_nothing_is_driving(engine, job_factory):
    # Set up in reverse order of age, each a second apart, to see the ordering.
    pending = None
    if not engine.store.enqueues_with_job:
        # Created, but the process died before it sent the message.
        pending = job_factory()
        await engine.store.create(pending, idempotency_expires_at=None, now=engine.now())
        engine.advance(1)
    retry_overdue = await _queued(engine, job_factory)
    await _retry(engine, retry_overdue, TRANSIENT, delay=10)
    engine.advance(1)
    lease_expired = await _queued(engine, job_factory)
    await engine.claim(lease_expired, lease_seconds=60)
    # Their messages are lost (acknowledged by a dying worker, say): nothing drives them.
    assert sorted(await engine.drain()) == sorted([retry_overdue, lease_expired])
    succeeded = await _queued(engine, job_factory)
    claimed = await engine.claim(succeeded)
    await engine.store.succeed(
        succeeded,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    old_queued = await _queued(engine, job_factory)
    engine.advance(1_000)
    fresh_lease = await _queued(engine, job_factory)
    await engine.claim(fresh_lease, lease_seconds=60)
    fresh_retry = await _queued(engine, job_factory)
    await _retry(engine, fresh_retry, TRANSIENT, delay=10)
    fresh_queued = await _queued(engine, job_factory)
    engine.advance(100)

    stalled = await engine.store.stalled(now=engine.now(), older_than_seconds=300, limit=100)

    expected = [retry_overdue, lease_expired]
    if pending is not None:
        expected.insert(0, pending.job_id)
    assert [j.job_id for j in stalled] == expected
    assert not {succeeded, old_queued, fresh_lease, fresh_retry, fresh_queued} & set(expected)
    assert len(await engine.store.stalled(now=engine.now(), older_than_seconds=300, limit=1)) == 1


async def test_a_job_whose_message_is_still_queued_is_not_stalled(engine, job_factory):
    """Waiting behind busy workers, hidden after a crash, or delayed until a retry is
    due: its message will be delivered and its claim take over. Re-sending it would
    only deliver it twice."""
    if not engine.store.enqueues_with_job:
        pytest.skip(f"{engine.name} keeps its queue apart: its stalled scan cannot tell")
    in_flight = await _queued(engine, job_factory)
    [delivery] = await engine.queue.receive(max_messages=10, visibility_timeout_seconds=5_000)
    await engine.claim(in_flight, lease_seconds=60)  # its worker died holding the message
    visible = await _queued(engine, job_factory)
    await engine.claim(visible, lease_seconds=60)  # its message never received
    delayed = await _queued(engine, job_factory)
    await _retry(engine, delayed, TRANSIENT, delay=10)
    lost = await _queued(engine, job_factory)
    await engine.claim(lost, lease_seconds=60)
    engine.advance(1_000)
    await _lose_messages_of(engine, lost)

    assert [j.job_id for j in await _stalled(engine)] == [lost]
    assert delivery.message.job_id == in_flight
    assert visible != lost


async def _lose_messages_of(engine, job_id):
    """Receive every visible message and delete only ``job_id``'s; the rest go back."""
    for delivery in await engine.queue.receive(max_messages=100, visibility_timeout_seconds=0):
        if delivery.message.job_id == job_id:
            await engine.queue.delete(delivery.receipt)


async def test_a_redispatch_sends_its_message_with_its_event(engine, job_factory):
    if not engine.store.enqueues_with_job:
        pytest.skip(f"{engine.name} keeps its queue apart: the sweeper sends, then records")
    job_id = await _queued(engine, job_factory)
    await engine.claim(job_id, lease_seconds=60)
    assert await engine.drain() == [job_id]
    engine.advance(1_000)

    assert await engine.store.redispatch(job_id, now=engine.now()) is True

    assert (await engine.store.events(job_id))[-1].kind is EventKind.REDISPATCHED
    assert await _stalled(engine) == []  # its message is queued again
    assert await engine.drain() == [job_id]


async def test_a_finished_job_is_not_redispatched(engine, job_factory):
    if not engine.store.enqueues_with_job:
        pytest.skip(f"{engine.name} keeps its queue apart: the sweeper sends, then records")
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    assert await engine.drain() == [job_id]
    await engine.store.fail(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), error=TRANSIENT, report=FAILED
    )
    history = await engine.store.events(job_id)

    assert await engine.store.redispatch(job_id, now=engine.now()) is False
    assert await engine.store.redispatch("gen_unknown", now=engine.now()) is False

    assert await engine.store.events(job_id) == history
    assert await engine.drain() == []


async def test_a_redispatched_job_is_not_offered_again_until_it_stalls_anew(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    await engine.claim(job_id, lease_seconds=60)
    await engine.drain()  # its message is lost
    engine.advance(1_000)
    assert [j.job_id for j in await _stalled(engine)] == [job_id]

    # The sweeper re-sends the message and says so.
    await engine.store.mark_dispatched(job_id, now=engine.now())
    job = await engine.store.get(job_id)
    engine.advance(299)
    still_fresh = await _stalled(engine)
    engine.advance(2)
    stalled_again = await _stalled(engine)

    assert job.dispatch_state is DispatchState.DISPATCHED
    assert job.updated_at == engine.now() - 301
    assert still_fresh == []
    assert [j.job_id for j in stalled_again] == [job_id]


async def test_a_live_attempt_is_not_stalled_even_if_its_dispatch_is_pending(engine, job_factory):
    job = job_factory()
    await engine.store.create(job, idempotency_expires_at=None, now=engine.now())
    await engine.claim(job.job_id, lease_seconds=10_000)
    engine.advance(1_000)

    assert await _stalled(engine) == []


async def _stalled(engine):
    return await engine.store.stalled(now=engine.now(), older_than_seconds=300, limit=100)


async def test_a_terminal_job_is_never_stalled(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    await engine.store.fail(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), error=TRANSIENT, report=FAILED
    )
    if not engine.store.enqueues_with_job:
        undispatched = job_factory()
        await engine.store.create(undispatched, idempotency_expires_at=None, now=engine.now())
        await engine.store.request_cancel(undispatched.job_id, tenant_id="t1", now=engine.now())
    engine.advance(10_000)

    assert await engine.store.stalled(now=engine.now(), older_than_seconds=300, limit=100) == []


# --- history ----------------------------------------------------------------------


async def test_events_and_attempts_are_in_order(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    await _retry(engine, job_id, TRANSIENT)
    engine.advance(10)
    claimed = await engine.claim(job_id, worker_id="w2")
    await engine.store.record_event(
        job_id, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={"receive_count": 2}
    )
    engine.advance(1)
    await engine.store.succeed(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )

    events = await engine.store.events(job_id)
    attempts = await engine.store.attempts(job_id)

    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.at for e in events] == sorted(e.at for e in events)
    assert all(e.job_id == job_id for e in events)
    assert [e.kind for e in events if e.kind is not EventKind.DISPATCHED] == [
        EventKind.ACCEPTED,
        EventKind.CLAIMED,
        EventKind.RETRY_SCHEDULED,
        EventKind.CLAIMED,
        EventKind.DUPLICATE_DELIVERY,
        EventKind.SUCCEEDED,
    ]
    [duplicate] = [e for e in events if e.kind is EventKind.DUPLICATE_DELIVERY]
    assert duplicate.detail == {"receive_count": 2}
    assert [(a.attempt_no, a.worker_id, a.outcome) for a in attempts] == [
        (1, "w1", AttemptOutcome.RETRY),
        (2, "w2", AttemptOutcome.SUCCEEDED),
    ]
    assert await engine.store.events("gen_unknown") == []
    assert await engine.store.attempts("gen_unknown") == []
