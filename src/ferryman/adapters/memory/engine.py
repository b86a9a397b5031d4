"""The memory engine's entry in the registry (engines.py): every port in this process's
memory, for tests, benchmarks and trying ferryman out; gone when the process ends."""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ferryman.adapters.memory.control import InMemoryControlStore
from ferryman.adapters.memory.keys import InMemoryApiKeyStore
from ferryman.adapters.memory.queue import InMemoryJobQueue
from ferryman.adapters.memory.results import InMemoryResultStore
from ferryman.adapters.memory.store import InMemoryJobStore
from ferryman.adapters.memory.webhook_secrets import InMemoryWebhookSecretStore
from ferryman.engines import DatabaseProbe, Engine, InvalidUrlError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.core.clock import Clock
    from ferryman.engines import EngineOptions

URL = "memory://"


def check_url(url: str) -> None:
    if url != URL:
        raise InvalidUrlError(f"FERRYMAN_DATABASE_URL must be {URL} exactly, got {url!r}")


@asynccontextmanager
async def open_engine(url: str, clock: Clock, options: EngineOptions) -> AsyncIterator[Engine]:
    """Nothing to open or close; nothing here waits, so opening never suspends."""
    queue = InMemoryJobQueue(clock=clock, max_receives=options.max_receives)
    yield Engine(
        name="memory",
        location="in this process's memory",
        # With memory_outbox the store does not enqueue: intake sends through the queue.
        store=InMemoryJobStore(queue=None if options.memory_outbox else queue),
        queue=queue,
        keys=InMemoryApiKeyStore(),
        control=InMemoryControlStore(),
        results=InMemoryResultStore(),
        webhook_secrets=InMemoryWebhookSecretStore(),
    )


async def probe_database(url: str) -> DatabaseProbe:
    return DatabaseProbe(path=url, exists=True, latest_version=0, schema_version=0)
