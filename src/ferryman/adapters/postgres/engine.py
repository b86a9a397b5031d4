"""The PostgreSQL engine's entry in the registry (engines.py): its URL, opener and prober."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ferryman.adapters.postgres.control import PostgresControlStore
from ferryman.adapters.postgres.database import PostgresDatabase
from ferryman.adapters.postgres.keys import PostgresApiKeyStore
from ferryman.adapters.postgres.limits import PostgresSharedLimits
from ferryman.adapters.postgres.queue import PostgresJobQueue
from ferryman.adapters.postgres.results import PostgresResultStore
from ferryman.adapters.postgres.store import PostgresJobStore
from ferryman.adapters.postgres.webhook_secrets import PostgresWebhookSecretStore
from ferryman.engines import DatabaseProbe, Engine, shown_url

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.core.clock import Clock
    from ferryman.engines import EngineOptions


def check_url(url: str) -> None:
    """The driver reads the rest of the URL, and says what is wrong with it when it connects."""


@asynccontextmanager
async def open_engine(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    # A missing database is created when allowed (and the role may); its schema is
    # made or upgraded here, under an advisory lock, whichever process comes first.
    db = await PostgresDatabase.open(
        url,
        min_size=options.postgres_pool_min_size,
        max_size=options.postgres_pool_max_size,
        connect_timeout_seconds=options.postgres_connect_timeout_seconds,
        listen=options.postgres_listen,
        create=options.create,
    )
    try:
        yield Engine(
            name="postgresql",
            location=shown_url(url),
            store=PostgresJobStore(db, clock=clock),
            queue=PostgresJobQueue(
                db,
                clock=clock,
                max_receives=options.max_receives,
                poll_interval_seconds=options.postgres_poll_interval_seconds,
            ),
            keys=PostgresApiKeyStore(db),
            control=PostgresControlStore(db),
            results=PostgresResultStore(db),
            webhook_secrets=PostgresWebhookSecretStore(db),
            limits=PostgresSharedLimits(db),
            database=db,
        )
    finally:
        await db.close()


async def probe_database(url: str) -> DatabaseProbe:
    """Connect once, read the schema version and the role's rights, write nothing. A
    server that cannot be reached, or a database that does not exist, is reported."""
    import psycopg

    from ferryman.adapters.postgres.inspection import inspect, is_missing_database
    from ferryman.adapters.postgres.migrations import latest_version

    shown, latest = shown_url(url), latest_version()
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
