"""Engines: a database URL's scheme names the adapters of every storage port.

``open_engine(url, ...)`` opens the engine the URL names (``sqlite:///path.db``,
``postgresql://...``, ``memory://``) as one ``async with``: every port it serves
(jobs, queue, keys, control, results kept in the database) over one connection
setup, closed together. Wiring, the contract suite, the integration tests and the
benchmarks all open engines here, so adding an engine is one entry in ``OPENERS``.

No Settings here: wiring passes what an engine needs as ``EngineOptions``.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.core.errors import FerrymanError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.limits import SharedLimits
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobStore

SQLITE_SCHEME = "sqlite://"
MEMORY_URL = "memory://"
POSTGRES_SCHEMES = ("postgresql://", "postgres://")
# Engines whose URLs are reserved but which this version does not ship.
_PLANNED_SCHEMES = ("aws://",)


class UnsupportedBackendError(FerrymanError):
    """This backend is not available in this version."""

    code = "unsupported_backend"


class InvalidUrlError(FerrymanError):
    """A database or results URL cannot be understood."""

    code = "invalid_url"


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """What an engine needs from the configuration."""

    max_receives: int = 10
    # Make the database if it is missing (serve, migrate); False only looks.
    create: bool = True
    sqlite_synchronous: str = "FULL"
    postgres_pool_min_size: int = 1
    postgres_pool_max_size: int = 10
    # How long to wait for a new connection, and for a free pooled one.
    postgres_connect_timeout_seconds: float = 5.0


@dataclass(slots=True)
class Engine:
    """Every storage port of one database, opened together."""

    name: str
    # Where it is, for people (a path; a URL without its password).
    location: str
    store: JobStore
    queue: JobQueue
    keys: ApiKeyStore
    control: ControlStore
    # Results kept in the database itself (FERRYMAN_RESULTS_URL=db).
    results: ResultStore
    # Limits every process shares (per-tenant API budgets); None when each process
    # keeps its own, as on SQLite (one `serve` process) and in memory.
    limits: SharedLimits | None = None


def engine_name(url: str) -> str:
    """Which engine a URL names; raises InvalidUrlError or UnsupportedBackendError."""
    if url.startswith(SQLITE_SCHEME):
        return "sqlite"
    if url == MEMORY_URL:
        return "memory"
    if url.startswith(POSTGRES_SCHEMES):
        return "postgresql"
    for scheme in _PLANNED_SCHEMES:
        if url.startswith(scheme):
            raise UnsupportedBackendError(
                f"FERRYMAN_DATABASE_URL={scheme}... is not available in this version; "
                "use sqlite:///path.db or postgresql://..."
            )
    raise InvalidUrlError(
        "FERRYMAN_DATABASE_URL must be sqlite:///path/to/file.db, "
        f"postgresql://user@host/dbname or memory://, got {_shown(url)!r}"
    )


def sqlite_path(database_url: str) -> str:
    """The file behind ``sqlite:///relative.db`` or ``sqlite:////absolute/path.db``."""
    if not database_url.startswith(SQLITE_SCHEME + "/"):
        raise InvalidUrlError(
            f"FERRYMAN_DATABASE_URL must look like sqlite:///path/to/file.db, got {database_url!r}"
        )
    path = database_url.removeprefix(SQLITE_SCHEME + "/")
    if not path:
        raise InvalidUrlError("FERRYMAN_DATABASE_URL names no file: use sqlite:///./ferryman.db")
    return path


def _shown(url: str) -> str:
    """A URL as messages may show it: never a password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url


@dataclass(frozen=True, slots=True)
class DatabaseProbe:
    """What the configured database holds, seen read-only."""

    path: str  # where it is: an absolute path, or a URL without its password
    exists: bool
    latest_version: int  # the schema version this ferryman writes
    schema_version: int | None = None  # None when missing or unreadable
    error: str | None = None  # why it could not be read
    # Whether this user could write, for engines that can tell without writing; None
    # for a file, whose permissions the caller checks itself.
    writable: bool | None = None
    unwritable_reason: str | None = None

    @property
    def pending_migrations(self) -> int:
        if self.schema_version is None:
            return 0
        return max(0, self.latest_version - self.schema_version)


async def probe_engine(url: str) -> DatabaseProbe:
    """Look at a database without creating, migrating or writing anything."""
    prober = PROBERS[engine_name(url)]
    return await prober(url)


async def _probe_sqlite(url: str) -> DatabaseProbe:
    return await asyncio.to_thread(_probe_sqlite_file, Path(sqlite_path(url)))


def _probe_sqlite_file(relative: Path) -> DatabaseProbe:
    """SQLite's read-only mode still makes the -wal and -shm files when they are absent.
    They are absent only when no process has the file open (the last one to close
    checkpoints the WAL into the file and deletes them), so then the file is read as
    immutable, which creates nothing and, with no writer, sees all there is."""
    import sqlite3

    from ferryman.adapters.sqlite.migrations import applied_version, latest_version

    path = relative.resolve()
    latest = latest_version()
    if not path.is_file():
        return DatabaseProbe(path=str(path), exists=path.exists(), latest_version=latest)
    in_use = all(Path(f"{path}{suffix}").exists() for suffix in ("-wal", "-shm"))
    uri = f"{path.as_uri()}?mode=ro" + ("" if in_use else "&immutable=1")
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=5.0)
        try:
            version = applied_version(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return DatabaseProbe(
            path=str(path), exists=True, latest_version=latest, error=f"{type(exc).__name__}: {exc}"
        )
    return DatabaseProbe(path=str(path), exists=True, latest_version=latest, schema_version=version)


async def _probe_memory(url: str) -> DatabaseProbe:
    return DatabaseProbe(path=url, exists=True, latest_version=0, schema_version=0)


async def _probe_postgres(url: str) -> DatabaseProbe:
    """Connect once, read the schema version and the role's rights, write nothing. A
    server that cannot be reached, or a database that does not exist, is reported."""
    import psycopg

    from ferryman.adapters.postgres.inspection import inspect, is_missing_database
    from ferryman.adapters.postgres.migrations import latest_version

    shown, latest = _shown(url), latest_version()
    try:
        seen = await inspect(url)
    except psycopg.OperationalError as exc:
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return DatabaseProbe(
            path=shown,
            exists=not is_missing_database(exc),
            latest_version=latest,
            error=f"postgresql: {reason}",
        )
    return DatabaseProbe(
        path=shown,
        exists=True,
        latest_version=latest,
        schema_version=seen.schema_version,
        writable=seen.writable,
        unwritable_reason=seen.unwritable_reason,
    )


@asynccontextmanager
async def open_engine(
    url: str, *, clock: Clock, options: EngineOptions | None = None
) -> AsyncIterator[Engine]:
    """Open the engine ``url`` names; close it (and every port) on exit."""
    opener = OPENERS[engine_name(url)]
    async with opener(url, clock, options or EngineOptions()) as engine:
        yield engine


@asynccontextmanager
async def _open_sqlite(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    from ferryman.adapters.sqlite import (
        SqliteApiKeyStore,
        SqliteControlStore,
        SqliteDatabase,
        SqliteJobQueue,
        SqliteJobStore,
        SqliteResultStore,
    )

    path = sqlite_path(url)
    db = await SqliteDatabase.open(
        path, synchronous=options.sqlite_synchronous, create=options.create
    )
    location = path if path == ":memory:" else str(await asyncio.to_thread(Path(path).resolve))
    try:
        yield Engine(
            name="sqlite",
            location=location,
            store=SqliteJobStore(db, clock=clock),
            queue=SqliteJobQueue(db, clock=clock, max_receives=options.max_receives),
            keys=SqliteApiKeyStore(db),
            control=SqliteControlStore(db),
            results=SqliteResultStore(db),
        )
    finally:
        await db.close()


@asynccontextmanager
async def _open_memory(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    from ferryman.adapters.memory import (
        InMemoryApiKeyStore,
        InMemoryControlStore,
        InMemoryJobQueue,
        InMemoryJobStore,
        InMemoryResultStore,
    )

    queue = InMemoryJobQueue(clock=clock, max_receives=options.max_receives)
    yield Engine(
        name="memory",
        location="in this process's memory",
        store=InMemoryJobStore(queue=queue),
        queue=queue,
        keys=InMemoryApiKeyStore(),
        control=InMemoryControlStore(),
        results=InMemoryResultStore(),
    )


@asynccontextmanager
async def _open_postgres(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    from ferryman.adapters.postgres import (
        PostgresApiKeyStore,
        PostgresControlStore,
        PostgresDatabase,
        PostgresJobQueue,
        PostgresJobStore,
        PostgresResultStore,
        PostgresSharedLimits,
    )

    # A missing database is created when allowed (and the role may); its schema is
    # made or upgraded here, under an advisory lock, whichever process comes first.
    db = await PostgresDatabase.open(
        url,
        min_size=options.postgres_pool_min_size,
        max_size=options.postgres_pool_max_size,
        connect_timeout_seconds=options.postgres_connect_timeout_seconds,
        create=options.create,
    )
    try:
        yield Engine(
            name="postgresql",
            location=_shown(url),
            store=PostgresJobStore(db, clock=clock),
            queue=PostgresJobQueue(db, clock=clock, max_receives=options.max_receives),
            keys=PostgresApiKeyStore(db),
            control=PostgresControlStore(db),
            results=PostgresResultStore(db),
            limits=PostgresSharedLimits(db),
        )
    finally:
        await db.close()


OPENERS: dict[str, Callable[[str, Clock, EngineOptions], AbstractAsyncContextManager[Engine]]] = {
    "sqlite": _open_sqlite,
    "memory": _open_memory,
    "postgresql": _open_postgres,
}

PROBERS: dict[str, Callable[[str], Awaitable[DatabaseProbe]]] = {
    "sqlite": _probe_sqlite,
    "memory": _probe_memory,
    "postgresql": _probe_postgres,
}
