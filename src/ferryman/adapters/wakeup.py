"""An in-process nudge for queue consumers waiting on an empty queue.

A long-polling receive sleeps until a message is sent (or made visible) or its poll
interval passes. This process's own sends nudge it; on PostgreSQL so do other
processes' sends, through LISTEN/NOTIFY; the poll covers the rest. A generation
counter closes the gap between "found nothing" and "started waiting".
"""

from __future__ import annotations

import asyncio
import contextlib


class Wakeup:
    def __init__(self) -> None:
        self._generation = 0
        self._waiters: set[asyncio.Future[None]] = set()

    @property
    def generation(self) -> int:
        return self._generation

    def notify(self) -> None:
        self._generation += 1
        for waiter in list(self._waiters):
            # A waiter may belong to another event loop (or a closed one).
            with contextlib.suppress(RuntimeError):
                waiter.get_loop().call_soon_threadsafe(_wake, waiter)

    async def wait(self, *, since: int, timeout_seconds: float) -> None:
        """Return on a notify after generation ``since``, or after the timeout."""
        if self._generation != since or timeout_seconds <= 0:
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            await asyncio.wait({waiter}, timeout=timeout_seconds)
        finally:
            self._waiters.discard(waiter)
            waiter.cancel()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
