"""JobStore claim conditions, fencing and leases: who may change a job, and when."""

from __future__ import annotations

import pytest

from ferryman.core.errors import AlreadyTerminalError, FailureClass, JobNotFoundError
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus

pytestmark = pytest.mark.timeout(30)

TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, latency_ms=12)
RETRY = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
FAILED = AttemptReport(outcome=AttemptOutcome.FAILED, failure_class=FailureClass.TRANSIENT)
CANCELLED = AttemptReport(outcome=AttemptOutcome.CANCELLED)


async def _queued(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    return job.job_id


async def test_claim_of_a_queued_job_starts_attempt_one(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    now = engine.now()

    result = await engine.store.claim(
        job_id,
        attempt_id="att_1",
        worker_id="w1",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=10,
    )

    assert result.claimed is True
    assert result.abandoned_attempt_id is None
    job = result.job
    assert job.status is JobStatus.PROCESSING
    assert (job.fence, job.attempt_count) == (1, 1)
    assert (job.attempt_id, job.worker_id, job.lease_until) == ("att_1", "w1", now + 60)
    assert await engine.store.get(job_id) == job
    [attempt] = await engine.store.attempts(job_id)
    assert (attempt.attempt_no, attempt.attempt_id, attempt.worker_id) == (1, "att_1", "w1")
    assert attempt.started_at == now
    assert attempt.outcome is None
    assert attempt.ended_at is None
    assert EventKind.CLAIMED in [e.kind for e in await engine.store.events(job_id)]


async def test_a_live_lease_cannot_be_claimed(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    first = await engine.claim(job_id, lease_seconds=60)
    engine.advance(30)

    second = await engine.claim(job_id, worker_id="w2")

    assert second.claimed is False
    assert second.job == first.job
    assert await engine.store.get(job_id) == first.job
    assert len(await engine.store.attempts(job_id)) == 1


async def test_a_lease_is_live_up_to_and_including_lease_until(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    first = await engine.claim(job_id, lease_seconds=60)
    engine.advance(60)

    second = await engine.claim(job_id, worker_id="w2")
    published = await engine.store.succeed(
        job_id, attempt_id=first.job.attempt_id, now=engine.now(), result_ref="r", report=SUCCEEDED
    )

    assert second.claimed is False
    assert published is not None
    assert published.status is JobStatus.SUCCEEDED


async def test_an_expired_lease_is_taken_over_and_the_old_attempt_abandoned(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    first = await engine.claim(job_id, lease_seconds=60)
    engine.advance(61)

    second = await engine.claim(job_id, worker_id="w2")

    assert second.claimed is True
    assert second.abandoned_attempt_id == first.job.attempt_id
    assert second.job.status is JobStatus.PROCESSING
    assert (second.job.fence, second.job.attempt_count) == (2, 2)
    assert second.job.worker_id == "w2"
    old, new = await engine.store.attempts(job_id)
    assert (old.attempt_no, old.attempt_id) == (1, first.job.attempt_id)
    assert old.outcome is AttemptOutcome.ABANDONED
    assert old.ended_at == engine.now()
    assert (new.attempt_no, new.attempt_id, new.outcome) == (2, second.job.attempt_id, None)
    kinds = [e.kind for e in await engine.store.events(job_id)]
    assert kinds.count(EventKind.ATTEMPT_ABANDONED) == 1
    assert kinds.count(EventKind.CLAIMED) == 2


async def test_a_retry_is_claimable_only_from_not_before(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    first = await engine.claim(job_id)
    not_before = engine.now() + 30
    assert await engine.store.schedule_retry(
        job_id,
        attempt_id=first.job.attempt_id,
        now=engine.now(),
        not_before=not_before,
        error=TRANSIENT,
        report=RETRY,
    )
    engine.advance(29)

    early = await engine.claim(job_id)
    engine.advance(1)
    due = await engine.claim(job_id)

    assert early.claimed is False
    assert early.job.status is JobStatus.RETRY_SCHEDULED
    assert due.claimed is True
    assert due.job.fence == 2
    assert due.job.not_before is None
    assert [a.outcome for a in await engine.store.attempts(job_id)] == [
        AttemptOutcome.RETRY,
        None,
    ]


async def _terminal(engine, job_factory, status):
    job_id = await _queued(engine, job_factory)
    if status is JobStatus.CANCELLED:
        await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())
        return job_id
    claimed = await engine.claim(job_id)
    if status is JobStatus.SUCCEEDED:
        assert await engine.store.succeed(
            job_id,
            attempt_id=claimed.job.attempt_id,
            now=engine.now(),
            result_ref="r",
            report=SUCCEEDED,
        )
    else:
        assert await engine.store.fail(
            job_id,
            attempt_id=claimed.job.attempt_id,
            now=engine.now(),
            error=TRANSIENT,
            report=FAILED,
        )
    return job_id


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
async def test_a_terminal_job_is_never_claimable(engine, job_factory, status):
    job_id = await _terminal(engine, job_factory, status)
    before = await engine.store.get(job_id)
    engine.advance(10_000)

    result = await engine.claim(job_id)

    assert result.claimed is False
    assert result.job.status is status
    assert await engine.store.get(job_id) == before


# --- fencing ----------------------------------------------------------------------


async def test_a_stale_attempt_can_change_nothing(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    stale = (await engine.claim(job_id, lease_seconds=60)).job.attempt_id
    engine.advance(61)
    owner = await engine.claim(job_id, worker_id="w2")
    now = engine.now()
    attempts_before = await engine.store.attempts(job_id)
    events_before = await engine.store.events(job_id)

    outcomes = [
        await engine.store.succeed(
            job_id, attempt_id=stale, now=now, result_ref="r", report=SUCCEEDED
        ),
        await engine.store.schedule_retry(
            job_id, attempt_id=stale, now=now, not_before=now + 5, error=TRANSIENT, report=RETRY
        ),
        await engine.store.fail(job_id, attempt_id=stale, now=now, error=TRANSIENT, report=FAILED),
        await engine.store.finish_cancelled(job_id, attempt_id=stale, now=now, report=CANCELLED),
    ]
    lease = await engine.store.renew_lease(job_id, attempt_id=stale, now=now, lease_until=now + 600)

    # None: the stale attempt owns nothing, and nothing was written.
    assert outcomes == [None, None, None, None]
    assert lease.held is False
    assert await engine.store.get(job_id) == owner.job
    assert await engine.store.attempts(job_id) == attempts_before
    assert await engine.store.events(job_id) == events_before


async def test_an_owner_whose_lease_expired_cannot_publish(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    claimed = await engine.claim(job_id, lease_seconds=60)
    engine.advance(61)

    published = await engine.store.succeed(
        job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    renewed = await engine.store.renew_lease(
        job_id, attempt_id=claimed.job.attempt_id, now=engine.now(), lease_until=engine.now() + 60
    )

    assert published is None
    assert renewed.held is False
    job = await engine.store.get(job_id)
    assert job.status is JobStatus.PROCESSING
    assert job.result_ref is None


async def test_a_terminal_job_is_never_overwritten(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    attempt_id = (await engine.claim(job_id)).job.attempt_id
    now = engine.now()
    assert await engine.store.succeed(
        job_id, attempt_id=attempt_id, now=now, result_ref="first", report=SUCCEEDED
    )
    done = await engine.store.get(job_id)

    again = await engine.store.succeed(
        job_id, attempt_id=attempt_id, now=now, result_ref="second", report=SUCCEEDED
    )
    failed = await engine.store.fail(
        job_id, attempt_id=attempt_id, now=now, error=TRANSIENT, report=FAILED
    )

    assert (again, failed) == (None, None)
    job = await engine.store.get(job_id)
    assert job == done
    assert job.status is JobStatus.SUCCEEDED
    assert job.result_ref == "first"
    assert job.completed_at == now
    [attempt] = await engine.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert attempt.latency_ms == 12


async def test_succeed_publishes_and_closes_the_attempt(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    attempt_id = (await engine.claim(job_id)).job.attempt_id
    engine.advance(3)
    report = AttemptReport(
        outcome=AttemptOutcome.SUCCEEDED,
        latency_ms=250,
        input_tokens=3,
        output_tokens=5,
        provider_request_id="req-1",
    )

    assert await engine.store.succeed(
        job_id, attempt_id=attempt_id, now=engine.now(), result_ref="ref-1", report=report
    )

    job = await engine.store.get(job_id)
    assert (job.status, job.result_ref, job.completed_at) == (
        JobStatus.SUCCEEDED,
        "ref-1",
        engine.now(),
    )
    [attempt] = await engine.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert attempt.ended_at == engine.now()
    assert (attempt.latency_ms, attempt.input_tokens, attempt.output_tokens) == (250, 3, 5)
    assert attempt.provider_request_id == "req-1"
    assert (await engine.store.events(job_id))[-1].kind is EventKind.SUCCEEDED


# --- leases and cancellation ------------------------------------------------------


async def test_renew_lease_extends_it_and_reports_a_cancel_request(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    attempt_id = (await engine.claim(job_id, lease_seconds=60)).job.attempt_id
    start = engine.now()
    engine.advance(30)

    lease = await engine.store.renew_lease(
        job_id, attempt_id=attempt_id, now=engine.now(), lease_until=engine.now() + 60
    )
    assert lease.held is True
    assert lease.cancel_requested is False
    assert (await engine.store.get(job_id)).lease_until == start + 90
    engine.advance(45)  # past the first lease, inside the renewed one
    assert (await engine.claim(job_id)).claimed is False

    await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())
    lease = await engine.store.renew_lease(
        job_id, attempt_id=attempt_id, now=engine.now(), lease_until=engine.now() + 60
    )
    assert lease.held is True
    assert lease.cancel_requested is True


async def test_cancel_of_a_queued_job_is_immediate(engine, job_factory):
    job_id = await _queued(engine, job_factory)

    job = await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())

    assert job.status is JobStatus.CANCELLED
    assert job.completed_at == engine.now()
    assert (await engine.store.get(job_id)).status is JobStatus.CANCELLED
    assert EventKind.CANCELLED in [e.kind for e in await engine.store.events(job_id)]


async def test_cancel_of_a_processing_job_asks_its_owner(engine, job_factory):
    job_id = await _queued(engine, job_factory)
    attempt_id = (await engine.claim(job_id)).job.attempt_id

    job = await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())

    assert job.status is JobStatus.PROCESSING
    assert job.cancel_requested is True
    stored = await engine.store.get(job_id)
    assert (stored.status, stored.cancel_requested) == (JobStatus.PROCESSING, True)

    assert await engine.store.finish_cancelled(
        job_id, attempt_id=attempt_id, now=engine.now(), report=CANCELLED
    )
    assert (await engine.store.get(job_id)).status is JobStatus.CANCELLED
    [attempt] = await engine.store.attempts(job_id)
    assert attempt.outcome is AttemptOutcome.CANCELLED
    assert (await engine.store.events(job_id))[-1].kind is EventKind.CANCELLED


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
async def test_cancel_of_a_terminal_job_is_refused(engine, job_factory, status):
    job_id = await _terminal(engine, job_factory, status)
    before = await engine.store.get(job_id)

    with pytest.raises(AlreadyTerminalError):
        await engine.store.request_cancel(job_id, tenant_id="t1", now=engine.now())

    assert await engine.store.get(job_id) == before


async def test_cancel_by_another_tenant_finds_nothing(engine, job_factory):
    job_id = await _queued(engine, job_factory)

    with pytest.raises(JobNotFoundError):
        await engine.store.request_cancel(job_id, tenant_id="t2", now=engine.now())
    with pytest.raises(JobNotFoundError):
        await engine.store.request_cancel("gen_unknown", tenant_id="t1", now=engine.now())

    assert (await engine.store.get(job_id)).status is JobStatus.QUEUED


async def test_get_many_reads_the_jobs_that_exist_as_get_would(engine, job_factory):
    first, second = job_factory(), job_factory()
    await engine.accept(first)
    await engine.accept(second)
    claimed = await engine.claim(first.job_id)

    found = await engine.store.get_many([first.job_id, second.job_id, "job_missing"])

    assert set(found) == {first.job_id, second.job_id}
    assert found[first.job_id] == await engine.store.get(first.job_id) == claimed.job
    assert found[second.job_id] == await engine.store.get(second.job_id)
    assert await engine.store.get_many([]) == {}
