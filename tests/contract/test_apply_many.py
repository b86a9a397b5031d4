"""JobStore's optional apply_many (ports/store.py, AppliesMany): several jobs' changes in one
transaction, each written only if its own job still has the revision it expects."""

from __future__ import annotations

import pytest

from ferryman.core import changes
from ferryman.core.job import EventKind, JobStatus
from ferryman.ports.store import AppliesMany

pytestmark = pytest.mark.timeout(30)


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
    if not isinstance(engine.port, AppliesMany):
        pytest.skip(f"{engine.name} applies changes one by one")
    stale, fresh = job_factory(), job_factory()
    for job in (stale, fresh):
        await engine.accept(job)
    read_stale = await engine.store.get(stale.job_id)
    read_fresh = await engine.store.get(fresh.job_id)
    # Another writer moves the first job after it was read.
    note = changes.note(read_stale, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={})
    assert await engine.port.apply(note)

    applied = await engine.port.apply_many(
        [_claim(read_stale, "att_1", engine.now()), _claim(read_fresh, "att_2", engine.now())]
    )

    assert applied == [False, True]
    assert (await engine.store.get(stale.job_id)).status is JobStatus.QUEUED
    claimed = await engine.store.get(fresh.job_id)
    assert (claimed.status, claimed.attempt_id) == (JobStatus.PROCESSING, "att_2")
    assert [a.attempt_id for a in await engine.store.attempts(fresh.job_id)] == ["att_2"]
    assert await engine.store.attempts(stale.job_id) == []
