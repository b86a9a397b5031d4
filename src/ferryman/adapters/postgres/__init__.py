"""The PostgreSQL engine: jobs, queue, results, keys and switches in one database.

API and worker processes on many machines share it. Each process borrows pooled
connections for one transaction at a time, and keeps one more connection that
LISTENs, so idle workers wake when any process enqueues work.
"""

from __future__ import annotations

from ferryman.adapters.postgres.control import PostgresControlStore
from ferryman.adapters.postgres.database import PostgresDatabase
from ferryman.adapters.postgres.keys import PostgresApiKeyStore
from ferryman.adapters.postgres.limits import PostgresSharedLimits
from ferryman.adapters.postgres.queue import PostgresJobQueue
from ferryman.adapters.postgres.results import PostgresResultStore
from ferryman.adapters.postgres.store import PostgresJobStore
from ferryman.adapters.postgres.webhook_secrets import PostgresWebhookSecretStore

__all__ = [
    "PostgresApiKeyStore",
    "PostgresControlStore",
    "PostgresDatabase",
    "PostgresJobQueue",
    "PostgresJobStore",
    "PostgresResultStore",
    "PostgresSharedLimits",
    "PostgresWebhookSecretStore",
]
