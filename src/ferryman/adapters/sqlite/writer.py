"""Group commit: one thread owns the write connection and commits many operations at once.

Writes arrive as plain functions ``fn(conn) -> T``. The writer thread takes every
write waiting at that moment and runs them in ONE ``BEGIN IMMEDIATE`` ... ``COMMIT``.
An operation that raises rolls back only itself and gets its exception, the others
commit: the batch is then undone and run again with each operation inside its own
SAVEPOINT (a batch that succeeds whole, nearly every one, pays for no savepoints). Each caller's future resolves only after
COMMIT returned, so nobody acts on a write that is not yet durable. Under load,
concurrent claims, publishes and acks of one process share one fsync instead of
paying one each.

The write lock is shared with every other process on the same file. SQLite's own
busy handler, when it finds the lock taken, sleeps 1 ms first and longer after (up to
100 ms a try), while another process's commit here takes a few tenths of a millisecond: with
an API and two workers on one file, one write in ten waited a millisecond or more for
a lock already free. The writer's connection has no busy handler; ``begin_immediate``
retries after 0.2 ms, doubling to 2 ms a wait, within the same patience.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from typing import TYPE_CHECKING, Any, TypeVar, cast

from ferryman.adapters.batching import BatchingThread, ClosedError, Outcome
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

T = TypeVar("T")

# The first wait for another process's write lock, and the longest one: about the
# length of one commit here, doubling to a bound that notices a freed lock within
# 2 ms. Shorter first steps (50 µs to 1 ms) waited no less and cost more CPU in
# retries (docs/benchmarks.md, "Fourth pass").
_FIRST_LOCK_WAIT_SECONDS = 0.0002
_LONGEST_LOCK_WAIT_SECONDS = 0.002


# SQLite's primary result codes that say the file cannot serve us now: its lock is
# held, the disk failed, filled up or turned read-only, the file cannot be opened or is
# not (or no longer) a database, memory ran out. The low byte of an extended code
# (SQLITE_IOERR_FSYNC, SQLITE_BUSY_RECOVERY, ...) is its primary code.
_OUTAGE_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOTADB,
    }
)


def is_outage(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the store is away (to ride out, and for readiness to
    report), not that a statement is wrong (a constraint, bad SQL, a closed
    connection: bugs, which retrying never mends)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and code & 0xFF in _OUTAGE_CODES


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """An outage becomes StoreUnavailableError at the adapter boundary; every other
    driver error goes through as itself, as on PostgreSQL (adapters/postgres/errors.py)."""
    try:
        yield
    except sqlite3.Error as exc:
        raise translated(exc) from exc


def translated(exc: sqlite3.Error) -> Exception:
    """What the caller of a failed operation gets: StoreUnavailableError for an
    outage, else the driver's error itself."""
    return unavailable(exc) if is_outage(exc) else exc


def unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    # SQLite's messages name tables and constraints, never bound values: safe to show.
    error = StoreUnavailableError(f"sqlite: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


# speed exception: see docs/design-notes.md, Speed exceptions
def begin_immediate(conn: sqlite3.Connection, *, patience_seconds: float) -> None:
    """``BEGIN IMMEDIATE``, waiting up to ``patience_seconds`` in short steps while
    another connection holds the write lock (``conn`` must have no busy handler: a
    busy timeout of 0). A lock still held after that raises SQLite's own error."""
    wait = _FIRST_LOCK_WAIT_SECONDS
    deadline: float | None = None
    while True:
        try:
            conn.execute("BEGIN IMMEDIATE")
            return
        except sqlite3.OperationalError as exc:
            # Extended codes (SQLITE_BUSY_RECOVERY, ...) carry SQLITE_BUSY in the low byte.
            # The module's own errors (not SQLite's) carry no code.
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + patience_seconds
            if now >= deadline:
                raise
            time.sleep(min(wait, deadline - now))
            wait = min(wait * 2, _LONGEST_LOCK_WAIT_SECONDS)


class ProbeWrite:
    """A write made only to see whether writes go through (readiness): its success says
    nothing about the writes that carry work (a nearly full disk takes a small write
    and refuses a large one), so it never counts as the store's recovery."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[sqlite3.Connection], Any]) -> None:
        self.fn = fn

    def __call__(self, conn: sqlite3.Connection) -> Any:
        return self.fn(conn)


class GroupCommitWriter:
    """The single writer thread of one SQLite connection."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        *,
        max_batch: int = 256,
        name: str,
        lock_patience_seconds: float = 10.0,
    ) -> None:
        # The connection's busy timeout must be 0: begin_immediate does the waiting.
        self._conn = conn
        self._lock_patience = lock_patience_seconds
        self._thread: BatchingThread[Callable[[sqlite3.Connection], Any]] = BatchingThread(
            self._commit_batch, max_batch=max_batch, name=name
        )
        # The latest write the engine refused (a locked file, a full disk), on the
        # monotonic clock: readiness reports it until work is written again.
        self.last_failure_at: float | None = None
        self.last_failure: str | None = None
        # The latest commit of work (not only probes) in which no write was refused.
        self.last_success_at: float | None = None
        self._failures = 0

    @property
    def commits(self) -> int:
        return self._thread.batches

    @property
    def ops(self) -> int:
        return self._thread.requests

    async def write(self, fn: Callable[[sqlite3.Connection], T], *, alone: bool = False) -> T:
        """Run ``fn`` in the next batch's transaction; return after its COMMIT.
        ``alone``: a large write, in a transaction of its own after the writes waiting
        with it (adapters/batching.py), so theirs never waits for it."""
        try:
            future = self._thread.submit(fn, alone=alone)
        except ClosedError:
            raise StoreUnavailableError("the database is closed") from None
        return cast("T", await future)

    def close(self) -> None:
        """Finish the writes already submitted, then stop the thread (blocking)."""
        self._thread.close()

    def _commit_batch(self, ops: list[Callable[[sqlite3.Connection], Any]]) -> list[Outcome]:
        failures = self._failures
        try:
            self._begin()
            outcomes = self._run_plainly(ops)
            if outcomes is None:
                # An op raised: undo the whole batch and run it again, each op in its
                # own savepoint, so only the failing op fails.
                self._conn.execute("ROLLBACK")
                self._begin()
                outcomes = [self._run_op(op) for op in ops]
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            # Nothing of this batch was committed: every caller gets the failure.
            self._rollback()
            self._note_failure(exc)
            failed = Outcome(error=translated(exc))
            return [failed] * len(ops)
        if self._failures == failures and not all(isinstance(op, ProbeWrite) for op in ops):
            self.last_success_at = time.monotonic()
        return outcomes

    def _begin(self) -> None:
        begin_immediate(self._conn, patience_seconds=self._lock_patience)

    def _run_plainly(self, ops: list[Callable[[sqlite3.Connection], Any]]) -> list[Outcome] | None:
        """Every op without a savepoint of its own; None when one raised (the caller
        rolls back). Nearly every batch succeeds whole, and a savepoint and its release
        are two statements of the five or six an op runs, each a release and a
        re-acquisition of the GIL. An op is a function of the connection alone, so
        running it again after the rollback is running it for the first time; a batch
        of one op keeps its error without a second run."""
        outcomes: list[Outcome] = []
        for op in ops:
            try:
                outcomes.append(Outcome(value=op(self._conn)))
            except Exception as exc:  # noqa: BLE001 - handed to the op's caller, not swallowed
                if len(ops) > 1:
                    return None
                self._conn.execute("ROLLBACK")
                self._begin()
                if isinstance(exc, sqlite3.Error):
                    self._note_failure(exc)
                    return [Outcome(error=translated(exc))]
                return [Outcome(error=exc)]
        return outcomes

    def _run_op(self, op: Callable[[sqlite3.Connection], Any]) -> Outcome:
        self._conn.execute("SAVEPOINT op")
        try:
            value = op(self._conn)
        except Exception as exc:  # noqa: BLE001 - handed to the op's caller, not swallowed
            # Undo this op only. If SQLite already aborted the whole transaction,
            # ROLLBACK TO fails and the batch fails as one (nothing was committed).
            self._conn.execute("ROLLBACK TO op")
            self._conn.execute("RELEASE op")
            if isinstance(exc, sqlite3.Error):
                self._note_failure(exc)
                return Outcome(error=translated(exc))
            return Outcome(error=exc)
        self._conn.execute("RELEASE op")
        return Outcome(value=value)

    def _note_failure(self, exc: sqlite3.Error) -> None:
        """Remember an outage for readiness; a wrong statement says nothing of the store."""
        if not is_outage(exc):
            return
        self.last_failure = f"{type(exc).__name__}: {exc}"
        self.last_failure_at = time.monotonic()
        self._failures += 1

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
