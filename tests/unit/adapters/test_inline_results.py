"""Results kept in the SQLite file or in memory: verified on read, reclaimed by job."""

from __future__ import annotations

import pytest

from ferryman.adapters.memory import InMemoryResultStore
from ferryman.adapters.sqlite import SqliteResultStore
from ferryman.core.errors import ResultsUnavailableError, ResultUnreadableError
from ferryman.core.results import job_id_of, result_key

KEY = result_key("t1", "gen_01HZZZZZZZZZZZZZZZZZZZZZZ1", "att_01HZZZZZZZZZZZZZZZZZZZZZZ1")


def key(n: int) -> str:
    return result_key("t1", f"gen_{n:026d}", f"att_{n:026d}")


async def test_a_row_changed_in_place_is_unreadable(db) -> None:
    store = SqliteResultStore(db)
    ref = await store.put(KEY, b'{"text": "hello"}')
    await db.write(
        lambda conn: conn.execute("UPDATE results SET data = ? WHERE key = ?", (b"{}", KEY))
    )

    with pytest.raises(ResultUnreadableError, match="checksum"):
        await store.get(ref, key=KEY)


async def test_an_old_ref_without_checksum_stays_readable_for_its_key_only(db) -> None:
    store = SqliteResultStore(db)
    await store.put(KEY, b'{"text": "old"}')

    assert await store.get(f"db:{KEY}", key=KEY) == b'{"text": "old"}'
    with pytest.raises(ResultUnreadableError):
        await store.get(f"db:{KEY}", key=key(2))


async def test_a_missing_row_is_unreadable(db) -> None:
    store = SqliteResultStore(db)
    ref = await store.put(KEY, b"x")
    await db.write(lambda conn: conn.execute("DELETE FROM results"))

    with pytest.raises(ResultUnreadableError, match="missing"):
        await store.get(ref, key=KEY)


async def test_the_sqlite_probe_leaves_nothing_and_fails_as_unavailable_when_closed(db) -> None:
    store = SqliteResultStore(db)
    await store.probe()
    count = await db.read(lambda conn: conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])
    assert count == 0
    await db.close()

    with pytest.raises(ResultsUnavailableError):
        await store.probe()


@pytest.fixture(params=["sqlite", "memory"])
def inline_store(request, db):
    return SqliteResultStore(db) if request.param == "sqlite" else InMemoryResultStore()


async def test_reclaim_deletes_the_results_of_gone_jobs_and_counts_their_bytes(
    inline_store,
) -> None:
    refs = {n: await inline_store.put(key(n), b"x" * (10 + n)) for n in range(1200)}
    stranger = await inline_store.put("not/a-result-key", b"kept")
    alive = {job_id_of(key(n)) for n in (3, 700)}
    questions = 0

    async def any_job_exists(job_ids) -> bool:
        nonlocal questions
        questions += 1
        assert len(job_ids) <= 500
        return any(job_id in alive for job_id in job_ids)

    reclaimed = await inline_store.reclaim(any_job_exists=any_job_exists)

    assert reclaimed == sum(10 + n for n in range(1200) if n not in (3, 700))
    for n in (3, 700):
        assert await inline_store.get(refs[n], key=key(n)) == b"x" * (10 + n)
    with pytest.raises(ResultUnreadableError):
        await inline_store.get(refs[4], key=key(4))
    assert await inline_store.get(stranger, key="not/a-result-key") == b"kept"
    # Groups are asked about, not each job one by one.
    assert questions < 200
