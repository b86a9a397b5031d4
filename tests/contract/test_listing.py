"""JobStore.list_jobs as a list uses it: summaries only (never an input), a byte budget
the engine stops reading at, and a list limited to named jobs of one tenant."""

from __future__ import annotations

import dataclasses

import pytest

from ferryman.adapters.job_rows import dump_json, error_json
from ferryman.core.errors import FailureClass
from ferryman.core.ids import new_job_id
from ferryman.core.job import AttemptOutcome, AttemptReport, JobError, JobStatus
from ferryman.ports.store import LIST_ITEM_BYTES, JobSummary

pytestmark = pytest.mark.timeout(30)

SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
# About 1 KB of metadata a job: a few jobs fill a budget of a few KB.
PAD = "m" * 1000


def weight(job) -> int:
    """What a job weighs against a list's budget (ports/store.py)."""
    metadata = "" if job.metadata is None else dump_json(job.metadata)
    return LIST_ITEM_BYTES + len(metadata.encode()) + len((error_json(job.error) or "").encode())


async def _jobs(engine, job_factory, count, *, tenant_id="t1", **fields):
    """``count`` QUEUED jobs, one second apart; their ids newest first."""
    ids = []
    for i in range(count):
        job = job_factory(tenant_id=tenant_id, input={"n": i}, **fields)
        await engine.accept(job)
        ids.append(job.job_id)
        engine.advance(1)
    return ids[::-1]


async def _unreadable_inputs(engine) -> None:
    """Make every stored input impossible to read: a list that reads one fails."""
    if engine.name == "sqlite":
        # Not UTF-8: Python's sqlite3 raises on fetching such a column.
        await engine.port._db.write(
            lambda conn: conn.execute("UPDATE jobs SET input = CAST(X'C328FF' AS TEXT)")
        )
    elif engine.name == "postgres":
        # Not JSON: mapping a whole row (job_from_row) raises on it.
        await engine.port._db.execute("UPDATE jobs SET input = 'not json {'")
    elif engine.name == "aws":
        # Not JSON: decoding a whole job item raises on it.
        from ferryman.adapters.aws.layout import JOB_SK, job_pk

        clients, table = engine.port._clients, engine.port._table
        page = await engine.port.list_jobs(tenant_id=None, limit=1000)
        for job in page.jobs:
            await clients.dynamodb.update_item(
                TableName=table,
                Key={"pk": {"S": job_pk(job.job_id)}, "sk": {"S": JOB_SK}},
                UpdateExpression="SET #input = :bad",
                ExpressionAttributeNames={"#input": "input"},
                ExpressionAttributeValues={":bad": {"S": "not json {"}},
            )
    else:
        jobs = engine.port._jobs
        for job_id, job in jobs.items():
            jobs[job_id] = dataclasses.replace(job, input=_Unreadable())


class _Unreadable(dict):
    def _refuse(self, *args, **kwargs):
        raise AssertionError("a list read a job's input")

    __iter__ = __len__ = __getitem__ = __contains__ = keys = values = items = _refuse
    __repr__ = __eq__ = __reduce_ex__ = __deepcopy__ = __copy__ = _refuse


def _spy_postgres(engine, monkeypatch, columns: set[str]) -> None:
    db = engine.port._db
    fetch_all = db.fetch_all

    async def spy(query, params=None):
        rows = await fetch_all(query, params)
        for row in rows:
            columns.update(row.keys())
        return rows

    monkeypatch.setattr(db, "fetch_all", spy)


def _spy_sqlite(engine, monkeypatch, columns: set[str]) -> None:
    db = engine.port._db
    read = db.read

    async def spy_read(fn):
        result = await read(fn)
        for row in result if isinstance(result, list) else []:
            if hasattr(row, "keys"):
                columns.update(row.keys())
        return result

    monkeypatch.setattr(db, "read", spy_read)


def _spy_aws(engine, monkeypatch, columns: set[str]) -> None:
    # The attributes of every job item DynamoDB hands back, as the SDK parsed it (an
    # index entry of a job is one: it carries the job's pk).
    def seen(parsed, **_):
        for item in [parsed.get("Item") or {}, *parsed.get("Items", [])]:
            if item.get("pk", {}).get("S", "").startswith("job#"):
                columns.update(item.keys())

    engine.port._clients.dynamodb.meta.events.register("after-call.dynamodb", seen)


_SPIES = {"postgres": _spy_postgres, "sqlite": _spy_sqlite, "aws": _spy_aws}


@pytest.fixture
def fetched_columns(engine, monkeypatch):
    """The columns of every row a database engine's list handed back (psycopg and
    sqlite3 rows both name their columns; DynamoDB items their attributes)."""
    columns: set[str] = set()
    spy = _SPIES.get(engine.name)
    if spy is not None:
        spy(engine, monkeypatch, columns)
    return columns


async def test_a_list_never_reads_an_input(engine, job_factory, fetched_columns):
    ids = await _jobs(engine, job_factory, 3)
    await _unreadable_inputs(engine)
    fetched_columns.clear()  # what the lists below read, not what storing the jobs did

    page = await engine.store.list_jobs(tenant_id="t1", limit=10)
    everyone = await engine.store.list_jobs(tenant_id=None, limit=10)
    named = await engine.store.list_jobs(tenant_id="t1", job_ids=ids[:2])

    assert [job.job_id for job in page.jobs] == ids
    assert [job.job_id for job in everyone.jobs] == ids
    assert [job.job_id for job in named.jobs] == ids[:2]
    assert all(isinstance(job, JobSummary) for job in page.jobs)
    assert "input" not in fetched_columns


async def test_a_summary_holds_what_the_job_holds(engine, job_factory):
    succeeded, failed, queued = await _jobs(
        engine, job_factory, 3, metadata={"order": 42, "note": "héllo"}
    )
    claim = await engine.claim(failed)
    error = JobError(code="bad_request", failure_class=FailureClass.INVALID_REQUEST, message="é")
    await engine.store.fail(
        failed,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        error=error,
        report=AttemptReport(outcome=AttemptOutcome.FAILED),
    )
    claim = await engine.claim(succeeded)
    await engine.store.succeed(
        succeeded,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    await engine.store.request_cancel(queued, tenant_id="t1", now=engine.now())

    page = await engine.store.list_jobs(tenant_id="t1")

    stored = [await engine.store.get(job.job_id) for job in page.jobs]
    assert page.jobs == [JobSummary.of(job) for job in stored]
    assert [job.status for job in page.jobs] == [
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.CANCELLED,
    ]


async def test_a_page_ends_before_the_job_that_would_take_it_over_the_budget(engine, job_factory):
    ids = await _jobs(engine, job_factory, 6, metadata={"pad": PAD})
    each = weight(await engine.store.get(ids[0]))

    page = await engine.store.list_jobs(tenant_id="t1", limit=50, max_bytes=3 * each + each // 2)
    exact = await engine.store.list_jobs(tenant_id="t1", limit=50, max_bytes=3 * each)

    assert [job.job_id for job in page.jobs] == ids[:3]
    assert page.next_cursor == ids[2]
    assert page.listed_bytes == 3 * each
    assert [job.job_id for job in exact.jobs] == ids[:3]
    assert exact.next_cursor == ids[2]


async def test_an_error_weighs_what_it_holds(engine, job_factory):
    newer, older = await _jobs(engine, job_factory, 2)
    claim = await engine.claim(older)
    error = JobError(
        code="provider_error", failure_class=FailureClass.TRANSIENT, message="e" * 3000
    )
    await engine.store.fail(
        older,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        error=error,
        report=AttemptReport(outcome=AttemptOutcome.FAILED),
    )
    weights = [weight(await engine.store.get(job_id)) for job_id in (newer, older)]

    whole = await engine.store.list_jobs(tenant_id="t1", max_bytes=sum(weights))
    short = await engine.store.list_jobs(tenant_id="t1", max_bytes=sum(weights) - 1)

    assert weights[1] > 3000
    assert [job.job_id for job in whole.jobs] == [newer, older]
    assert whole.next_cursor is None
    assert whole.listed_bytes == sum(weights)
    assert [job.job_id for job in short.jobs] == [newer]
    assert short.next_cursor == newer


async def test_a_page_always_holds_one_job_however_small_the_budget(engine, job_factory):
    ids = await _jobs(engine, job_factory, 2, metadata={"pad": PAD})

    page = await engine.store.list_jobs(tenant_id="t1", max_bytes=1)

    assert [job.job_id for job in page.jobs] == ids[:1]
    assert page.next_cursor == ids[0]


async def test_paging_by_budget_and_limit_lists_every_job_once_in_order(engine, job_factory):
    ids = await _jobs(engine, job_factory, 7, metadata={"pad": PAD})
    each = weight(await engine.store.get(ids[0]))

    seen, cursor = [], None
    for _ in range(10):
        page = await engine.store.list_jobs(
            tenant_id="t1", limit=3, cursor=cursor, max_bytes=2 * each
        )
        assert len(page.jobs) <= 2
        seen += [job.job_id for job in page.jobs]
        cursor = page.next_cursor
        if cursor is None:
            break

    assert seen == ids


async def test_a_list_of_named_jobs_holds_only_the_tenant_s_own(engine, job_factory):
    mine = await _jobs(engine, job_factory, 4)
    theirs = await _jobs(engine, job_factory, 1, tenant_id="t2")
    unknown = new_job_id()

    named = await engine.store.list_jobs(
        tenant_id="t1", job_ids=[mine[3], theirs[0], unknown, mine[1], mine[3]]
    )
    none = await engine.store.list_jobs(tenant_id="t1", job_ids=[])
    only_theirs = await engine.store.list_jobs(tenant_id="t1", job_ids=theirs)
    operators = await engine.store.list_jobs(tenant_id=None, job_ids=[theirs[0], mine[0]])

    assert [job.job_id for job in named.jobs] == [mine[1], mine[3]]
    assert named.next_cursor is None
    assert none.jobs == []
    assert only_theirs.jobs == []
    assert [job.job_id for job in operators.jobs] == sorted([theirs[0], mine[0]], reverse=True)


async def test_named_jobs_page_and_filter_like_any_list(engine, job_factory):
    ids = await _jobs(engine, job_factory, 5, metadata={"pad": PAD})
    each = weight(await engine.store.get(ids[0]))
    await engine.claim(ids[1])

    first = await engine.store.list_jobs(tenant_id="t1", job_ids=ids, limit=2)
    rest = await engine.store.list_jobs(
        tenant_id="t1", job_ids=ids, limit=5, cursor=first.next_cursor, max_bytes=2 * each
    )
    processing = await engine.store.list_jobs(
        tenant_id="t1", job_ids=ids, status=JobStatus.PROCESSING
    )

    assert [job.job_id for job in first.jobs] == ids[:2]
    assert first.next_cursor == ids[1]
    assert [job.job_id for job in rest.jobs] == ids[2:4]
    assert rest.next_cursor == ids[3]
    assert [job.job_id for job in processing.jobs] == [ids[1]]
