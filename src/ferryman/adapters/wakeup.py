"""A nudge for whoever waits on the database: queue consumers, cancel watchers.

A long-polling receive sleeps until a message is sent (or made visible) or its poll
interval passes; a worker's cancel watcher sleeps until a cancel is requested for a
running job or its periodic check comes round. Each engine keeps one Wakeup for each.
In this process the nudge is direct. Other processes' nudges reach it through
``peers`` where the engine has them (SQLite: one-byte datagrams among the processes
sharing the file, adapters/sqlite/peers.py) or through the engine's own channel
(PostgreSQL: LISTEN/NOTIFY calls ``notify``). A nudge is never the news itself: the
woken reads the database, and the poll covers whatever a nudge misses. A generation
counter closes the gap between "found nothing" and "started waiting".
"""

from __future__ import annotations

import asyncio
import contextlib
from asyncio import FIRST_COMPLETED
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable


class Peers(Protocol):
    """Wake-ups of one kind exchanged with other processes (adapters/sqlite/peers.py's
    PeerChannel)."""

    @property
    def listening(self) -> bool: ...

    def listen(self, on_wake: Callable[[], None]) -> bool: ...

    def broadcast(self) -> None: ...

    def close(self) -> None: ...


class Wakeup:
    def __init__(self, peers: Peers | None = None) -> None:
        self._generation = 0
        # Bumped by this process's own notify() only (a peer's byte does not): a
        # receiver woken by it knows the news is most likely its to take.
        self.local_generation = 0
        self._waiters: set[asyncio.Future[None]] = set()
        self._peers = peers

    @property
    def generation(self) -> int:
        return self._generation

    def notify(self) -> None:
        """Something changed: wake this process's waiters and the other processes'."""
        self.local_generation += 1
        self._notify_here()
        if self._peers is not None:
            self._peers.broadcast()

    def _notify_here(self) -> None:
        self._generation += 1
        if not self._waiters:
            return
        try:
            running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        for waiter in list(self._waiters):
            loop = waiter.get_loop()
            if loop is running:
                # The usual case (a sender and a receiver of one process): no write to
                # the loop's self-pipe and no extra trip through its selector.
                _wake(waiter)
                continue
            # A waiter may belong to another event loop (or a closed one).
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_wake, waiter)

    async def wait(
        self, *, since: int, timeout_seconds: float, also: asyncio.Event | None = None
    ) -> None:
        """Return on a notify after generation ``since``, when ``also`` is set, or
        after the timeout."""
        if self._peers is not None and not self._peers.listening:
            # Listen from the first wait: only a process that waits needs waking.
            self._peers.listen(self._notify_here)
        if self._generation != since or timeout_seconds <= 0 or (also and also.is_set()):
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        waiters: set[asyncio.Future[Any]] = {waiter}
        if also is not None:
            waiters.add(asyncio.ensure_future(also.wait()))
        try:
            await asyncio.wait(waiters, timeout=timeout_seconds, return_when=FIRST_COMPLETED)
        finally:
            self._waiters.discard(waiter)
            for each in waiters:
                each.cancel()

    def close(self) -> None:
        if self._peers is not None:
            self._peers.close()


def _wake(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
