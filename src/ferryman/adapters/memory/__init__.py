"""In-memory engines for every port: the fakes unit tests run on, held to the contract suite."""

from __future__ import annotations

from ferryman.adapters.memory.control import InMemoryControlStore
from ferryman.adapters.memory.keys import InMemoryApiKeyStore
from ferryman.adapters.memory.queue import InMemoryJobQueue
from ferryman.adapters.memory.results import InMemoryResultStore
from ferryman.adapters.memory.store import InMemoryJobStore
from ferryman.adapters.memory.webhook_secrets import InMemoryWebhookSecretStore

__all__ = [
    "InMemoryApiKeyStore",
    "InMemoryControlStore",
    "InMemoryJobQueue",
    "InMemoryJobStore",
    "InMemoryResultStore",
    "InMemoryWebhookSecretStore",
]
