"""SQLite schema migrations: recorded, applied once, never stranding an old file."""

from __future__ import annotations

import sqlite3
import stat
import threading

import pytest

from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.adapters.sqlite.database import DatabaseMissingError
from ferryman.adapters.sqlite.migrations import (
    SchemaTooNewError,
    applied_version,
    available,
    latest_version,
    migrate,
)


def _versions(path) -> list[int]:
    conn = sqlite3.connect(path)
    try:
        return [row[0] for row in conn.execute("SELECT version FROM schema_migrations")]
    finally:
        conn.close()


def test_migrations_are_numbered_from_one_without_gaps() -> None:
    assert [m.version for m in available()] == list(range(1, latest_version() + 1))


async def test_a_new_file_gets_every_migration_recorded(tmp_path) -> None:
    db = await SqliteDatabase.open(tmp_path / "new.db")
    await db.close()
    assert _versions(tmp_path / "new.db") == list(range(1, latest_version() + 1))


async def test_a_file_from_before_migrations_is_upgraded_not_stranded(tmp_path) -> None:
    # What ferryman 0.1 wrote: the first schema and no ledger, with a job in it.
    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    first = available()[0].sql
    conn.executescript(first)
    conn.execute(
        "INSERT INTO jobs (job_id, tenant_id, request_hash, task, model, input, "
        "payload_version, status, dispatch_state, correlation_id, created_at, updated_at) "
        "VALUES ('gen_1', 't', 'h', 'generate', 'sim', '{}', 1, 'QUEUED', 'DISPATCHED', "
        "'c', 1.0, 1.0)"
    )
    conn.close()

    db = await SqliteDatabase.open(path)
    await db.close()

    assert _versions(path) == list(range(1, latest_version() + 1))
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT job_id FROM jobs").fetchall() == [("gen_1",)]
    conn.close()


def test_migrating_twice_applies_nothing_the_second_time(tmp_path) -> None:
    conn = sqlite3.connect(tmp_path / "twice.db", isolation_level=None)
    assert migrate(conn, patience_seconds=10) == list(range(1, latest_version() + 1))
    assert migrate(conn, patience_seconds=10) == []
    assert applied_version(conn) == latest_version()


def test_a_schema_newer_than_this_code_is_refused(tmp_path) -> None:
    conn = sqlite3.connect(tmp_path / "future.db", isolation_level=None)
    migrate(conn, patience_seconds=10)
    conn.execute(
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, 'future', 0)",
        (latest_version() + 1,),
    )
    with pytest.raises(SchemaTooNewError, match="upgrade ferryman"):
        migrate(conn, patience_seconds=10)


async def test_a_new_file_and_its_directory_are_the_owners_only(tmp_path) -> None:
    path = tmp_path / "private" / "f.db"
    db = await SqliteDatabase.open(path)
    await db.write(
        lambda conn: conn.execute(
            "INSERT INTO control (switch, paused, actor, updated_at) VALUES ('x', 0, 'a', 0)"
        )
    )
    try:
        for made in (path, path.with_name("f.db-wal")):
            assert stat.S_IMODE(made.stat().st_mode) == 0o600, made
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    finally:
        await db.close()


async def test_without_create_a_missing_file_is_an_error_and_nothing_is_made(tmp_path) -> None:
    path = tmp_path / "typo" / "ferryman.db"
    with pytest.raises(DatabaseMissingError, match="no database file"):
        await SqliteDatabase.open(path, create=False)
    assert not path.parent.exists()


def test_migrate_waits_for_a_write_lock_another_connection_holds(tmp_path) -> None:
    path = tmp_path / "held.db"
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.05, lambda: holder.execute("COMMIT"))
    conn = sqlite3.connect(path, isolation_level=None)
    # No busy handler: the migration's own wait (writer.begin_immediate) must do it.
    conn.execute("PRAGMA busy_timeout = 0")
    release.start()
    try:
        assert migrate(conn, patience_seconds=5) == list(range(1, latest_version() + 1))
    finally:
        release.join()
        holder.close()
        conn.close()


def _file_at(path, version: int) -> sqlite3.Connection:
    """A file as the ferryman that shipped ``version`` left it."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(
        "CREATE TABLE schema_migrations ("
        " version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at REAL NOT NULL)"
    )
    for migration in available()[:version]:
        conn.executescript(migration.sql)
        conn.execute(
            "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, 0)",
            (migration.version, migration.name),
        )
    return conn


async def test_jobs_stored_before_webhooks_owe_none_and_are_purged_as_before(tmp_path) -> None:
    from ferryman.adapters.sqlite.sql import JOBS
    from ferryman.core.clock import FakeClock
    from ferryman.engines import open_engine

    path = tmp_path / "v5.db"
    conn = _file_at(path, 5)
    conn.execute(
        "INSERT INTO jobs (job_id, tenant_id, request_hash, task, model, input, "
        "payload_version, status, dispatch_state, correlation_id, created_at, updated_at, "
        "completed_at) VALUES ('gen_1', 't', 'h', 'generate', 'sim', '{}', 1, 'SUCCEEDED', "
        "'DISPATCHED', 'c', 1.0, 2.0, 2.0)"
    )
    conn.close()

    async with open_engine(f"sqlite:///{path}", clock=FakeClock()) as engine:
        job = await engine.store.get("gen_1")
        assert job is not None
        assert (job.webhook_url, job.webhook_due_at, job.webhook_attempts) == (None, None, 0)
        assert job.webhook_event_seq == 0
        assert await engine.store.webhooks_due(now=10.0, limit=10) == []
        assert await engine.webhook_secrets.get_secret("t") is None
        assert await engine.store.purge_finished(completed_before=10.0, limit=10) == ["gen_1"]

    conn = sqlite3.connect(path)
    try:
        assert applied_version(conn) == latest_version()
        # The dispatcher's scan reads the partial index, in its order, never every job.
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + JOBS["webhooks_due"],
            {"now": 10.0, "limit": 10, "skip": '["t9"]'},
        ).fetchall()
        details = " ".join(row[3] for row in plan)
        assert "jobs_webhooks_due" in details
        assert "TEMP B-TREE" not in details
        plan = conn.execute(
            "EXPLAIN QUERY PLAN " + JOBS["finished_before"], {"before": 10.0, "limit": 10}
        ).fetchall()
        assert "jobs_finished" in " ".join(row[3] for row in plan)
    finally:
        conn.close()
