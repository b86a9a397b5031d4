"""The SQLite engine: jobs, queue, results, keys and switches in one WAL file.

Several processes (one API, many workers) share the file. Each process writes
through one group-commit thread (see writer.py) and reads through its own
connection, so readers never wait for writers.
"""

from __future__ import annotations

from ferryman.adapters.sqlite.control import SqliteControlStore
from ferryman.adapters.sqlite.database import SqliteDatabase
from ferryman.adapters.sqlite.keys import SqliteApiKeyStore
from ferryman.adapters.sqlite.queue import SqliteJobQueue
from ferryman.adapters.sqlite.results import SqliteResultStore
from ferryman.adapters.sqlite.store import SqliteJobStore
from ferryman.adapters.sqlite.webhook_secrets import SqliteWebhookSecretStore

__all__ = [
    "SqliteApiKeyStore",
    "SqliteControlStore",
    "SqliteDatabase",
    "SqliteJobQueue",
    "SqliteJobStore",
    "SqliteResultStore",
    "SqliteWebhookSecretStore",
]
