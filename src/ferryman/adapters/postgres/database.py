"""One PostgreSQL database shared by every ferryman process, through a connection pool.

Every operation borrows a pooled connection for one transaction and gives it back.
The pool checks a connection before lending it, so one the server dropped (a
restart, ``pg_terminate_backend``) is replaced instead of failing the operation
(without a round trip while the connection is quiet, see _Checker), and it reconnects with backoff while the server is away; meanwhile operations fail
fast with StoreUnavailableError (an operation waits at most ``pool_timeout_seconds``
for a connection), which is what ``/readyz`` reports. A dedicated connection LISTENs
for new messages and cancel requests (listener.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import select
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg import pq
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool

from ferryman.adapters.postgres.errors import translate_errors
from ferryman.adapters.postgres.grouping import GroupCommit
from ferryman.adapters.postgres.inspection import create_database, is_missing_database
from ferryman.adapters.postgres.listener import Listener
from ferryman.adapters.postgres.migrations import migrate
from ferryman.adapters.wakeup import Wakeup

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping

Row = dict[str, Any]
T = TypeVar("T")


class PostgresDatabase:
    """Async access to one database. Build it with ``await PostgresDatabase.open(url)``."""

    def __init__(
        self,
        pool: AsyncConnectionPool,
        *,
        listener: Listener | None,
        checker: _Checker | None = None,
    ) -> None:
        self._pool = pool
        self._checker = checker
        self._listener = listener
        # Queue consumers of this process wait on it; NOTIFYs and own sends nudge it.
        self.wakeup = listener.wakeup if listener is not None else Wakeup()
        # Job writes, acks and results ready at the same moment share one commit.
        self.group = GroupCommit(self.transaction, connection=self.connection)
        # Cancel watchers of this process wait on it; NOTIFYs and own cancels nudge it.
        self.cancel_wakeup = listener.cancel_wakeup if listener is not None else Wakeup()
        # Status watchers (clients' waits) of this process wait on it; NOTIFYs and own
        # status changes nudge it.
        self.status_wakeup = listener.status_wakeup if listener is not None else Wakeup()

    @classmethod
    async def open(
        cls,
        url: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        connect_timeout_seconds: float = 5.0,
        pool_timeout_seconds: float = 2.0,
        listen: bool = True,
        create: bool = True,
    ) -> PostgresDatabase:
        """Connect, bring the schema up to date, open the pool and the listener.

        With ``create`` a database the URL names that does not exist yet is created
        (when the role may). Raises StoreUnavailableError when the server cannot be
        reached."""
        if not 1 <= min_size <= max_size:
            raise ValueError("the pool needs 1 <= min_size <= max_size")
        connect: dict[str, Any] = {
            "autocommit": True,
            "connect_timeout": max(1, round(connect_timeout_seconds)),
        }
        await _migrate(url, connect, create=create)
        checker = _Checker()
        pool = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            kwargs=connect,
            open=False,
            # Before lending: a connection the server dropped is replaced here instead
            # of failing the caller's operation.
            check=checker.check,
            timeout=pool_timeout_seconds,
            name="ferryman",
        )
        checker.pool = pool
        with translate_errors():
            try:
                await pool.open(wait=True, timeout=connect_timeout_seconds + pool_timeout_seconds)
            except BaseException:
                await pool.close()
                raise
        listener = None
        if listen:
            listener = Listener(url, connect_kwargs=connect)
            listener.start()
        return cls(pool, listener=listener, checker=checker)

    @property
    def listening(self) -> bool:
        """True while the listening connection is up (other processes' sends wake us)."""
        return self._listener is not None and self._listener.connected

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection inside one transaction, committed on a clean exit."""
        with translate_errors():
            async with self._pool.connection() as conn:
                with self._watched(conn):
                    async with conn.transaction():
                        yield conn

    @contextlib.asynccontextmanager
    async def connection(
        self, *, timeout_seconds: float | None = None
    ) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled connection in autocommit: each statement is its own transaction."""
        with translate_errors():
            async with self._pool.connection(timeout=timeout_seconds) as conn:
                with self._watched(conn):
                    yield conn

    @contextlib.contextmanager
    def _watched(self, conn: psycopg.AsyncConnection[Any]) -> Iterator[None]:
        """A connection found dead in use has the pool check every idle one at once."""
        try:
            yield
        except psycopg.OperationalError:
            if conn.broken and self._checker is not None:
                self._checker.sweep()
            raise

    async def fetch_all(
        self, query: str, params: Mapping[str, Any] | None = None, *, retry: bool = True
    ) -> list[Row]:
        """The rows of one read. ``retry``: once more on another connection if this one
        turns out dead (see _read); False for a statement that writes."""
        return await self._read(fetch_all, query, params, retry=retry)

    async def fetch_one(
        self, query: str, params: Mapping[str, Any] | None = None, *, retry: bool = True
    ) -> Row | None:
        return await self._read(fetch_one, query, params, retry=retry)

    async def _read(
        self,
        read: Callable[[psycopg.AsyncConnection[Any], str, Mapping[str, Any] | None], Awaitable[T]],
        query: str,
        params: Mapping[str, Any] | None,
        *,
        retry: bool,
    ) -> T:
        """Run the read; if its connection was dead (backends terminated a moment ago, so
        recently that a socket still looked quiet when lent), run it again on another: a
        read changes nothing, so running it twice is harmless. Each dead connection is
        discarded as it comes back, so the pool runs out of them within max_size tries."""
        for _ in range(self._pool.max_size):
            with translate_errors():
                async with self._pool.connection() as conn:
                    try:
                        return await read(conn, query, params)
                    except psycopg.OperationalError:
                        if not conn.broken:
                            raise
                        if self._checker is not None:
                            self._checker.sweep()
                        if not retry:
                            raise
        async with self.connection() as conn:
            return await read(conn, query, params)

    async def execute(self, query: str, params: Mapping[str, Any] | None = None) -> int:
        """Run one statement in its own transaction; the rows it changed."""
        async with self.connection() as conn:
            return await execute(conn, query, params)

    async def close(self) -> None:
        await self.group.close()
        if self._listener is not None:
            await self._listener.close()
        if self._checker is not None:
            await self._checker.close()
        await self._pool.close()


class _Checker:
    """The pool's check before lending, which on finding one dead connection checks
    every idle one at once. A restart or a failover kills them all; the pool alone
    would find them one per lend, sleeping with backoff (1 s, 2 s, ...) in between.

    An idle pooled connection is sent nothing by a healthy server (it LISTENs to
    nothing), while a backend that is terminated or shut down sends its FATAL error
    and closes the socket. So a connection whose socket has nothing to read is lent
    without a round trip (one poll of the socket), and only one with something
    waiting gets the empty round trip that reads it. That round trip was one more per
    transaction and per read: a third of a job's round trips on the worker's path."""

    def __init__(self) -> None:
        self.pool: AsyncConnectionPool | None = None
        self._sweep: asyncio.Task[None] | None = None

    async def check(self, conn: psycopg.AsyncConnection[Any]) -> None:
        if _quiet(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            self.sweep()
            raise

    def sweep(self) -> None:
        """Check every idle connection now (one sweep at a time)."""
        if self.pool is not None and (self._sweep is None or self._sweep.done()):
            self._sweep = asyncio.create_task(self.pool.check())

    async def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            with contextlib.suppress(asyncio.CancelledError, psycopg.Error):
                await self._sweep


def _quiet(conn: psycopg.AsyncConnection[Any]) -> bool:
    """True when the connection is open, idle and nothing has arrived on its socket."""
    if conn.closed or conn.broken or conn.pgconn.status != pq.ConnStatus.OK:
        return False
    if conn.info.transaction_status != pq.TransactionStatus.IDLE:
        return False
    try:
        return not _readable(conn.fileno())
    except (OSError, ValueError):
        return False


def _readable(fd: int) -> bool:
    """Whether the socket has something to read (or was closed), without waiting."""
    if hasattr(select, "poll"):  # no limit on the descriptor's number, unlike select
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


async def _migrate(url: str, connect: dict[str, Any], *, create: bool) -> None:
    with translate_errors():
        try:
            conn = await psycopg.AsyncConnection.connect(url, **connect)
        except psycopg.OperationalError as exc:
            if not (create and is_missing_database(exc)):
                raise
            await create_database(url)
            conn = await psycopg.AsyncConnection.connect(url, **connect)
        async with conn:
            await migrate(conn)


async def fetch_all(
    conn: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any] | None = None
) -> list[Row]:
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(query, params)
    return await cursor.fetchall()


async def fetch_one(
    conn: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any] | None = None
) -> Row | None:
    cursor = conn.cursor(row_factory=dict_row)
    await cursor.execute(query, params)
    return await cursor.fetchone()


async def execute(
    conn: psycopg.AsyncConnection[Any], query: str, params: Mapping[str, Any] | None = None
) -> int:
    cursor = await conn.execute(query, params)
    return cursor.rowcount
