"""SqliteJobStore specifics: several processes on one file, one transaction per change."""

from __future__ import annotations

import asyncio
import sqlite3

from ferryman.adapters.sqlite import SqliteDatabase, SqliteJobQueue, SqliteJobStore
from ferryman.core.errors import FailureClass, IdempotencyKeyMismatchError
from ferryman.core.job import AttemptOutcome, DispatchState, EventKind, JobError, JobStatus
from ferryman.services.ledger import JobLedger
from ledger_reads import LedgerWithReads


def _ledger(db: SqliteDatabase) -> JobLedger:
    return LedgerWithReads(SqliteJobStore(db))


def _count(db_path, table: str) -> int:
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0]
    finally:
        conn.close()


async def test_two_processes_see_each_others_writes(db_path, clock, job_factory) -> None:
    first = await SqliteDatabase.open(db_path)
    second = await SqliteDatabase.open(db_path)
    try:
        job = job_factory()
        await _ledger(first).create(job, idempotency_expires_at=None, now=clock.now())
        seen = await _ledger(second).get(job.job_id)
        assert seen is not None
        assert seen.status is JobStatus.QUEUED
        assert seen.dispatch_state is DispatchState.DISPATCHED
        deliveries = await SqliteJobQueue(second, clock=clock).receive(
            max_messages=10, visibility_timeout_seconds=30
        )
        assert [d.message.job_id for d in deliveries] == [job.job_id]
    finally:
        await first.close()
        await second.close()


async def test_one_key_makes_one_job_across_processes(db_path, clock, job_factory) -> None:
    first = await SqliteDatabase.open(db_path)
    second = await SqliteDatabase.open(db_path)
    try:
        stores = [_ledger(first), _ledger(second)]
        jobs = [job_factory(idempotency_key="same-key") for _ in range(40)]
        accepted = await asyncio.gather(
            *(
                stores[i % 2].create(job, idempotency_expires_at=clock.now() + 60, now=clock.now())
                for i, job in enumerate(jobs)
            )
        )
        assert sum(a.created for a in accepted) == 1
        assert len({a.job.job_id for a in accepted}) == 1
        assert _count(db_path, "jobs") == 1
        assert _count(db_path, "messages") == 1
    finally:
        await first.close()
        await second.close()


async def test_a_refused_create_stores_nothing(db, db_path, clock, job_factory) -> None:
    store = _ledger(db)
    await store.create(job_factory(idempotency_key="k"), idempotency_expires_at=None, now=1.0)
    other = job_factory(idempotency_key="k", input={"prompt": "something else"})
    try:
        await store.create(other, idempotency_expires_at=None, now=2.0)
    except IdempotencyKeyMismatchError:
        pass
    else:
        raise AssertionError("a different request under the same key was accepted")
    assert await store.get(other.job_id) is None
    assert _count(db_path, "messages") == 1
    assert _count(db_path, "events") == 2  # ACCEPTED, DISPATCHED of the first job only


async def test_a_claim_records_the_attempt_and_its_events(db, clock, job_factory) -> None:
    store = _ledger(db)
    job = job_factory()
    await store.create(job, idempotency_expires_at=None, now=clock.now())
    first = await store.claim(
        job.job_id,
        attempt_id="att_1",
        worker_id="w1",
        now=10.0,
        lease_until=20.0,
        max_deliveries_without_outcome=10,
    )
    taken = await store.claim(
        job.job_id,
        attempt_id="att_2",
        worker_id="w2",
        now=21.0,
        lease_until=80.0,
        max_deliveries_without_outcome=10,
    )
    assert first.claimed
    assert taken.claimed
    assert taken.abandoned_attempt_id == "att_1"
    assert taken.job.fence == 2

    attempts = await store.attempts(job.job_id)
    assert [(a.attempt_no, a.attempt_id, a.outcome) for a in attempts] == [
        (1, "att_1", AttemptOutcome.ABANDONED),
        (2, "att_2", None),
    ]
    events = await store.events(job.job_id)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.kind for e in events] == [
        EventKind.ACCEPTED,
        EventKind.DISPATCHED,
        EventKind.CLAIMED,
        EventKind.ATTEMPT_ABANDONED,
        EventKind.CLAIMED,
    ]


async def test_listing_pages_newest_first_and_filters(db, clock, job_factory) -> None:
    store = _ledger(db)
    jobs = [job_factory(job_id=f"gen_{i:026d}") for i in range(5)]
    jobs.append(job_factory(job_id="gen_" + "9" * 26, tenant_id="t2"))
    for job in jobs:
        await store.create(job, idempotency_expires_at=None, now=clock.now())

    page = await store.list_jobs(tenant_id="t1", limit=2)
    seen = [j.job_id for j in page.jobs]
    while page.next_cursor is not None:
        page = await store.list_jobs(tenant_id="t1", limit=2, cursor=page.next_cursor)
        seen += [j.job_id for j in page.jobs]
    assert seen == [j.job_id for j in reversed(jobs[:5])]

    everyone = await store.list_jobs(tenant_id=None, limit=10)
    assert everyone.jobs[0].tenant_id == "t2"
    assert len(everyone.jobs) == 6
    assert everyone.next_cursor is None

    error = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="m")
    await store.fail_unowned(
        jobs[2].job_id, now=5.0, error=error, kind=EventKind.DEAD_LETTERED, detail={}
    )
    dead = await store.list_jobs(tenant_id=None, error_code="dead_lettered")
    assert [j.job_id for j in dead.jobs] == [jobs[2].job_id]
    failed = await store.list_jobs(tenant_id="t1", status=JobStatus.FAILED)
    assert [j.job_id for j in failed.jobs] == [jobs[2].job_id]


async def test_replay_enqueues_in_the_same_transaction(db, db_path, clock, job_factory) -> None:
    store = _ledger(db)
    job = job_factory()
    await store.create(job, idempotency_expires_at=None, now=clock.now())
    error = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="m")
    await store.fail_unowned(
        job.job_id, now=5.0, error=error, kind=EventKind.DEAD_LETTERED, detail={}
    )

    before = db.commit_count
    replayed = await store.replay(job.job_id, now=6.0, actor="ops", reason="fixed")
    assert db.commit_count - before == 1
    assert replayed.status is JobStatus.QUEUED
    assert replayed.dispatch_state is DispatchState.DISPATCHED
    assert _count(db_path, "messages") == 2
    events = await store.events(job.job_id)
    replay_event = next(e for e in events if e.kind is EventKind.REPLAYED)
    assert replay_event.detail == {"actor": "ops", "reason": "fixed"}
