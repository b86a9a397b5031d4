"""Celery's side of the peers benchmark: one no-op task, Redis as broker and result store.

Run by the peers' virtualenv, never imported by ferryman. The worker is
``celery -A noop_celery worker``; results go to Redis so that every job leaves its own
completion time (``date_done``), which the benchmark reads instead of its poll time.
"""

from __future__ import annotations

import os

from celery import Celery

REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/11")

app = Celery("noop_celery", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)


@app.task(name="noop")
def noop() -> None:
    return None
