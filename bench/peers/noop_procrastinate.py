"""Procrastinate's side of the peers benchmark: one no-op task on PostgreSQL.

The worker is ``procrastinate --app=noop_procrastinate.app worker``; producers call
``noop.defer()``. Procrastinate's own event table records when each job succeeded.
"""

from __future__ import annotations

import os

from procrastinate import App, PsycopgConnector

DATABASE_URL = os.environ.get("BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/bench")

app = App(connector=PsycopgConnector(conninfo=DATABASE_URL))


@app.task(name="noop")
def noop() -> None:
    return None
