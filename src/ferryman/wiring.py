"""Wiring: the one module that reads Settings and builds adapters, providers and services.

``open_runtime(settings)`` opens the engine named by FERRYMAN_DATABASE_URL and
FERRYMAN_RESULTS_URL, builds every service on top of it, and closes the engine on
exit. Entry points (CLI commands, the HTTP app, tests) take what they need from
the Runtime and never import an adapter themselves.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sqlite3
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.adapters.files import FileResultStore
from ferryman.adapters.sqlite import (
    SqliteApiKeyStore,
    SqliteControlStore,
    SqliteDatabase,
    SqliteJobQueue,
    SqliteJobStore,
    SqliteResultStore,
)
from ferryman.adapters.sqlite.migrations import applied_version, latest_version
from ferryman.config import SIM, ConfigurationError
from ferryman.core.clock import SystemClock
from ferryman.core.errors import FerrymanError
from ferryman.core.ids import new_worker_id
from ferryman.core.models import ModelAlias, Prices
from ferryman.observability import metrics
from ferryman.providers.anthropic import DEFAULT_ANTHROPIC_BASE_URL, AnthropicProvider
from ferryman.providers.bedrock import BedrockProvider, BedrockUnavailableError
from ferryman.providers.openai import DEFAULT_OPENAI_BASE_URL, OpenAIProvider
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.access import ApiKeys
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, TenantQuotas
from ferryman.services.jobs import JobQueries
from ferryman.services.ledger import JobLedger
from ferryman.services.operations import Operations
from ferryman.services.results import ResultWriter
from ferryman.services.retention import DEFAULT_BATCH_SIZE as DEFAULT_PURGE_BATCH_SIZE
from ferryman.services.retention import Retention
from ferryman.services.sweeper import Sweeper
from ferryman.services.worker import Worker
from ferryman.tasks import builtin_tasks

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.config import ProviderSettings, Settings
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.provider import ModelProvider
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.tasks import TaskRegistry

SQLITE_SCHEME = "sqlite://"
FILE_SCHEME = "file://"
INLINE_RESULTS = "db"
# Engines the design names but this version does not ship yet.
_PLANNED_SCHEMES = ("postgresql://", "postgres://", "aws://", "s3://")


class UnsupportedBackendError(FerrymanError):
    """This backend is not available in this version."""

    code = "unsupported_backend"


class InvalidUrlError(FerrymanError):
    """A database or results URL cannot be understood."""

    code = "invalid_url"


def _refuse_planned(url: str, variable: str) -> None:
    for scheme in _PLANNED_SCHEMES:
        if url.startswith(scheme):
            raise UnsupportedBackendError(
                f"{variable}={scheme}... is not available in this version; "
                f"use sqlite:///path.db (database) and file://dir or db (results)"
            )


def sqlite_path(database_url: str) -> str:
    """The file behind ``sqlite:///relative.db`` or ``sqlite:////absolute/path.db``."""
    _refuse_planned(database_url, "FERRYMAN_DATABASE_URL")
    if not database_url.startswith(SQLITE_SCHEME + "/"):
        raise InvalidUrlError(
            f"FERRYMAN_DATABASE_URL must look like sqlite:///path/to/file.db, got {database_url!r}"
        )
    path = database_url.removeprefix(SQLITE_SCHEME + "/")
    if not path:
        raise InvalidUrlError("FERRYMAN_DATABASE_URL names no file: use sqlite:///./ferryman.db")
    return path


def results_directory(results_url: str) -> str | None:
    """The directory of ``file://dir``, or None for results kept in the database."""
    _refuse_planned(results_url, "FERRYMAN_RESULTS_URL")
    if results_url == INLINE_RESULTS:
        return None
    if not results_url.startswith(FILE_SCHEME):
        raise InvalidUrlError(
            f"FERRYMAN_RESULTS_URL must be file://directory or db, got {results_url!r}"
        )
    directory = results_url.removeprefix(FILE_SCHEME)
    if not directory:
        raise InvalidUrlError("FERRYMAN_RESULTS_URL names no directory: use file://./results")
    return directory


def check_urls(settings: Settings) -> None:
    """Raise UnsupportedBackendError or InvalidUrlError before anything is opened."""
    sqlite_path(settings.database_url)
    results_directory(settings.results_url)


@dataclass(slots=True)
class Runtime:
    """Everything one process needs, built from Settings over one open engine."""

    settings: Settings
    clock: Clock
    store: JobLedger
    queue: JobQueue
    results: ResultStore
    result_writer: ResultWriter
    keys: ApiKeyStore
    control: ControlStore
    tasks: TaskRegistry
    intake: Intake
    jobs: JobQueries
    operations: Operations
    api_keys: ApiKeys
    database_path: str
    results_location: str
    catalog: ModelCatalog

    async def prepare_storage(self) -> None:
        """Make the results directory (owner-only) if there is none, so a process that
        serves is ready, and ``doctor`` agrees, before its first result is written."""
        directory = results_directory(self.settings.results_url)
        if directory is not None:
            await asyncio.to_thread(Path(directory).mkdir, mode=0o700, parents=True, exist_ok=True)

    def new_worker(self, concurrency: int | None = None) -> Worker:
        s = self.settings
        return Worker(
            store=self.store,
            queue=self.queue,
            results=self.result_writer,
            catalog=self.catalog,
            tasks=self.tasks,
            control=self.control,
            clock=self.clock,
            lease=s.lease_policy(),
            retry=s.retry_policy(),
            concurrency=concurrency or s.worker_concurrency,
            provider_timeout_seconds=s.provider_timeout_seconds,
            attempt_timeout_seconds=s.attempt_timeout_seconds,
            worker_id=new_worker_id(socket.gethostname(), os.getpid()),
            failpoints=s.failpoint_set(),
            shutdown_grace_seconds=s.shutdown_grace_seconds,
            receive_wait_seconds=s.receive_wait_seconds,
            max_receives=s.max_receives,
            tenant_max_share=s.tenant_max_share,
            cancel_check_seconds=s.cancel_check_seconds,
        )

    def new_retention(self, *, batch_size: int = DEFAULT_PURGE_BATCH_SIZE) -> Retention:
        return Retention(
            store=self.store, clock=self.clock, results=self.results, batch_size=batch_size
        )

    def new_sweeper(self) -> Sweeper:
        return Sweeper(
            store=self.store,
            queue=self.queue,
            clock=self.clock,
            interval_seconds=self.settings.sweep_interval_seconds,
            stalled_after_seconds=self.settings.stalled_seconds,
            retention=self.new_retention(),
            retention_seconds=self.settings.retention_seconds,
        )


def _results_store(settings: Settings, db: SqliteDatabase) -> tuple[ResultStore, str]:
    directory = results_directory(settings.results_url)
    if directory is None:
        return SqliteResultStore(db), "in the database"
    # The store creates its directory on the first put (fsyncing each new level).
    return FileResultStore(directory), str(Path(directory).resolve())


def build_catalog(settings: Settings) -> ModelCatalog:
    """Every configured provider and model alias, and the simulated model as ``sim``
    (provider and alias) unless the configuration names something else so."""
    providers: dict[str, ModelProvider] = {SIM: SimulatedProvider(scripts=settings.sim_scripts)}
    for name, provider in settings.providers.items():
        providers[name] = _provider(name, provider, settings)
    aliases = {SIM: ModelAlias(name=SIM, provider=SIM, model=SIM)}
    for name, model in settings.models.items():
        aliases[name] = ModelAlias(
            name=name,
            provider=model.provider,
            model=model.model,
            prices=Prices(
                input_per_mtok_usd=model.input_price_per_mtok,
                output_per_mtok_usd=model.output_price_per_mtok,
            ),
            fallbacks=tuple(model.fallbacks),
        )
    return ModelCatalog(aliases=aliases.values(), providers=providers.values())


def _provider(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    """One provider adapter from its ``[providers.NAME]`` table. A key is read from the
    variable named by ``api_key_env`` now, so a missing one stops the process at start."""
    if provider.kind == SIM:
        return SimulatedProvider(name=name, scripts=settings.sim_scripts)
    if provider.kind == "openai":
        # OpenAI itself needs a key (OPENAI_API_KEY unless named); a server at another
        # base_url (Ollama, vLLM, ...) may need none.
        default_env = None if provider.base_url else "OPENAI_API_KEY"
        return OpenAIProvider(
            name=name,
            api_key=_api_key(name, provider, default_env=default_env),
            base_url=provider.base_url or DEFAULT_OPENAI_BASE_URL,
            structured_output=provider.structured_output,
            stream=provider.stream,
            max_connections=provider.max_concurrency,
        )
    if provider.kind == "anthropic":
        key = _api_key(name, provider, default_env="ANTHROPIC_API_KEY")
        assert key is not None  # a default variable is named, so a key was found
        return AnthropicProvider(
            name=name,
            api_key=key,
            base_url=provider.base_url or DEFAULT_ANTHROPIC_BASE_URL,
            stream=provider.stream,
            max_connections=provider.max_concurrency,
        )
    try:
        return BedrockProvider(
            name=name,
            region=provider.region,
            timeout_seconds=provider.timeout_seconds or settings.provider_timeout_seconds,
            max_connections=provider.max_concurrency,
        )
    except BedrockUnavailableError as exc:
        raise ConfigurationError(f"providers.{name}: {exc.message}") from None


def _api_key(name: str, provider: ProviderSettings, *, default_env: str | None) -> str | None:
    """The key from the variable ``api_key_env`` names (else ``default_env``); None when
    neither names one. The key itself is never in a file, a message or a log."""
    variable = provider.api_key_env or default_env
    if variable is None:
        return None
    key = os.environ.get(variable, "").strip()
    if not key:
        raise ConfigurationError(
            f"providers.{name}: the API key is read from the environment variable "
            f"{variable}, which is not set (set it, or name another with api_key_env)"
        )
    return key


@asynccontextmanager
async def open_runtime(settings: Settings, *, clock: Clock | None = None) -> AsyncIterator[Runtime]:
    """Open the configured engine, build the services over it, close it on exit."""
    check_urls(settings)
    path = sqlite_path(settings.database_url)
    db = await SqliteDatabase.open(path, synchronous=settings.sqlite_synchronous)
    runtime = _build(settings, db, path, clock or SystemClock())
    try:
        yield runtime
    finally:
        if isinstance(runtime.results, FileResultStore):
            await asyncio.to_thread(runtime.results.close)
        await db.close()


def _build(settings: Settings, db: SqliteDatabase, path: str, clock: Clock) -> Runtime:
    metrics.configure(tenant_labels=settings.metrics_tenant_labels)
    store = JobLedger(SqliteJobStore(db, clock=clock))
    queue = SqliteJobQueue(db, clock=clock, max_receives=settings.max_receives)
    results, results_location = _results_store(settings, db)
    keys = SqliteApiKeyStore(db)
    control = SqliteControlStore(db)
    tasks = builtin_tasks()
    catalog = build_catalog(settings)
    # One per process: its view of whether results can be written is what stops this
    # process's workers taking new calls, and what its /readyz reports.
    result_writer = ResultWriter(results)
    return Runtime(
        settings=settings,
        clock=clock,
        store=store,
        queue=queue,
        results=results,
        result_writer=result_writer,
        keys=keys,
        control=control,
        tasks=tasks,
        catalog=catalog,
        intake=Intake(
            store=store,
            queue=queue,
            tasks=tasks,
            control=control,
            clock=clock,
            idempotency_retention_seconds=settings.idempotency_retention_seconds,
            catalog=catalog,
            quotas=TenantQuotas(
                max_backlog=settings.tenant_max_backlog,
                max_stored_jobs=settings.tenant_max_stored_jobs,
            ),
            sim_scripts=settings.sim_scripts,
        ),
        jobs=JobQueries(
            store=store, results=results, clock=clock, list_max_bytes=settings.list_max_bytes
        ),
        operations=Operations(
            store=store, queue=queue, control=control, clock=clock, results=result_writer
        ),
        api_keys=ApiKeys(keys=keys, clock=clock),
        database_path=path if path == ":memory:" else str(Path(path).resolve()),
        results_location=results_location,
    )


# --- looking without touching: doctor, and commands that must not create a database ---


@dataclass(frozen=True, slots=True)
class DatabaseProbe:
    """What the configured database file holds, seen read-only."""

    path: str  # absolute, as every message names it
    exists: bool
    latest_version: int  # the schema version this ferryman writes
    schema_version: int | None = None  # None when missing or unreadable
    error: str | None = None  # why it could not be read

    @property
    def pending_migrations(self) -> int:
        if self.schema_version is None:
            return 0
        return max(0, self.latest_version - self.schema_version)


def database_location(settings: Settings) -> Path:
    """The absolute path of the configured SQLite file (relative to the working directory)."""
    return Path(sqlite_path(settings.database_url)).resolve()


def results_location(settings: Settings) -> Path | None:
    """The absolute results directory, or None when results are kept in the database."""
    directory = results_directory(settings.results_url)
    return None if directory is None else Path(directory).resolve()


def probe_database(settings: Settings) -> DatabaseProbe:
    """Look at the database without creating, migrating or writing anything (blocking).

    SQLite's read-only mode still makes the -wal and -shm files when they are absent.
    They are absent only when no process has the file open (the last one to close
    checkpoints the WAL into the file and deletes them), so then the file is read as
    immutable, which creates nothing and, with no writer, sees all there is.
    """
    path = database_location(settings)
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
