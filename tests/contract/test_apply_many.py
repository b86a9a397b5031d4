"""JobStore's optional apply_many (ports/store.py, AppliesMany): several jobs' changes in one
transaction, each written only if its own job still has the revision it expects.

An engine without it (PostgreSQL, whose group commit already puts changes applied at the
same moment into one transaction) is held to the same rule through concurrent ``apply``
calls, which is what services/ledger.py does for it."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core import changes
from ferryman.core.job import EventKind, JobStatus
from ferryman.ports.store import AppliesMany

pytestmark = pytest.mark.timeout(30)


async def _apply_many(engine, batch):
    if isinstance(engine.port, AppliesMany):
        return await engine.port.apply_many(batch)
    return list(await asyncio.gather(*(engine.port.apply(change) for change in batch)))


def _claim(job, attempt_id, now):
    return changes.claim(
        job,
        attempt_id=attempt_id,
        worker_id="w1",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=10,
    )


async def test_each_change_is_conditional_on_its_own_job(engine, job_factory):
    stale, fresh = job_factory(), job_factory()
    for job in (stale, fresh):
        await engine.accept(job)
    read_stale = await engine.store.get(stale.job_id)
    read_fresh = await engine.store.get(fresh.job_id)
    # Another writer moves the first job after it was read.
    note = changes.note(read_stale, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={})
    assert await engine.port.apply(note)

    applied = await _apply_many(
        engine,
        [_claim(read_stale, "att_1", engine.now()), _claim(read_fresh, "att_2", engine.now())],
    )

    assert applied == [False, True]
    assert (await engine.store.get(stale.job_id)).status is JobStatus.QUEUED
    claimed = await engine.store.get(fresh.job_id)
    assert (claimed.status, claimed.attempt_id) == (JobStatus.PROCESSING, "att_2")
    assert [a.attempt_id for a in await engine.store.attempts(fresh.job_id)] == ["att_2"]
    assert await engine.store.attempts(stale.job_id) == []
