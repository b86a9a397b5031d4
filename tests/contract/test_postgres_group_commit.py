"""Group commit on a real server: a batch of statements is pipelined in one transaction,
and one that fails (a conflict its caller must see, or a statement the server refuses)
fails alone: the others still commit, each exactly once."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from ferryman.adapters.postgres import PostgresDatabase, PostgresJobStore
from ferryman.adapters.postgres.grouping import Statement
from ferryman.core import changes
from ferryman.core.errors import IdempotencyKeyMismatchError, StateConflictError

pytestmark = pytest.mark.timeout(60)


def _count(url: str, query: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
        assert row is not None
        return int(row[0])


def _rows(rowcount: int, _row: object) -> int:
    return rowcount


async def _blocked_batch(db: PostgresDatabase, *writes: object) -> list[object]:
    """Run the writes as one batch: a first write holds the group while they queue."""
    first = asyncio.create_task(db.group.run(Statement("SELECT 1", {}, _rows)))
    await asyncio.sleep(0)
    results = await asyncio.gather(*(db.group.run(w) for w in writes), return_exceptions=True)  # type: ignore[arg-type]
    await first
    return results


async def test_a_batch_of_creates_commits_once_and_a_duplicate_fails_alone(
    postgres_scratch, job_factory, clock, monkeypatch
):
    from ferryman.adapters.postgres import jobops

    combined: list[int] = []
    combine = jobops.CREATES.combine
    monkeypatch.setattr(
        jobops.CREATES, "combine", lambda items: combined.append(len(items)) or combine(items)
    )
    url = postgres_scratch()
    db = await PostgresDatabase.open(url, listen=False)
    try:
        store = PostgresJobStore(db, clock=clock)
        taken = job_factory()
        await store.create(
            changes.accept(taken, now=clock.now(), dispatched=True), idempotency_expires_at=None
        )
        fresh = [job_factory() for _ in range(5)]
        batches_before, reruns_before = db.group.batches, db.group.reruns
        results = await asyncio.gather(
            *(
                store.create(
                    changes.accept(job, now=clock.now(), dispatched=True),
                    idempotency_expires_at=None,
                )
                for job in [*fresh[:2], taken, *fresh[2:]]
            ),
            return_exceptions=True,
        )
        assert isinstance(results[2], StateConflictError)
        assert [r.job.job_id for r in results if not isinstance(r, BaseException)] == [
            j.job_id for j in fresh
        ]
        # The duplicate's statement wrote nothing and said so: no rerun was needed.
        assert db.group.reruns - reruns_before == 0
        assert db.group.batches - batches_before == 1
        assert combined == [6]  # the six accepts went as one many_creates statement
        # Each fresh job once, with its event and its message; the duplicate wrote nothing.
        assert _count(url, "SELECT count(*) FROM jobs") == 6
        assert _count(url, "SELECT count(*) FROM messages") == 6
        assert _count(url, "SELECT count(*) FROM events") == _count(
            url, "SELECT sum(event_seq) FROM jobs"
        )
        assert _count(url, "SELECT stored FROM tenant_usage") == 6
    finally:
        await db.close()


async def test_a_statement_the_server_refuses_fails_alone_in_its_batch(postgres_scratch):
    url = postgres_scratch()
    db = await PostgresDatabase.open(url, listen=False)
    try:
        put = "INSERT INTO probe (name, at) VALUES (%(name)s, 1)"
        results = await _blocked_batch(
            db,
            Statement(put, {"name": "a"}, _rows),
            Statement("INSERT INTO no_such_table VALUES (1)", {}, _rows),
            Statement(put, {"name": "b"}, _rows),
        )
        assert results[0] == 1 and results[2] == 1
        assert isinstance(results[1], psycopg.errors.UndefinedTable)
        assert _count(url, "SELECT count(*) FROM probe") == 2
    finally:
        await db.close()


async def test_a_pipelined_batch_gives_each_caller_its_own_result(postgres_scratch):
    url = postgres_scratch()
    db = await PostgresDatabase.open(url, listen=False)
    try:
        put = "INSERT INTO probe (name, at) VALUES (%(name)s, 1) ON CONFLICT DO NOTHING"
        results = await _blocked_batch(
            db,
            Statement(put, {"name": "a"}, _rows),
            Statement(put, {"name": "a"}, _rows),
            Statement("SELECT %(n)s::int", {"n": 7}, lambda _c, row: row, returns_row=True),
        )
        assert results == [1, 0, (7,)]
        assert db.group.reruns == 0
    finally:
        await db.close()


async def test_a_keyed_accept_is_one_statement_and_replays_mismatches_and_duplicates_still_hold(
    postgres_scratch, job_factory, clock
):
    url = postgres_scratch()
    db = await PostgresDatabase.open(url, listen=False)
    try:
        store = PostgresJobStore(db, clock=clock)

        async def accept(job: object) -> object:
            change = changes.accept(job, now=clock.now(), dispatched=True)  # type: ignore[arg-type]
            return await store.create(change, idempotency_expires_at=clock.now() + 3600)

        first = job_factory(idempotency_key="k1")
        made = await accept(first)
        assert made.created and made.job.job_id == first.job_id
        # The same request again (a new job id, the same key and request): a replay.
        again = await accept(job_factory(idempotency_key="k1"))
        assert not again.created and again.job.job_id == first.job_id
        # Another request under the key: refused, nothing written.
        with pytest.raises(IdempotencyKeyMismatchError):
            await accept(job_factory(idempotency_key="k1", request_hash="other"))
        # A new key for a job id already taken: refused, and the key left free.
        with pytest.raises(StateConflictError):
            await accept(job_factory(idempotency_key="k2", job_id=first.job_id))
        assert _count(url, "SELECT count(*) FROM idempotency WHERE key = 'k2'") == 0
        assert _count(url, "SELECT count(*) FROM jobs") == 1
        assert _count(url, "SELECT count(*) FROM messages") == 1
        assert _count(url, "SELECT stored FROM tenant_usage") == 1
    finally:
        await db.close()


async def test_the_change_statements_of_a_batch_are_sent_as_one_and_each_answers_alone(
    postgres_scratch, job_factory, clock, monkeypatch
):
    """grouping.py's Merger: a batch's change statements go as one many_changes, which
    still writes each (with its result and its ack) only if its own revision held, and
    answers each caller as its own statement would have. A second change of one job
    in the same batch is sent on its own (it is conditional on the first)."""
    from ferryman.adapters.postgres import PostgresJobQueue, PostgresResultStore, jobops
    from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobStatus
    from ferryman.core.results import result_key

    combined: list[int] = []
    combine = jobops.CHANGES.combine

    def counting(items):
        combined.append(len(items))
        return combine(items)

    monkeypatch.setattr(jobops.CHANGES, "combine", counting)
    url = postgres_scratch()
    db = await PostgresDatabase.open(url, listen=False)
    try:
        store = PostgresJobStore(db, clock=clock)
        queue = PostgresJobQueue(db, clock=clock)
        accepts = [
            changes.accept(job_factory(), now=clock.now(), dispatched=True) for _ in range(5)
        ]
        for accept in accepts:
            await store.create(accept, idempotency_expires_at=None)
        jobs = [accept.after for accept in accepts]
        receipts = {
            d.message.job_id: d.receipt
            for d in await queue.receive(max_messages=10, visibility_timeout_seconds=60)
        }
        claimed = []
        for n, job in enumerate(jobs[:4]):
            claim = changes.claim(
                job,
                attempt_id=f"att_{n}",
                worker_id="w1",
                now=clock.now(),
                lease_until=clock.now() + 60,
                max_deliveries_without_outcome=10,
            )
            assert await store.apply(claim)
            claimed.append(claim.after)
        a, b, c, d = claimed
        moved = changes.note(c, EventKind.DUPLICATE_DELIVERY, now=clock.now(), detail={})
        assert await store.apply(moved)
        done = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
        staged = PostgresResultStore(db).staged(
            result_key(a.tenant_id, a.job_id, a.attempt_id), b'\x00\xff{"text":"hi"}'
        )

        def succeed(job, ref):
            return changes.succeed(
                job, attempt_id=job.attempt_id, now=clock.now(), result_ref=ref, report=done
            )

        first = asyncio.create_task(db.group.run(Statement("SELECT 1", {}, _rows)))
        await asyncio.sleep(0)
        results = await asyncio.gather(
            store.apply_with_result(
                succeed(a, staged.ref), result=staged, receipt=receipts[a.job_id]
            ),
            store.apply_and_ack(succeed(b, "r"), receipt=receipts[b.job_id]),
            store.apply(changes.note(c, EventKind.DUPLICATE_DELIVERY, now=1, detail={})),
            store.apply(changes.note(d, EventKind.DUPLICATE_DELIVERY, now=1, detail={})),
            store.apply(changes.note(d, EventKind.DUPLICATE_DELIVERY, now=2, detail={})),
            store.apply(
                changes.claim(
                    jobs[4],
                    attempt_id="att_4",
                    worker_id="w1",
                    now=clock.now(),
                    lease_until=clock.now() + 60,
                    max_deliveries_without_outcome=10,
                )
            ),
        )
        await first

        assert combined == [5]  # the second change of d went on its own
        assert results[:3] == [True, True, False]
        assert sorted(results[3:5]) == [False, True]
        assert results[5] is True
        assert (await store.get(a.job_id)).result_ref == staged.ref
        assert await PostgresResultStore(db).get(staged.ref, key=staged.key) == staged.data
        assert (await store.get(b.job_id)).status is JobStatus.SUCCEEDED
        assert (await store.get(jobs[4].job_id)).attempt_id == "att_4"
        assert _count(url, "SELECT count(*) FROM results") == 1
        # The acked messages of a and b are gone; c's, d's and the fifth job's remain.
        assert _count(url, "SELECT count(*) FROM messages") == 3
        assert _count(url, "SELECT count(*) FROM attempts WHERE outcome = 'succeeded'") == 2
        assert db.group.reruns == 0
    finally:
        await db.close()


def test_every_job_write_statement_fits_psycopg_parse_cache():
    """Longer statements are parsed anew on every execution (psycopg caches its parse
    only up to MAX_CACHED_STATEMENT_LENGTH characters): the set-based ones are close."""
    from psycopg._queries import MAX_CACHED_STATEMENT_LENGTH

    from ferryman.adapters.postgres import jobops

    statements = {name: value for name, value in vars(jobops).items() if name.isupper()}
    written = {name: q for name, q in statements.items() if isinstance(q, str)}
    assert {"_MANY_CHANGES", "_MANY_CREATES", "_UPDATE_RESULT_ACK_CHANGE"} <= set(written)
    assert {n: len(q) for n, q in written.items() if len(q) > MAX_CACHED_STATEMENT_LENGTH} == {}
