"""SqliteDatabase.recent_write_failure: a refused write is news until work is written again.

Readiness (/readyz) asks it after its own probe write. A lock that cleared must stop
making the process unready as soon as jobs are written again (the fault run's /readyz
stayed 503 for 10 s while jobs finished within 0.16 s); the probe's own small write is
not that proof, since a nearly full disk takes it and refuses larger ones.
"""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.core.errors import StoreUnavailableError

LONG = 3600.0  # a memory far longer than the test: only writes may end it


def _insert(key: str):
    def op(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO results (key, data) VALUES (?, ?)", (key, b"x"))
        return key

    return op


def _refuse(conn: sqlite3.Connection) -> None:
    raise _disk_full()


def _disk_full() -> sqlite3.OperationalError:
    # As SQLite raises it: the result code is what says it is an outage.
    error = sqlite3.OperationalError("database or disk is full")
    error.sqlite_errorcode = sqlite3.SQLITE_FULL
    error.sqlite_errorname = "SQLITE_FULL"
    return error


def _probe(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT 1")


async def _refused(db: SqliteDatabase) -> None:
    with pytest.raises(StoreUnavailableError):
        await db.write(_refuse)


async def test_no_failure_no_news(db: SqliteDatabase) -> None:
    assert db.recent_write_failure(LONG) is None
    await db.write(_insert("a"))
    assert db.recent_write_failure(LONG) is None


async def test_a_refused_write_is_news_until_work_is_committed(db: SqliteDatabase) -> None:
    await _refused(db)
    assert db.recent_write_failure(LONG) == "OperationalError: database or disk is full"

    await db.write(_insert("a"))

    assert db.recent_write_failure(LONG) is None


async def test_a_probe_that_went_through_is_not_proof(db: SqliteDatabase) -> None:
    await _refused(db)

    await db.probe_write(_probe)

    assert db.recent_write_failure(LONG) is not None


async def test_a_batch_in_which_a_write_was_refused_is_not_proof(db: SqliteDatabase) -> None:
    """One commit that also refused a write (each op in its own savepoint) proves
    nothing: the disk took some writes and not others."""
    entered, release = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def block(conn: sqlite3.Connection) -> None:
        loop.call_soon_threadsafe(entered.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result(5)

    blocker = asyncio.ensure_future(db.write(block))
    await entered.wait()
    # Queued behind the blocker: these two go as one batch.
    refused = asyncio.ensure_future(db.write(_refuse))
    taken = asyncio.ensure_future(db.write(_insert("b")))
    release.set()
    await blocker
    with pytest.raises(StoreUnavailableError):
        await refused
    assert await taken == "b"

    assert db.recent_write_failure(LONG) is not None


async def test_an_old_failure_is_forgotten_by_a_process_with_nothing_to_write(
    db: SqliteDatabase,
) -> None:
    await _refused(db)
    assert db.recent_write_failure(0.0) is None
