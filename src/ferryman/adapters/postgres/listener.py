"""LISTEN/NOTIFY: idle receivers in every process wake when any process sends a message,
and workers run their cancel check when any process asks a running job to stop.

A transaction that inserts a visible message (an accepted job, a send, a message
shown again) also runs ``pg_notify`` on ``ferryman_messages``; one that asks a running
attempt to stop, on ``ferryman_cancels``; one that moves a job to another status, on
``ferryman_statuses`` (one notification per transaction: PostgreSQL folds identical
ones). PostgreSQL delivers it when, and only if, that transaction commits. One
dedicated connection per process listens to every channel and nudges the process's
Wakeup for each, so a waiting receive looks at once instead of at its next poll, the
cancel watcher reads the cancel requests at once instead of at its next periodic
check, and a client's wait (services/watch.py) reads its jobs at once. A notification is a hint, never the news: the woken
reads the tables. The poll and the periodic check stay as the fallback: while this
connection is down (the server restarted, the backend was terminated) it reconnects
with backoff, and workers notice work and cancels within their intervals meanwhile.
On each reconnection it nudges each once, since a notification sent while it was
away is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import structlog
from psycopg import sql

from ferryman.adapters.postgres.sql import ADMIN
from ferryman.adapters.wakeup import Wakeup

log = structlog.get_logger("ferryman.postgres")

MESSAGES_CHANNEL = "ferryman_messages"
CANCELS_CHANNEL = "ferryman_cancels"
STATUSES_CHANNEL = "ferryman_statuses"
FIRST_RETRY_SECONDS = 0.1
MAX_RETRY_SECONDS = 5.0


class Listener:
    """One background task holding one connection that LISTENs to every channel."""

    def __init__(self, url: str, *, connect_kwargs: dict[str, Any]) -> None:
        self._url = url
        self._connect_kwargs = connect_kwargs
        self.wakeup = Wakeup()  # new messages
        self.cancel_wakeup = Wakeup()  # cancel requests for running jobs
        self.status_wakeup = Wakeup()  # jobs moved to another status (clients' waits)
        self._wakeups = {
            MESSAGES_CHANNEL: self.wakeup,
            CANCELS_CHANNEL: self.cancel_wakeup,
            STATUSES_CHANNEL: self.status_wakeup,
        }
        self.connected = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="ferryman-postgres-listener")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        delay = FIRST_RETRY_SECONDS
        while True:
            try:
                await self._listen()
            except psycopg.Error as exc:
                log.warning(
                    "postgres.listener_lost",
                    error=type(exc).__name__,
                    retry_in_seconds=delay,
                )
            if self.connected:  # it was up: the server came back once, try again soon
                delay = FIRST_RETRY_SECONDS
            self.connected = False
            await asyncio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _listen(self) -> None:
        conn = await psycopg.AsyncConnection.connect(self._url, **self._connect_kwargs)
        async with conn:
            for channel in self._wakeups:
                await conn.execute(sql.SQL(ADMIN["listen"]).format(channel=sql.Identifier(channel)))
            self.connected = True
            # Whatever was sent while nobody listened is looked for now.
            for wakeup in self._wakeups.values():
                wakeup.notify()
            async for notification in conn.notifies():
                woken = self._wakeups.get(notification.channel)
                if woken is not None:
                    woken.notify()
