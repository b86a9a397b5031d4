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
