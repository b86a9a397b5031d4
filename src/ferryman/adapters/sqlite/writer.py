"""Group commit: one thread owns the write connection and commits many operations at once.

Writes arrive as plain functions ``fn(conn) -> T``. The thread takes every write
waiting at that moment and runs them in ONE ``BEGIN IMMEDIATE`` ... ``COMMIT``, each
inside its own SAVEPOINT: an operation that raises rolls back only itself and gets its
exception, the others commit. Each caller's future resolves only after COMMIT
returned, so nobody acts on a write that is not yet durable. Under load, concurrent
claims, publishes and acks of one process share one fsync instead of paying one each.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import queue
import sqlite3
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

T = TypeVar("T")


@contextlib.contextmanager
def translate_errors() -> Iterator[None]:
    """Driver errors become StoreUnavailableError at the adapter boundary."""
    try:
        yield
    except sqlite3.Error as exc:
        raise unavailable(exc) from exc


def unavailable(exc: sqlite3.Error) -> StoreUnavailableError:
    # SQLite's messages name tables and constraints, never bound values: safe to show.
    error = StoreUnavailableError(f"sqlite: {type(exc).__name__}: {exc}")
    error.__cause__ = exc
    return error


@dataclass(slots=True)
class _Op(Generic[T]):
    fn: Callable[[sqlite3.Connection], T]
    future: concurrent.futures.Future[T]


@dataclass(slots=True)
class _Outcome:
    value: Any = None
    error: BaseException | None = None


class GroupCommitWriter:
    """The single writer thread of one SQLite connection."""

    def __init__(self, conn: sqlite3.Connection, *, max_batch: int = 256, name: str) -> None:
        self._conn = conn
        self._max_batch = max_batch
        self._inbox: queue.SimpleQueue[_Op[Any] | None] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self.commits = 0
        self.ops = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> concurrent.futures.Future[T]:
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        with self._lock:
            if self._closed:
                raise StoreUnavailableError("the database is closed")
            self._inbox.put(_Op(fn, future))
        return future

    def close(self) -> None:
        """Finish the writes already submitted, then stop the thread (blocking)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._inbox.get()
            if first is None:
                return
            batch: list[_Op[Any]] = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            self._run_batch(batch)

    def _run_batch(self, batch: list[_Op[Any]]) -> None:
        # A caller that was cancelled before its turn is skipped: nobody awaits it.
        ops = [op for op in batch if op.future.set_running_or_notify_cancel()]
        if not ops:
            return
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            outcomes = [self._run_op(op) for op in ops]
            self._conn.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            for op in ops:
                op.future.set_exception(unavailable(exc))
            return
        self.commits += 1
        self.ops += len(ops)
        for op, outcome in zip(ops, outcomes, strict=True):
            if outcome.error is not None:
                op.future.set_exception(outcome.error)
            else:
                op.future.set_result(outcome.value)

    def _run_op(self, op: _Op[Any]) -> _Outcome:
        self._conn.execute("SAVEPOINT op")
        try:
            value = op.fn(self._conn)
        except Exception as exc:  # noqa: BLE001 - handed to the op's caller, not swallowed
            # Undo this op only. If SQLite already aborted the whole transaction,
            # ROLLBACK TO fails and the batch fails as one (nothing was committed).
            self._conn.execute("ROLLBACK TO op")
            self._conn.execute("RELEASE op")
            return _Outcome(error=unavailable(exc) if isinstance(exc, sqlite3.Error) else exc)
        self._conn.execute("RELEASE op")
        return _Outcome(value=value)

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                self._conn.execute("ROLLBACK")
