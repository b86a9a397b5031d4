"""JobStore retention and usage: purge finished jobs whole, count what a tenant holds (item 13)."""

from __future__ import annotations

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus

pytestmark = pytest.mark.timeout(30)

SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)


async def _finished(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    claimed = await engine.claim(job.job_id)
    await engine.store.succeed(
        job.job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    return job.job_id


async def test_purge_removes_old_finished_jobs_with_all_that_belongs_to_them(engine, job_factory):
    old = await _finished(engine, job_factory, idempotency_key="old-key")
    engine.advance(100)
    recent = await _finished(engine, job_factory)
    unfinished = job_factory()
    await engine.accept(unfinished)
    engine.advance(100)  # the unfinished one is old too: it stays all the same

    purged = await engine.store.purge_finished(completed_before=engine.now() - 150, limit=10)

    assert purged == [old]
    assert await engine.store.get(old) is None
    assert await engine.store.events(old) == []
    assert await engine.store.attempts(old) == []
    assert {j for j in [recent, unfinished.job_id] if await engine.store.get(j)} == {
        recent,
        unfinished.job_id,
    }
    assert await engine.store.existing([old, recent, unfinished.job_id]) == {
        recent,
        unfinished.job_id,
    }
    # Its key is gone with it: the same key makes a new job now.
    again = await engine.accept(job_factory(idempotency_key="old-key"))
    assert again.created is True


async def test_purge_works_in_bounded_batches_oldest_first(engine, job_factory):
    ids = []
    for _ in range(5):
        ids.append(await _finished(engine, job_factory))
        engine.advance(1)

    first = await engine.store.purge_finished(completed_before=engine.now(), limit=2)
    second = await engine.store.purge_finished(completed_before=engine.now(), limit=2)

    assert first == ids[:2]
    assert second == ids[2:4]


async def test_expired_idempotency_entries_are_purged(engine, job_factory):
    await engine.accept(job_factory(idempotency_key="short"), retention_seconds=10)
    await engine.accept(job_factory(idempotency_key="long"), retention_seconds=1000)
    engine.advance(11)

    assert await engine.store.purge_expired_keys(now=engine.now(), limit=10) == 1
    assert await engine.store.purge_expired_keys(now=engine.now(), limit=10) == 0


async def test_usage_counts_a_tenants_unfinished_and_stored_jobs(engine, job_factory):
    done = await _finished(engine, job_factory)
    queued = job_factory()
    await engine.accept(queued)
    failing = job_factory()
    await engine.accept(failing)
    await engine.accept(job_factory(tenant_id="t2"))
    error = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="m")

    assert (await engine.store.usage("t1")).unfinished == 2
    await engine.store.fail_unowned(
        failing.job_id, now=engine.now(), error=error, kind=EventKind.DEAD_LETTERED, detail={}
    )
    usage = await engine.store.usage("t1")
    assert (usage.unfinished, usage.stored) == (1, 3)

    await engine.store.replay(failing.job_id, now=engine.now(), actor="ops", reason="r")
    assert (await engine.store.usage("t1")).unfinished == 2
    engine.advance(10)
    await engine.store.purge_finished(completed_before=engine.now(), limit=10)
    usage = await engine.store.usage("t1")
    assert (usage.unfinished, usage.stored) == (2, 2)
    assert (await engine.store.get(done)) is None
    assert (await engine.store.usage("nobody")).stored == 0
    assert (await engine.store.get(queued.job_id)).status is JobStatus.QUEUED
