"""JobStore intake and reads: create, idempotency, dispatch, get, list_jobs."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import FailureClass, IdempotencyKeyMismatchError
from ferryman.core.job import (
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    JobError,
    JobStatus,
)

pytestmark = pytest.mark.timeout(30)


async def _job_count(engine, tenant_id="t1"):
    page = await engine.store.list_jobs(tenant_id=tenant_id, limit=200)
    return len(page.jobs)


async def test_create_stores_a_queued_job_with_an_accepted_event(engine, job_factory):
    job = job_factory(idempotency_key="k1")

    accepted = await engine.store.create(
        job, idempotency_expires_at=engine.now() + 3600, now=engine.now()
    )

    assert accepted.created is True
    assert accepted.job.job_id == job.job_id
    assert accepted.job.status is JobStatus.QUEUED
    stored = await engine.store.get(job.job_id)
    assert stored is not None
    assert stored.status is JobStatus.QUEUED
    assert stored.tenant_id == "t1"
    assert stored.input == {"prompt": "Hello"}
    assert stored.request_hash == job.request_hash
    assert stored.idempotency_key == "k1"
    assert stored.fence == 0
    assert stored.attempt_count == 0
    events = await engine.store.events(job.job_id)
    assert events[0].kind is EventKind.ACCEPTED
    assert events[0].seq == 1


async def test_same_key_and_request_returns_the_same_job(engine, job_factory):
    first = await engine.accept(job_factory(idempotency_key="k1"))
    engine.advance(5)

    again = await engine.accept(job_factory(idempotency_key="k1"))

    assert again.created is False
    assert again.job.job_id == first.job.job_id
    assert await _job_count(engine) == 1
    assert await engine.drain() == [first.job.job_id]
    kinds = [e.kind for e in await engine.store.events(first.job.job_id)]
    assert kinds.count(EventKind.ACCEPTED) == 1


async def test_same_key_other_request_is_rejected_and_stores_nothing(engine, job_factory):
    first = await engine.accept(job_factory(idempotency_key="k1"))
    events_before = await engine.store.events(first.job.job_id)
    other = job_factory(idempotency_key="k1", input={"prompt": "Something else"})

    with pytest.raises(IdempotencyKeyMismatchError):
        await engine.store.create(
            other, idempotency_expires_at=engine.now() + 3600, now=engine.now()
        )

    assert await engine.store.get(other.job_id) is None
    assert await _job_count(engine) == 1
    assert await engine.store.events(first.job.job_id) == events_before
    assert await engine.drain() == [first.job.job_id]


async def test_same_key_in_another_tenant_is_independent(engine, job_factory):
    mine = await engine.accept(job_factory(idempotency_key="k1"))

    theirs = await engine.accept(job_factory(idempotency_key="k1", tenant_id="t2"))

    assert theirs.created is True
    assert theirs.job.job_id != mine.job.job_id
    assert theirs.job.tenant_id == "t2"
    assert sorted(await engine.drain()) == sorted([mine.job.job_id, theirs.job.job_id])


async def test_an_expired_key_names_a_new_job(engine, job_factory):
    old = await engine.accept(job_factory(idempotency_key="k1"), retention_seconds=100)
    engine.advance(101)

    new = await engine.accept(job_factory(idempotency_key="k1"))
    again = await engine.accept(job_factory(idempotency_key="k1"))

    assert new.created is True
    assert new.job.job_id != old.job.job_id
    assert again.created is False
    assert again.job.job_id == new.job.job_id
    assert await engine.store.get(old.job.job_id) is not None


async def test_an_expired_key_may_carry_another_request(engine, job_factory):
    await engine.accept(job_factory(idempotency_key="k1"), retention_seconds=100)
    engine.advance(101)

    other = await engine.accept(job_factory(idempotency_key="k1", input={"prompt": "new"}))

    assert other.created is True


async def test_a_key_is_live_until_it_expires(engine, job_factory):
    first = await engine.accept(job_factory(idempotency_key="k1"), retention_seconds=100)
    engine.advance(99)

    again = await engine.accept(job_factory(idempotency_key="k1"))

    assert again.created is False
    assert again.job.job_id == first.job.job_id


async def test_create_dispatches_where_the_store_enqueues(engine, job_factory):
    job = job_factory()

    accepted = await engine.store.create(job, idempotency_expires_at=None, now=engine.now())

    kinds = [e.kind for e in await engine.store.events(job.job_id)]
    if engine.store.enqueues_with_job:
        assert accepted.job.dispatch_state is DispatchState.DISPATCHED
        assert (await engine.store.get(job.job_id)).dispatch_state is DispatchState.DISPATCHED
        assert kinds == [EventKind.ACCEPTED, EventKind.DISPATCHED]
        deliveries = await engine.queue.receive(max_messages=10, visibility_timeout_seconds=30)
        assert [(d.message.job_id, d.message.tenant_id) for d in deliveries] == [(job.job_id, "t1")]
    else:
        # The outbox path: intake sends the message, then marks the job dispatched.
        assert accepted.job.dispatch_state is DispatchState.PENDING
        assert kinds == [EventKind.ACCEPTED]
        assert await engine.drain() == []
        await engine.store.mark_dispatched(job.job_id, now=engine.now())
        assert (await engine.store.get(job.job_id)).dispatch_state is DispatchState.DISPATCHED


async def test_concurrent_creates_with_one_key_make_one_job(engine, job_factory):
    jobs = [job_factory(idempotency_key="same") for _ in range(40)]

    results = await asyncio.gather(*(engine.accept(job) for job in jobs))

    assert len({r.job.job_id for r in results}) == 1
    assert sum(r.created for r in results) == 1
    assert await _job_count(engine) == 1
    assert await engine.drain() == [results[0].job.job_id]


# --- reads ------------------------------------------------------------------------


async def test_get_hides_a_job_from_another_tenant(engine, job_factory):
    job = job_factory()
    await engine.accept(job)

    assert await engine.store.get(job.job_id, tenant_id="t2") is None
    assert (await engine.store.get(job.job_id, tenant_id="t1")).job_id == job.job_id
    assert (await engine.store.get(job.job_id)).job_id == job.job_id
    assert await engine.store.get("gen_unknown") is None


async def _make_listing(engine, job_factory):
    """Seven t1 jobs (two 'summarize', one failed, one processing) and two t2 jobs."""
    t1 = []
    for i in range(7):
        job = job_factory(task="summarize" if i in (2, 5) else "generate", input={"n": i})
        await engine.accept(job)
        t1.append(job.job_id)
        engine.advance(1)
    t2 = []
    for i in range(2):
        job = job_factory(tenant_id="t2", input={"n": i})
        await engine.accept(job)
        t2.append(job.job_id)
    return t1, t2


async def test_list_jobs_pages_newest_first_without_duplicates(engine, job_factory):
    t1, _ = await _make_listing(engine, job_factory)

    seen: list[str] = []
    cursor, pages = None, 0
    while True:
        page = await engine.store.list_jobs(tenant_id="t1", limit=3, cursor=cursor)
        assert len(page.jobs) <= 3
        seen.extend(j.job_id for j in page.jobs)
        pages += 1
        cursor = page.next_cursor
        if cursor is None:
            break
        assert pages < 10

    assert seen == sorted(t1, reverse=True)
    assert pages >= 3


async def test_list_jobs_filters_and_isolates_tenants(engine, job_factory):
    t1, t2 = await _make_listing(engine, job_factory)
    processing = (await engine.claim(t1[0])).job
    failing = await engine.claim(t1[1])
    await engine.store.fail(
        t1[1],
        attempt_id=failing.job.attempt_id,
        now=engine.now(),
        error=JobError(code="bad_request", failure_class=FailureClass.INVALID_REQUEST, message="x"),
        report=AttemptReport(outcome=AttemptOutcome.FAILED),
    )

    by_status = await engine.store.list_jobs(tenant_id="t1", status=JobStatus.PROCESSING)
    by_task = await engine.store.list_jobs(tenant_id="t1", task="summarize")
    by_error = await engine.store.list_jobs(tenant_id="t1", error_code="bad_request")
    theirs = await engine.store.list_jobs(tenant_id="t2")
    everyone = await engine.store.list_jobs(tenant_id=None, limit=100)
    t2_processing = await engine.store.list_jobs(tenant_id="t2", status=JobStatus.PROCESSING)

    assert [j.job_id for j in by_status.jobs] == [processing.job_id]
    assert [j.job_id for j in by_task.jobs] == sorted([t1[2], t1[5]], reverse=True)
    assert [j.job_id for j in by_error.jobs] == [t1[1]]
    assert [j.job_id for j in theirs.jobs] == sorted(t2, reverse=True)
    assert {j.tenant_id for j in theirs.jobs} == {"t2"}
    assert [j.job_id for j in everyone.jobs] == sorted(t1 + t2, reverse=True)
    assert t2_processing.jobs == []
