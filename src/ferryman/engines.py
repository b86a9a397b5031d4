"""Engines: a database URL's scheme names the adapters of every storage port.

``open_engine(url, ...)`` opens the engine the URL names (``sqlite:///path.db``,
``postgresql://...``, ``aws://NAME``, ``memory://``) as one ``async with``: every port it serves
(jobs, queue, keys, control, results kept in the database, webhook secrets, shared
limits) over one connection setup, closed together. ``probe_engine(url)`` looks at its database
without writing. Wiring, the contract suite, the integration and service tests and
the benchmarks all open engines here (tests/unit/test_engine_registry.py holds it).

An engine is one package under ``ferryman/adapters/`` whose ``engine.py`` exposes
``check_url``, ``open_engine`` and ``probe_database``, plus one ``EngineEntry`` in ``ENGINES`` below
(docs/architecture.md, "Adding an engine"). Its module is imported only when its
URL is used, so ``memory://`` never imports a database driver.

Where results go (FERRYMAN_RESULTS_URL: the engine's own, or a directory) is
result_stores.py. No Settings here: wiring passes what an engine needs as
``EngineOptions``.
"""

from __future__ import annotations

import importlib
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast

from ferryman.core.errors import FerrymanError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from contextlib import AbstractAsyncContextManager

    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.limits import SharedLimits
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobStore
    from ferryman.ports.webhooks import WebhookSecretStore

# Engines whose URLs are reserved but which this version does not ship.
_PLANNED_SCHEMES: tuple[str, ...] = ()


class UnsupportedBackendError(FerrymanError):
    """This backend is not available in this version."""

    code = "unsupported_backend"


class InvalidUrlError(FerrymanError):
    """A database or results URL cannot be understood."""

    code = "invalid_url"


@dataclass(frozen=True, slots=True)
class EngineOptions:
    """What an engine needs from the configuration; each engine reads its own fields.

    Every field's default is production's (tests/unit/test_defaults_agree.py holds
    those named like a setting to Settings). Fields marked "tests and tools" are never
    set by wiring: they give the contract suite, the tests and the benchmarks the
    shapes and speeds they need through the same door production uses."""

    max_receives: int = 10
    # Make the database if it is missing (serve, migrate); False only looks.
    create: bool = True
    sqlite_synchronous: str = "FULL"
    postgres_pool_min_size: int = 1
    postgres_pool_max_size: int = 10
    # How long to wait for a new connection, and for a free pooled one.
    postgres_connect_timeout_seconds: float = 5.0
    # Tests and tools: how often an idle queue looks for due messages between nudges
    # (the adapters' own defaults).
    sqlite_poll_interval_seconds: float = 0.05
    postgres_poll_interval_seconds: float = 0.25
    # Tests and tools: the most writes the SQLite writer commits together.
    sqlite_max_batch: int = 256
    # Tests and tools: False opens PostgreSQL without its LISTEN connection (a process
    # that never receives from the queue).
    postgres_listen: bool = True
    # Tests and tools: the memory job store without its own queue, so intake takes
    # the outbox path (the shape of an engine like DynamoDB + SQS). The contract
    # suite's ``memory-outbox`` case.
    memory_outbox: bool = False


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
    # Each tenant's webhook signing secrets (sealed), beside its jobs.
    webhook_secrets: WebhookSecretStore
    # Limits every process shares (per-tenant API budgets); None when each process
    # keeps its own, as on SQLite (one `serve` process) and in memory.
    limits: SharedLimits | None = None
    # For tests and tools only, never a service: the engine's own database handle
    # (SqliteDatabase, PostgresDatabase; None in memory), to write what no port can
    # (a message body from another version) or to look underneath one.
    database: object | None = None


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


class EngineModule(Protocol):
    """What an engine package's ``engine.py`` exposes."""

    def check_url(self, url: str) -> None:
        """Raise InvalidUrlError unless this engine can use the URL (nothing opened)."""

    def open_engine(
        self, url: str, clock: Clock, options: EngineOptions
    ) -> AbstractAsyncContextManager[Engine]:
        """Open every port; close them all on exit."""

    async def probe_database(self, url: str) -> DatabaseProbe:
        """Look at the database without creating, migrating or writing anything."""


@dataclass(frozen=True, slots=True)
class EngineEntry:
    """One engine in the registry: the URL schemes it answers and the module that opens it."""

    name: str
    # URL prefixes it answers ("sqlite://").
    schemes: tuple[str, ...]
    # A URL of its shape, for the message that names every engine.
    example: str
    # The engine package's engine.py, imported on first use (drivers are optional).
    module: str
    # Processes on several machines share it, so results default to the database
    # (a local directory would be one machine's only).
    shared: bool = False

    def engine_module(self) -> EngineModule:
        return cast("EngineModule", importlib.import_module(self.module))

    def check_url(self, url: str) -> None:
        self.engine_module().check_url(url)

    def open(
        self, url: str, clock: Clock, options: EngineOptions
    ) -> AbstractAsyncContextManager[Engine]:
        return self.engine_module().open_engine(url, clock, options)

    async def probe(self, url: str) -> DatabaseProbe:
        return await self.engine_module().probe_database(url)


ENGINES: tuple[EngineEntry, ...] = (
    EngineEntry(
        name="sqlite",
        schemes=("sqlite://",),
        example="sqlite:///path/to/file.db",
        module="ferryman.adapters.sqlite.engine",
    ),
    EngineEntry(
        name="postgresql",
        schemes=("postgresql://", "postgres://"),
        example="postgresql://user@host/dbname",
        module="ferryman.adapters.postgres.engine",
        shared=True,
    ),
    EngineEntry(
        name="aws",
        schemes=("aws://",),
        example="aws://NAME",
        module="ferryman.adapters.aws.engine",
        shared=True,
    ),
    EngineEntry(
        name="memory",
        schemes=("memory://",),
        example="memory://",
        module="ferryman.adapters.memory.engine",
    ),
)


def engine_entry(url: str) -> EngineEntry:
    """The registry entry a URL's scheme names; raises InvalidUrlError (naming the
    engines there are) or UnsupportedBackendError (a scheme reserved for later)."""
    for entry in ENGINES:
        if url.startswith(entry.schemes):
            return entry
    for scheme in _PLANNED_SCHEMES:
        if url.startswith(scheme):
            raise UnsupportedBackendError(
                f"FERRYMAN_DATABASE_URL={scheme}... is not available in this version; "
                "use sqlite:///path.db or postgresql://..."
            )
    *others, last = [entry.example for entry in ENGINES]
    raise InvalidUrlError(
        f"FERRYMAN_DATABASE_URL must be {', '.join(others)} or {last}, got {shown_url(url)!r}"
    )


def engine_name(url: str) -> str:
    """Which engine a URL's scheme names; raises InvalidUrlError or
    UnsupportedBackendError. The rest of the URL is the engine's to check."""
    return engine_entry(url).name


def check_engine_url(url: str) -> None:
    """Raise InvalidUrlError or UnsupportedBackendError before anything is opened."""
    engine_entry(url).check_url(url)


def shown_url(url: str) -> str:
    """A URL as messages may show it: never a password."""
    scheme, sep, rest = url.partition("://")
    if not sep or "@" not in rest:
        return url
    credentials, _, host = rest.rpartition("@")
    user = credentials.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in credentials else url


async def probe_engine(url: str) -> DatabaseProbe:
    """Look at a database without creating, migrating or writing anything."""
    return await engine_entry(url).probe(url)


@asynccontextmanager
async def open_engine(
    url: str, *, clock: Clock, options: EngineOptions | None = None
) -> AsyncIterator[Engine]:
    """Open the engine ``url`` names; close it (and every port) on exit."""
    entry = engine_entry(url)
    entry.check_url(url)
    async with entry.open(url, clock, options or EngineOptions()) as engine:
        yield engine
