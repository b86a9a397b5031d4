"""JobStore.create_many: many new jobs in one transaction, each with its own outcome."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError
from ferryman.core.job import EventKind, JobStatus
from ferryman.ports.store import Accepted

pytestmark = pytest.mark.timeout(60)


async def _stored(engine, tenant_id="t1"):
    page = await engine.store.list_jobs(tenant_id=tenant_id, limit=200)
    return sorted(job.job_id for job in page.jobs)


async def _create_many(engine, jobs):
    return await engine.store.create_many(
        jobs, idempotency_expires_at=engine.now() + 3600, now=engine.now()
    )


async def test_every_job_is_stored_queued_and_dispatched(engine, job_factory):
    jobs = [job_factory(input={"prompt": f"p{i}"}) for i in range(5)]

    outcomes = await _create_many(engine, jobs)

    assert [o.job.job_id for o in outcomes] == [j.job_id for j in jobs]
    assert all(isinstance(o, Accepted) and o.created for o in outcomes)
    assert await _stored(engine) == sorted(j.job_id for j in jobs)
    for job in jobs:
        stored = await engine.store.get(job.job_id)
        assert stored is not None
        assert stored.status is JobStatus.QUEUED
        kinds = [e.kind for e in await engine.store.events(job.job_id)]
        assert kinds[0] is EventKind.ACCEPTED
    assert (await engine.store.usage("t1")).stored == 5
    if engine.store.enqueues_with_job:
        assert sorted(await engine.drain()) == sorted(j.job_id for j in jobs)


async def test_keys_replay_and_mismatch_per_item(engine, job_factory):
    first = await engine.accept(job_factory(idempotency_key="k1"))
    batch = [
        job_factory(idempotency_key="k1"),  # the same request: the existing job
        job_factory(idempotency_key="k1", input={"prompt": "other"}),  # a mismatch
        job_factory(idempotency_key="k2"),
        job_factory(),
    ]

    replay, mismatch, new, plain = await _create_many(engine, batch)

    assert isinstance(replay, Accepted)
    assert replay.created is False
    assert replay.job.job_id == first.job.job_id
    assert isinstance(mismatch, IdempotencyKeyMismatchError)
    assert isinstance(new, Accepted)
    assert new.created
    assert isinstance(plain, Accepted)
    assert plain.created
    assert await _stored(engine) == sorted([first.job.job_id, new.job.job_id, plain.job.job_id])
    assert await engine.store.get(batch[1].job_id) is None


async def test_one_key_twice_in_a_batch_resolves_in_order(engine, job_factory):
    batch = [
        job_factory(idempotency_key="dup"),
        job_factory(idempotency_key="dup", input={"prompt": "different"}),
        job_factory(idempotency_key="dup"),
    ]

    first, other, same = await _create_many(engine, batch)

    assert isinstance(first, Accepted)
    assert first.created
    assert first.job.job_id == batch[0].job_id
    assert isinstance(other, IdempotencyKeyMismatchError)
    assert isinstance(same, Accepted)
    assert same.created is False
    assert same.job.job_id == batch[0].job_id
    assert await _stored(engine) == [batch[0].job_id]


async def test_the_same_key_in_two_tenants_makes_two_jobs(engine, job_factory):
    mine = job_factory(idempotency_key="shared")
    theirs = job_factory(idempotency_key="shared", tenant_id="t2")

    outcomes = await _create_many(engine, [mine, theirs])

    assert all(isinstance(o, Accepted) and o.created for o in outcomes)
    assert await _stored(engine, "t1") == [mine.job_id]
    assert await _stored(engine, "t2") == [theirs.job_id]


async def test_a_failure_mid_batch_stores_none_of_it(engine, job_factory):
    """An error other than a key mismatch (here a job id that exists, found after the
    earlier items were written) fails the whole batch: nothing of it stays."""
    existing = await engine.accept(job_factory())
    before_events = await engine.store.events(existing.job.job_id)
    fresh = [job_factory(idempotency_key=f"k{i}") for i in range(3)]
    clash = job_factory(job_id=existing.job.job_id, input={"prompt": "clash"})

    with pytest.raises(StateConflictError):
        await _create_many(engine, [*fresh, clash])

    assert await _stored(engine) == [existing.job.job_id]
    assert (await engine.store.usage("t1")).stored == 1
    assert await engine.store.events(existing.job.job_id) == before_events
    # Their keys were not taken either: the same items go through afterwards.
    again = await _create_many(engine, [job_factory(idempotency_key=f"k{i}") for i in range(3)])
    assert all(isinstance(o, Accepted) and o.created for o in again)


async def test_concurrent_batches_with_shared_keys_make_each_job_once(engine, job_factory):
    """Two batches naming the same keys in opposite orders neither deadlock nor make a
    second job for a key."""
    keys = [f"k{i}" for i in range(20)]
    forward = [job_factory(idempotency_key=k, input={"prompt": k}) for k in keys]
    backward = [job_factory(idempotency_key=k, input={"prompt": k}) for k in reversed(keys)]

    a, b = await asyncio.gather(_create_many(engine, forward), _create_many(engine, backward))

    by_key: dict[str, set[str]] = {}
    for job, outcome in [*zip(forward, a, strict=True), *zip(backward, b, strict=True)]:
        assert isinstance(outcome, Accepted)
        by_key.setdefault(job.idempotency_key, set()).add(outcome.job.job_id)
    assert all(len(ids) == 1 for ids in by_key.values())
    assert len(await _stored(engine)) == 20
