"""The SQLite engine's entry in the registry (engines.py): its URL, opener and prober."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.control import SqliteControlStore
from ferryman.adapters.sqlite.database import SqliteDatabase
from ferryman.adapters.sqlite.keys import SqliteApiKeyStore
from ferryman.adapters.sqlite.queue import SqliteJobQueue
from ferryman.adapters.sqlite.results import SqliteResultStore
from ferryman.adapters.sqlite.store import SqliteJobStore
from ferryman.adapters.sqlite.webhook_secrets import SqliteWebhookSecretStore
from ferryman.engines import DatabaseProbe, Engine, InvalidUrlError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.core.clock import Clock
    from ferryman.engines import EngineOptions

SCHEME = "sqlite://"


def sqlite_path(database_url: str) -> str:
    """The file behind ``sqlite:///relative.db`` or ``sqlite:////absolute/path.db``."""
    if not database_url.startswith(SCHEME + "/"):
        raise InvalidUrlError(
            f"FERRYMAN_DATABASE_URL must look like sqlite:///path/to/file.db, got {database_url!r}"
        )
    path = database_url.removeprefix(SCHEME + "/")
    if not path:
        raise InvalidUrlError("FERRYMAN_DATABASE_URL names no file: use sqlite:///./ferryman.db")
    return path


def check_url(url: str) -> None:
    sqlite_path(url)


@asynccontextmanager
async def open_engine(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    path = sqlite_path(url)
    db = await SqliteDatabase.open(
        path,
        synchronous=options.sqlite_synchronous,
        max_batch=options.sqlite_max_batch,
        create=options.create,
    )
    location = path if path == ":memory:" else str(await asyncio.to_thread(Path(path).resolve))
    try:
        yield Engine(
            name="sqlite",
            location=location,
            store=SqliteJobStore(db, clock=clock),
            queue=SqliteJobQueue(
                db,
                clock=clock,
                max_receives=options.max_receives,
                poll_interval_seconds=options.sqlite_poll_interval_seconds,
            ),
            keys=SqliteApiKeyStore(db),
            control=SqliteControlStore(db),
            results=SqliteResultStore(db),
            webhook_secrets=SqliteWebhookSecretStore(db),
            database=db,
        )
    finally:
        await db.close()


async def probe_database(url: str) -> DatabaseProbe:
    return await asyncio.to_thread(_probe_file, Path(sqlite_path(url)))


def _probe_file(relative: Path) -> DatabaseProbe:
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
