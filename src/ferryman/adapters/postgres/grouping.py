"""Group commit: writes that are ready at the same moment share one transaction.

A commit waits for the server's WAL flush, whose cost hardly depends on how much it
covers, so one transaction per write caps a process at about one write per flush.
Callers hand ``GroupCommit.run`` an operation (a coroutine function over a
connection); while a batch is committing, new operations wait, and the next batch
takes all of them (up to ``max_batch``).

A batch first runs its operations one after another in one transaction with no
savepoint: nearly every write succeeds (a change that lost its race returns False,
an insert that finds its row returns 0 rows; neither raises), and a SAVEPOINT and
its RELEASE were two more round trips for each. If any operation raises (a conflict,
a key mismatch, any error but an outage), that transaction is rolled back, nothing
of it committed, and the batch runs again with each operation inside a SAVEPOINT of
its own, so the failing one is rolled back alone and only its caller gets the error;
the others still commit. An operation is therefore run twice in that case: it must
do nothing but statements on the connection it is given (all of which the rollback
undoes). An outage (StoreUnavailableError) fails the whole batch: nothing in it
committed, and every caller is told so.

An operation may be a ``Statement``: one statement whose value is read from its
result. A batch of nothing but statements goes to the server as one pipeline, BEGIN,
the statements and COMMIT, and costs one round trip however many it holds; their
values are read once it committed, so a statement's ``outcome`` may raise only when
the statement changed nothing. A statement the server refuses makes it skip the rest,
COMMIT included: nothing committed, and the batch runs again apart as above (a
statement with a ``general`` operation runs that instead, in its savepoint). In a
batch with other operations, the statements are sent in one pipeline after those,
inside the batch's transaction (the order of writes within a batch is free: their
callers were all waiting at once).

Statements of one kind may be merged: those with the same ``merge`` (a Merger) in one
batch go to the server as ONE statement that ``Merger.combine`` makes of their items,
which answers for each of them as its own statement would have (the rows it changed
and its first row), so each caller's ``outcome`` reads what it always read. A
Merger's ``identity`` keeps apart items that must not share a statement (two changes
of one job): a repeated identity is sent on its own. If the merged statement is
refused, the batch runs again apart as above, each operation in its own form.

A batch of one runs without a savepoint (its transaction is its own). ``lanes``
batches may be in flight at once, each on its own pooled connection. A caller
cancelled before its batch starts is left out of it; one cancelled later still has
its write committed, as with any commit already under way.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from psycopg import pq

from ferryman.adapters.postgres.errors import translate_errors
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Mapping, Sequence
    from contextlib import AbstractAsyncContextManager

    import psycopg

    Connection = psycopg.AsyncConnection[Any]
    Operation = Callable[[Connection], Awaitable[Any]]

# Sent as statements in a pipeline (psycopg's transaction() would sync around each).
_BEGIN = "BEGIN"
_COMMIT = "COMMIT"
_ROLLBACK = "ROLLBACK"

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
# What a statement's outcome reads: the rows it changed and its first row.
Answer = tuple[int, "tuple[Any, ...] | None"]
# Each savepoint that writes takes a subtransaction id; past 64 in one transaction the
# server's per-backend cache overflows and every session's snapshots get slower.
GROUP_MAX_BATCH = 64
GROUP_LANES = 1


@dataclass(frozen=True, slots=True)
class Statement(Generic[T_co]):
    """One statement as an operation: ``outcome`` makes its value from the rows it
    changed and the first row it returned (None if none). It may raise only when the
    statement changed nothing: in a batch of statements it runs after the COMMIT."""

    query: str
    params: Mapping[str, Any]
    outcome: Callable[[int, tuple[Any, ...] | None], T_co]
    returns_row: bool = False
    # What runs instead when a batch runs apart (after a refused statement), if given.
    general: Callable[[Connection], Awaitable[T_co]] | None = None
    # Statements of one Merger in a batch are sent as one (module docstring), each
    # standing for its ``item``.
    merge: Merger | None = None
    item: Any = None
    # Makes ``params`` when the statement is sent as itself (not merged), if given:
    # work a merged statement would not use is not done.
    lazy: Callable[[], Mapping[str, Any]] | None = None

    def arguments(self) -> Mapping[str, Any]:
        return self.params if self.lazy is None else self.lazy()

    async def __call__(self, conn: Connection) -> T_co:
        cursor = conn.cursor()
        await cursor.execute(self.query, self.arguments())
        return await self._read(cursor)

    async def _read(self, cursor: psycopg.AsyncCursor[Any]) -> T_co:
        row = await cursor.fetchone() if self.returns_row else None
        return self.outcome(cursor.rowcount, row)


class Merger(Protocol):
    def identity(self, item: Any) -> Hashable:
        """Items with the same identity never share a merged statement."""
        ...

    def combine(self, items: Sequence[Any]) -> Statement[list[Answer]]:
        """One statement for these items (two or more), answering for each in order."""
        ...


def _merged(statements: Sequence[Statement[Any]]) -> list[tuple[Statement[Any], list[int]]]:
    """What to send for these statements: each with the indexes it answers for (one
    index: the statement itself; several: their merged statement)."""
    groups: dict[int, tuple[Merger, list[int]]] = {}
    seen: dict[int, set[Hashable]] = {}
    sent: list[tuple[Statement[Any], list[int]]] = []
    for i, statement in enumerate(statements):
        merger = statement.merge
        if merger is not None:
            identity = merger.identity(statement.item)
            taken = seen.setdefault(id(merger), set())
            if identity not in taken:
                taken.add(identity)
                groups.setdefault(id(merger), (merger, []))[1].append(i)
                continue
        sent.append((statement, [i]))
    for merger, members in groups.values():
        if len(members) == 1:
            sent.append((statements[members[0]], members))
        else:
            sent.append((merger.combine([statements[i].item for i in members]), members))
    return sent


async def _answers(
    statements: Sequence[Statement[Any]],
    sent: Statement[Any],
    members: list[int],
    cursor: psycopg.AsyncCursor[Any],
) -> list[tuple[int, Any, Exception | None]]:
    """Each member's value, or the error its outcome raised (it changed nothing: its
    caller's alone), from what the sent statement returned."""
    if len(members) == 1:
        try:
            return [(members[0], await sent._read(cursor), None)]
        except Exception as exc:  # noqa: BLE001 - handed to that statement's caller
            return [(members[0], None, exc)]
    answers: list[Answer] = await sent._read(cursor)
    values: list[tuple[int, Any, Exception | None]] = []
    for i, (rowcount, row) in zip(members, answers, strict=True):
        try:
            values.append((i, statements[i].outcome(rowcount, row), None))
        except Exception as exc:  # noqa: BLE001 - handed to that statement's caller
            values.append((i, None, exc))
    return values


@dataclass(slots=True)
class _Pending:
    operation: Operation
    future: asyncio.Future[Any]


class _RunApartError(Exception):
    """Leaves a batch run without savepoints (rolling it back): one operation raised."""


class _BatchFailedError(Exception):
    """Leaves the batch's transaction (rolling it back) carrying the outage."""

    def __init__(self, cause: StoreUnavailableError) -> None:
        super().__init__(str(cause))
        self.cause = cause


class GroupCommit:
    """Runs operations in shared transactions from ``transaction()`` (one per batch)."""

    def __init__(
        self,
        transaction: Callable[[], AbstractAsyncContextManager[Connection]],
        *,
        max_batch: int = GROUP_MAX_BATCH,
        lanes: int = GROUP_LANES,
        connection: Callable[[], AbstractAsyncContextManager[Connection]] | None = None,
    ) -> None:
        """``connection`` (a pooled connection in autocommit) lets a batch of statements
        go in one round trip; without it they share the batch's transaction."""
        if max_batch < 1 or lanes < 1:
            raise ValueError("max_batch and lanes must be at least 1")
        self._transaction = transaction
        self._connection = connection
        self._max_batch = max_batch
        self._lanes = lanes
        self._pending: list[_Pending] = []
        self._flushers: set[asyncio.Task[None]] = set()
        self._active = 0
        self.batches = 0
        self.operations = 0
        # Batches run again with a savepoint per operation because one raised.
        self.reruns = 0

    async def run(self, operation: Callable[[Connection], Awaitable[T]] | Statement[T]) -> T:
        """Run ``operation`` in the next batch's transaction; its value once committed."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._pending.append(_Pending(operation, future))
        if self._active < self._lanes:
            # Counted here and uncounted by the flusher itself as it finds nothing left
            # (not by a done callback, which runs later: an operation queued in between
            # would wait for a flusher that has already finished).
            self._active += 1
            task = asyncio.create_task(self._flush())
            self._flushers.add(task)
            task.add_done_callback(self._flushers.discard)
        return await future

    async def close(self) -> None:
        """Wait for the batches already in flight (their callers are waiting)."""
        while self._flushers:
            await asyncio.gather(*self._flushers, return_exceptions=True)

    async def _flush(self) -> None:
        try:
            while self._pending:
                batch = self._pending[: self._max_batch]
                del self._pending[: self._max_batch]
                # A caller cancelled before its batch starts is left out of it.
                live = [item for item in batch if not item.future.cancelled()]
                if live:
                    await self._commit(live)
        finally:
            self._active -= 1

    async def _commit(self, batch: list[_Pending]) -> None:
        try:
            try:
                if self._connection is not None and all(
                    isinstance(item.operation, Statement) for item in batch
                ):
                    outcomes = await self._run_in_one_trip(self._connection, batch)
                else:
                    outcomes = await self._run_together(batch)
            except _RunApartError:
                self.reruns += 1
                outcomes = await self._run_apart(batch)
        except _BatchFailedError as failed:
            outcomes = [(None, failed.cause)] * len(batch)
        except Exception as exc:  # noqa: BLE001 - the commit (or a lone operation) failed
            outcomes = [(None, exc)] * len(batch)
        except BaseException:
            # This flusher itself was cancelled (the loop is shutting down): its callers
            # must not wait for ever.
            for item in batch:
                item.future.cancel()
            raise
        self.batches += 1
        self.operations += len(batch)
        self._settle(batch, outcomes)

    async def _run_together(self, batch: list[_Pending]) -> list[tuple[Any, Exception | None]]:
        """Every operation in one transaction, no savepoints; _RunApartError (the
        transaction rolled back) when one of several raised anything but an outage."""
        if len(batch) == 1:
            async with self._transaction() as conn:
                return [(await batch[0].operation(conn), None)]
        values: dict[int, Any] = {}
        statements = [
            (i, item.operation)
            for i, item in enumerate(batch)
            if isinstance(item.operation, Statement)
        ]
        async with self._transaction() as conn:
            try:
                with translate_errors():
                    for i, item in enumerate(batch):
                        if not isinstance(item.operation, Statement):
                            values[i] = await item.operation(conn)
                    if statements:
                        values.update(await pipelined(conn, statements))
            except StoreUnavailableError as exc:
                raise _BatchFailedError(exc) from exc
            except Exception as exc:
                raise _RunApartError from exc
        return [(values[i], None) for i in range(len(batch))]

    @staticmethod
    async def _run_in_one_trip(
        connection: Callable[[], AbstractAsyncContextManager[Connection]], batch: list[_Pending]
    ) -> list[tuple[Any, Exception | None]]:
        """BEGIN, every statement and COMMIT in one pipeline; then each one's value."""
        statements: list[Statement[Any]] = [item.operation for item in batch]  # type: ignore[misc]
        sent = _merged(statements)
        async with connection() as conn:
            try:
                with translate_errors():
                    async with conn.pipeline() as pipeline:
                        await conn.execute(_BEGIN)
                        cursors = [conn.cursor() for _ in sent]
                        for (statement, _), cursor in zip(sent, cursors, strict=True):
                            await cursor.execute(statement.query, statement.arguments())
                        await conn.execute(_COMMIT)
                        await pipeline.sync()
            except StoreUnavailableError as exc:
                raise _BatchFailedError(exc) from exc
            except Exception as exc:
                # The server skipped what followed the refused statement, COMMIT
                # included: its transaction is aborted, and nothing of it committed.
                with translate_errors():
                    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
                        await conn.execute(_ROLLBACK)
                raise _RunApartError from exc
        outcomes: list[tuple[Any, Exception | None]] = [(None, None)] * len(statements)
        for (statement, members), cursor in zip(sent, cursors, strict=True):
            for i, value, error in await _answers(statements, statement, members, cursor):
                outcomes[i] = (value, error)
        return outcomes

    async def _run_apart(self, batch: list[_Pending]) -> list[tuple[Any, Exception | None]]:
        outcomes: list[tuple[Any, Exception | None]] = []
        async with self._transaction() as conn:
            for item in batch:
                outcomes.append(await _in_savepoint(conn, item.operation))
        return outcomes

    @staticmethod
    def _settle(
        batch: list[_Pending], outcomes: Sequence[tuple[Any, BaseException | None]]
    ) -> None:
        for item, (value, error) in zip(batch, outcomes, strict=True):
            if item.future.cancelled():
                continue
            if error is not None:
                item.future.set_exception(error)
            else:
                item.future.set_result(value)


async def pipelined(
    conn: Connection, statements: list[tuple[int, Statement[Any]]]
) -> dict[int, Any]:
    """Send every statement (those of one Merger as one), then read every result after
    one sync (in the caller's transaction); the values by the statements' keys. The
    first error an outcome raised is raised (the caller rolls back)."""
    keys = [key for key, _ in statements]
    plain = [statement for _, statement in statements]
    sent = _merged(plain)
    async with conn.pipeline() as pipeline:
        cursors = []
        for statement, _ in sent:
            cursor = conn.cursor()
            await cursor.execute(statement.query, statement.arguments())
            cursors.append(cursor)
        await pipeline.sync()
        values: dict[int, Any] = {}
        for (statement, members), cursor in zip(sent, cursors, strict=True):
            for i, value, error in await _answers(plain, statement, members, cursor):
                if error is not None:
                    raise error
                values[keys[i]] = value
        return values


async def _in_savepoint(conn: Connection, operation: Operation) -> tuple[Any, Exception | None]:
    """The operation's value, or the error that rolled back its savepoint alone."""
    if isinstance(operation, Statement) and operation.general is not None:
        operation = operation.general
    try:
        async with _savepoint(conn):
            return await operation(conn), None
    except StoreUnavailableError as exc:
        raise _BatchFailedError(exc) from exc
    except Exception as exc:  # noqa: BLE001 - handed to this operation's caller
        return None, exc


@contextlib.asynccontextmanager
async def _savepoint(conn: Connection) -> AsyncIterator[None]:
    with translate_errors():
        async with conn.transaction():
            yield
