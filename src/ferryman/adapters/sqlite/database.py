"""One SQLite file shared by every ferryman process: a group-commit writer and a reader.

Settings: WAL (readers never wait for the writer), synchronous=FULL by default so an
accepted job survives power loss (NORMAL is the documented opt-in: it may lose the
last commits on power loss, never on a process crash), a busy timeout because the
API and several workers write the same file, and foreign keys on.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ferryman.adapters.batching import BatchingThread, ClosedError, Outcome
from ferryman.adapters.sqlite.checkpoints import SAFETY_NET_PAGES, Checkpointer
from ferryman.adapters.sqlite.migrations import migrate
from ferryman.adapters.sqlite.peers import CANCELS, MESSAGES, STATUSES, PeerWakeups
from ferryman.adapters.sqlite.peers import directory_for as peers_directory
from ferryman.adapters.sqlite.writer import (
    GroupCommitWriter,
    ProbeWrite,
    translate_errors,
    translated,
)
from ferryman.adapters.wakeup import Wakeup
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable

T = TypeVar("T")

SYNCHRONOUS_MODES = frozenset({"FULL", "NORMAL", "EXTRA"})
# Reads waiting together share one read transaction (one snapshot, taken after every
# one of them was asked) and one hand-off back to the loop.
MAX_READ_BATCH = 64
# Jobs hold customer data: the file and any directory made for it are the owner's only.
# SQLite gives its -wal and -shm files the database file's permissions.
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700


class DatabaseMissingError(StoreUnavailableError):
    """The database file does not exist."""

    code = "database_missing"


class SqliteDatabase:
    """Async access to one SQLite file. Build it with ``await SqliteDatabase.open(path)``."""

    def __init__(
        self,
        path: Path,
        writer: sqlite3.Connection,
        reader: sqlite3.Connection,
        *,
        max_batch: int,
        checkpointer: sqlite3.Connection | None = None,
        busy_timeout_seconds: float = 10.0,
    ) -> None:
        self.path = path
        self._writer_conn = writer
        self._reader_conn = reader
        self._writer = GroupCommitWriter(
            writer,
            max_batch=max_batch,
            name="ferryman-sqlite-write",
            lock_patience_seconds=busy_timeout_seconds,
        )
        self._reads: BatchingThread[Callable[[sqlite3.Connection], Any]] = BatchingThread(
            self._read_batch, max_batch=MAX_READ_BATCH, name="ferryman-sqlite-read"
        )
        # Queue consumers wait on it; senders nudge it, and through the socket directory
        # beside the file, the consumers of other processes (adapters/sqlite/peers.py).
        in_memory = str(path) == ":memory:"
        peers = None if in_memory else PeerWakeups(peers_directory(path))
        self.wakeup = Wakeup(None if peers is None else peers.channel(MESSAGES))
        # Cancel watchers wait on it; a cancel request for a running job nudges it,
        # here and in the other processes, over the same socket.
        self.cancel_wakeup = Wakeup(None if peers is None else peers.channel(CANCELS))
        # Status watchers (clients' waits, services/watch.py) wait on it; every stored
        # status change nudges it, the other processes' once per loop turn at most.
        self.status_wakeup = Wakeup(
            None if peers is None else peers.channel(STATUSES, coalesce=True)
        )
        self._closed = False
        # WAL checkpoints off the writer thread (adapters/sqlite/checkpoints.py).
        self._checkpointer = (
            None if checkpointer is None else Checkpointer(checkpointer, lambda: self.commit_count)
        )

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        synchronous: str = "FULL",
        busy_timeout_seconds: float = 10.0,
        max_batch: int = 256,
        create: bool = True,
    ) -> SqliteDatabase:
        """Open the database file and bring its schema up to date.

        With ``create`` (the default) a missing file and its directories are made,
        readable by the owner only; without it a missing file is an error
        (``DatabaseMissingError``), so a mistyped path is never a fresh empty database.
        """
        mode = synchronous.upper()
        if mode not in SYNCHRONOUS_MODES:
            raise ValueError(f"synchronous must be one of {sorted(SYNCHRONOUS_MODES)}")
        target = Path(path)
        with translate_errors():
            writer, reader, checkpointer = await asyncio.to_thread(
                _connect_all, target, mode, busy_timeout_seconds, create
            )
        return cls(
            target,
            writer,
            reader,
            max_batch=max_batch,
            checkpointer=checkpointer,
            busy_timeout_seconds=busy_timeout_seconds,
        )

    @property
    def commit_count(self) -> int:
        """Transactions committed by this object's writer (each one is one fsync)."""
        return self._writer.commits

    @property
    def write_count(self) -> int:
        """Write operations committed by this object's writer."""
        return self._writer.ops

    def recent_write_failure(self, within_seconds: float) -> str | None:
        """Why a write failed, while it is news: within the last ``within_seconds`` and
        before work (more than a probe) was committed again; else None. A lock that
        cleared is forgotten as soon as jobs are written again, and a process with no
        work to write forgets it after ``within_seconds``."""
        writer = self._writer
        at = writer.last_failure_at
        if at is None or time.monotonic() - at > within_seconds:
            return None
        if writer.last_success_at is not None and writer.last_success_at > at:
            return None
        return writer.last_failure

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, alone: bool = False) -> T:
        """Run ``fn`` inside the next group-commit transaction; return after COMMIT.
        ``alone``: a large write, committed on its own after the others waiting."""
        return await self._writer.write(fn, alone=alone)

    async def probe_write(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``write`` for a write that only checks writes go through (readiness): its
        success is not taken for the store's recovery (``recent_write_failure``)."""
        return cast("T", await self._writer.write(ProbeWrite(fn)))

    async def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the read connection, inside one read transaction (one snapshot,
        taken after the call: it sees every write committed before it)."""
        if self._closed:
            raise StoreUnavailableError("the database is closed")
        try:
            future = self._reads.submit(fn)
        except ClosedError:
            raise StoreUnavailableError("the database is closed") from None
        return cast("T", await future)

    def _read_batch(self, fns: list[Callable[[sqlite3.Connection], Any]]) -> list[Outcome]:
        """The reads waiting together, in one snapshot; each gets its own outcome."""
        conn = self._reader_conn
        try:
            conn.execute("BEGIN")
        except sqlite3.Error as exc:
            return [Outcome(error=translated(exc))] * len(fns)
        try:
            return [_read_one(conn, fn) for fn in fns]
        finally:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error:
                # The reads' values stand (their snapshot was consistent); the
                # connection must leave the transaction before the next batch.
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.wakeup.close()
        self.cancel_wakeup.close()
        self.status_wakeup.close()
        # Each step whatever happened to the one before: a close that failed or was
        # cancelled halfway must not leave a thread or a connection open.
        try:
            if self._checkpointer is not None:
                await asyncio.to_thread(self._checkpointer.close)
        finally:
            try:
                await asyncio.to_thread(self._writer.close)
            finally:
                try:
                    await asyncio.to_thread(self._reads.close)
                finally:
                    self._writer_conn.close()
                    self._reader_conn.close()


def _read_one(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any]) -> Outcome:
    try:
        return Outcome(value=fn(conn))
    except sqlite3.Error as exc:
        return Outcome(error=translated(exc))
    except Exception as exc:  # noqa: BLE001 - handed to the read's caller, not swallowed
        return Outcome(error=exc)


def _connect_all(
    path: Path, synchronous: str, busy_timeout_seconds: float, create: bool
) -> tuple[sqlite3.Connection, sqlite3.Connection, sqlite3.Connection | None]:
    """The writer (which migrates the schema first), the reader thread's connection and
    the checkpointer's (a file only)."""
    in_memory = str(path) == ":memory:"
    if not in_memory:
        _prepare_file(path, create=create)
    writer = _connect(path, synchronous, busy_timeout_seconds)
    opened = [writer]
    try:
        # The writer waits for other processes' write lock itself, in finer steps than
        # SQLite's busy handler (writer.begin_immediate), from the migration on.
        writer.execute("PRAGMA busy_timeout = 0")
        migrate(writer, patience_seconds=busy_timeout_seconds)
        reader = _connect(path, synchronous, busy_timeout_seconds)
        opened.append(reader)
        reader.execute("PRAGMA query_only = ON")
        checkpointer = None
        if not in_memory:
            writer.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_NET_PAGES}")
            checkpointer = _connect(path, synchronous, busy_timeout_seconds)
    except BaseException:
        for conn in opened:
            conn.close()
        raise
    return writer, reader, checkpointer


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


def _prepare_file(path: Path, *, create: bool) -> None:
    """Make the file (owner-only) before SQLite does, or refuse a missing one."""
    if path.exists():
        return
    if not create:
        raise DatabaseMissingError(f"no database file at {path.resolve()}")
    path.parent.mkdir(mode=DIRECTORY_MODE, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return  # another process made it a moment ago
    os.close(fd)
