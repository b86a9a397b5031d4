"""JobStore attempt endings that leave the job to others: end_attempt and release."""

from __future__ import annotations

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus

pytestmark = pytest.mark.timeout(30)

TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
RETRY = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
LEASE_LOST = AttemptReport(outcome=AttemptOutcome.LEASE_LOST, latency_ms=99)
ABANDONED = AttemptReport(outcome=AttemptOutcome.ABANDONED, latency_ms=7)


async def _queued(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    return job.job_id


# --- end_attempt ------------------------------------------------------------------


async def test_end_attempt_records_a_lost_lease_without_touching_the_job(
    engine, job_factory, facts
):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    engine.advance(61)
    before = await engine.store.get(job_id)

    await engine.store.end_attempt(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), report=LEASE_LOST
    )

    assert facts(await engine.store.get(job_id)) == facts(before)
    [attempt] = await engine.store.attempts(job_id)
    assert (attempt.outcome, attempt.ended_at, attempt.latency_ms) == (
        AttemptOutcome.LEASE_LOST,
        engine.now(),
        99,
    )
    assert (await engine.store.events(job_id))[-1].kind is EventKind.LEASE_LOST


async def test_end_attempt_corrects_an_attempt_a_takeover_marked_abandoned(
    engine, job_factory, facts
):
    job_id = await _queued(engine, job_factory)
    first = await engine.claim(job_id, lease_seconds=60)
    engine.advance(61)
    await engine.claim(job_id, worker_id="w2")
    engine.advance(2)
    before = await engine.store.get(job_id)

    await engine.store.end_attempt(
        job_id, attempt_id=first.job.attempt_id, now=engine.now(), report=LEASE_LOST
    )

    assert facts(await engine.store.get(job_id)) == facts(before)
    old, new = await engine.store.attempts(job_id)
    assert (old.outcome, old.ended_at, old.latency_ms) == (
        AttemptOutcome.LEASE_LOST,
        engine.now(),
        99,
    )
    assert new.outcome is None
    assert (await engine.store.events(job_id))[-1].kind is EventKind.LEASE_LOST


async def test_end_attempt_leaves_an_attempt_with_its_own_outcome(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id)
    await _retry_owned(engine, job_id, claimed.job.attempt_id)
    attempts_before = await engine.store.attempts(job_id)
    events_before = await engine.store.events(job_id)
    engine.advance(1)

    await engine.store.end_attempt(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), report=LEASE_LOST
    )

    assert attempts_before[0].outcome is AttemptOutcome.RETRY
    assert await engine.store.attempts(job_id) == attempts_before
    assert await engine.store.events(job_id) == events_before


async def _retry_owned(engine, job_id, attempt_id):
    assert await engine.store.schedule_retry(
        job_id,
        attempt_id=attempt_id,
        now=engine.now(),
        not_before=engine.now() + 10,
        error=TRANSIENT,
        report=RETRY,
    )


# --- release ----------------------------------------------------------------------


async def test_release_gives_the_job_back_at_once(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    engine.advance(5)

    released = await engine.store.release(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), report=ABANDONED
    )

    job = await engine.store.get(job_id)
    assert released == job
    # It waits again, owned by nobody: the next claim is not a takeover.
    assert (job.status, job.attempt_id, job.worker_id, job.lease_until) == (
        JobStatus.QUEUED,
        None,
        None,
        None,
    )
    assert job.updated_at == engine.now()
    [attempt] = await engine.store.attempts(job_id)
    assert (attempt.outcome, attempt.ended_at, attempt.latency_ms) == (
        AttemptOutcome.ABANDONED,
        engine.now(),
        7,
    )
    assert EventKind.RELEASED in [e.kind for e in await engine.store.events(job_id)]
    again = await engine.claim(job_id, worker_id="w2")
    assert again.claimed is True
    assert again.job.fence == 2
    assert again.abandoned_attempt_id is None


async def test_a_released_attempt_is_recorded_once(engine, job_factory):
    """One event per fact: the RELEASED attempt is not abandoned again at the next claim."""
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    await engine.store.release(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), report=ABANDONED
    )
    engine.advance(61)

    await engine.claim(job_id, worker_id="w2")

    kinds = [e.kind for e in await engine.store.events(job_id)]
    assert kinds.count(EventKind.RELEASED) == 1
    assert EventKind.ATTEMPT_ABANDONED not in kinds
    first, _ = await engine.store.attempts(job_id)
    assert first.outcome is AttemptOutcome.ABANDONED
    assert (await engine.store.get(job_id)).deliveries_without_outcome == 0


async def test_release_by_a_non_owner_is_refused(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    stale = (await engine.claim(job_id, lease_seconds=60)).job.attempt_id
    engine.advance(61)
    expired = await engine.store.release(
        job_id, attempt_id=stale, now=engine.now(), report=ABANDONED
    )
    owner = await engine.claim(job_id, worker_id="w2")
    before = await engine.store.get(job_id)

    taken_over = await engine.store.release(
        job_id, attempt_id=stale, now=engine.now(), report=ABANDONED
    )

    assert (expired, taken_over) == (None, None)
    assert await engine.store.get(job_id) == before == owner.job


# --- wait_for_provider ------------------------------------------------------------

UNAUTHORIZED = JobError(code="unauthorized", failure_class=FailureClass.UNAUTHORIZED, message="m")
REFUSED = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.UNAUTHORIZED)


async def test_a_job_given_back_to_wait_for_its_provider_is_queued_with_its_budgets(
    engine, job_factory
):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id)

    after = await engine.store.wait_for_provider(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        error=UNAUTHORIZED,
        report=REFUSED,
        known=claimed.job,
    )

    stored = await engine.store.get(job_id)
    assert after is not None
    assert stored == after
    assert (stored.status, stored.error, stored.attempt_id, stored.failure_count) == (
        JobStatus.QUEUED,
        UNAUTHORIZED,
        None,
        0,
    )
    [attempt] = await engine.store.attempts(job_id)
    assert (attempt.outcome, attempt.failure_class) == (
        AttemptOutcome.RETRY,
        FailureClass.UNAUTHORIZED,
    )
    released = (await engine.store.events(job_id))[-1]
    assert (released.kind, released.detail["reason"]) == (EventKind.RELEASED, "provider_paused")
    again = await engine.claim(job_id)  # and it is claimed again like any queued job
    assert again.claimed and again.job.fence == claimed.job.fence + 1


async def test_a_cancel_requested_meanwhile_wins_over_waiting_for_the_provider(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id)
    await engine.store.request_cancel(job_id, tenant_id=claimed.job.tenant_id, now=engine.now())

    after = await engine.store.wait_for_provider(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        error=UNAUTHORIZED,
        report=REFUSED,
    )

    assert after is not None and after.status is JobStatus.CANCELLED
    [attempt] = await engine.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.CANCELLED
