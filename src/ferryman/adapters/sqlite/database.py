"""One SQLite file shared by every ferryman process: a group-commit writer and a reader.

Settings: WAL (readers never wait for the writer), synchronous=FULL by default so an
accepted job survives power loss (NORMAL is the documented opt-in: it may lose the
last commits on power loss, never on a process crash), a busy timeout because the
API and several workers write the same file, and foreign keys on.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import sqlite3
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from ferryman.adapters.sqlfile import read_sql
from ferryman.adapters.sqlite.sql import SQL_PACKAGE
from ferryman.adapters.sqlite.wakeup import Wakeup
from ferryman.adapters.sqlite.writer import GroupCommitWriter, translate_errors
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    import os
    from collections.abc import Callable

T = TypeVar("T")

SYNCHRONOUS_MODES = frozenset({"FULL", "NORMAL", "EXTRA"})


class SqliteDatabase:
    """Async access to one SQLite file. Build it with ``await SqliteDatabase.open(path)``."""

    def __init__(
        self,
        path: Path,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        *,
        max_batch: int,
    ) -> None:
        self.path = path
        self._writer_conn = writer
        self._reader_conn = reader
        self._writer = GroupCommitWriter(writer, max_batch=max_batch, name="ferryman-sqlite-write")
        self._reads = concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="ferryman-sqlite-read"
        )
        # Queue consumers of this process wait on it; senders of this process nudge it.
        self.wakeup = Wakeup()
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_seconds: float = 10.0,
        max_batch: int = 256,
    ) -> SqliteDatabase:
        """Open (creating directories and schema as needed) the database file."""
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
        target = Path(path)
        with translate_errors():
            writer, reader = await asyncio.to_thread(
                _connect_pair, target, mode, busy_timeout_seconds
            )
        return cls(target, writer, reader, max_batch=max_batch)

    @property
    def commit_count(self) -> int:
        """Transactions committed by this object's writer (each one is one fsync)."""
        return self._writer.commits

    @property
    def write_count(self) -> int:
        """Write operations committed by this object's writer."""
        return self._writer.ops

    async def write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` inside the next group-commit transaction; return after COMMIT."""
        return await self._writer.write(fn)

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the read connection, in one read transaction (one snapshot)."""
        if self._closed:
            raise StoreUnavailableError("the database is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._reads, _read_in_snapshot, self._reader_conn, fn)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.to_thread(self._writer.close)
        await asyncio.to_thread(self._reads.shutdown, wait=True)
        self._writer_conn.close()
        self._reader_conn.close()


def _read_in_snapshot(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    with translate_errors():
        conn.execute("BEGIN")
        try:
            return fn(conn)
        finally:
            conn.execute("COMMIT")


def _connect_pair(
    path: Path, synchronous: str, busy_timeout_seconds: float
) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = _connect(path, synchronous, busy_timeout_seconds)
    try:
        _apply_schema(writer)
        reader = _connect(path, synchronous, busy_timeout_seconds)
        reader.execute("PRAGMA query_only = ON")
    except BaseException:
        writer.close()
        raise
    return writer, reader


def _connect(path: Path, synchronous: str, busy_timeout_seconds: float) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves. The connection moves
    # between threads (opened here, used by its own thread only afterwards).
    conn = sqlite3.connect(
        path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
    )
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_seconds * 1000)}")
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
    if str(mode).lower() != "wal":
        conn.close()
        raise StoreUnavailableError(f"sqlite: cannot use WAL mode on {path.name} (got {mode})")
    # Values are from a fixed set checked by open(): PRAGMA does not take parameters.
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


def _apply_schema(conn: sqlite3.Connection) -> None:
    schema = read_sql(SQL_PACKAGE, "schema.sql")
    # Two processes may open a fresh file at once: create under the write lock.
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _statements(schema):
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _statements(script: str) -> list[str]:
    statements: list[str] = []
    current = ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--") and not current.strip():
            continue
        current += line
        if sqlite3.complete_statement(current):
            statements.append(current.strip())
            current = ""
    return statements
