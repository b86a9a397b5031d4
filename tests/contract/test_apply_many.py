"""JobStore's optional apply_many (ports/store.py, AppliesMany): several jobs' changes in one
transaction, each written only if its own job still has the revision it expects.

Every engine here has it (PostgreSQL as one statement for the batch); one without it
would be held to the same rule through concurrent ``apply`` calls, which is what
services/ledger.py does for it."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core import changes
from ferryman.core.job import AttemptOutcome, EventKind, JobStatus
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


async def _claimed(engine, job_factory, attempt_id: str):
    job = job_factory()
    await engine.accept(job)
    claimed = _claim(await engine.store.get(job.job_id), attempt_id, engine.now())
    assert await engine.port.apply(claimed)
    return claimed.after


async def test_a_batch_writes_what_each_change_would_alone(engine, job_factory):
    """Every part of a change (events, attempts opened and closed, the backlog count, a
    new message, the cancel nudge) goes with its job in a batch, as with ``apply``."""
    queued = job_factory()
    await engine.accept(queued)
    queued = await engine.store.get(queued.job_id)
    expired = await _claimed(engine, job_factory, "att_expired")
    crashing = await _claimed(engine, job_factory, "att_crashing")
    engine.advance(61)  # the first two leases ran out
    running = await _claimed(engine, job_factory, "att_running")
    moved = job_factory()
    await engine.accept(moved)
    moved = await engine.store.get(moved.job_id)
    assert await engine.port.apply(
        changes.note(moved, EventKind.DUPLICATE_DELIVERY, now=1, detail={})
    )
    backlog = (await engine.store.usage("t1")).unfinished
    hints = engine.store.cancel_hints.generation

    batch = [
        _claim(queued, "att_new", engine.now()),
        _claim(expired, "att_takeover", engine.now()),
        changes.claim(
            crashing,
            attempt_id="att_never",
            worker_id="w1",
            now=engine.now(),
            lease_until=engine.now() + 60,
            max_deliveries_without_outcome=1,
        ),
        changes.request_cancel(running, now=engine.now()),
        # Read before another writer moved it: not written, and the others still are.
        changes.note(moved, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={"n": 1}),
    ]
    applied = await _apply_many(engine, batch)

    assert applied == [True, True, True, True, False]
    for change in batch[:4]:
        stored = await engine.store.get(change.job_id)
        assert stored == change.after
        assert (await engine.store.events(change.job_id))[-len(change.events) :] == list(
            change.events
        )
    attempts = {
        a.attempt_id: a for change in batch[:4] for a in await engine.store.attempts(change.job_id)
    }
    assert attempts["att_new"].outcome is None
    assert attempts["att_takeover"].outcome is None
    assert attempts["att_expired"].outcome is AttemptOutcome.ABANDONED
    assert attempts["att_crashing"].outcome is AttemptOutcome.ABANDONED
    assert "att_never" not in attempts
    assert (await engine.store.get(crashing.job_id)).status is JobStatus.FAILED
    assert (await engine.store.get(running.job_id)).cancel_requested
    assert (await engine.store.usage("t1")).unfinished == backlog - 1  # the dead letter
    assert engine.store.cancel_hints.generation > hints

    # A replay of the dead letter brings a new message with it (where the store enqueues).
    failed = await engine.store.get(crashing.job_id)
    visible = (await engine.queue.stats()).visible
    replay = changes.replay(
        failed,
        now=engine.now(),
        actor="op",
        reason="test",
        include_failed=True,
        dispatched=engine.store.enqueues_with_job,
    )
    stale = changes.note(expired, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={})
    assert await _apply_many(engine, [stale, replay]) == [False, True]
    assert await engine.store.get(crashing.job_id) == replay.after
    assert (await engine.store.usage("t1")).unfinished == backlog
    if engine.store.enqueues_with_job:
        assert (await engine.queue.stats()).visible == visible + 1
