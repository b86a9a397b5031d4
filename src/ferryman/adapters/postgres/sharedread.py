"""One read answering every caller that asked for the same thing meanwhile.

Intake reads the pause switches and the tenant's usage before every accept: under load
that is many identical reads at once, each a pooled connection and a round trip.
``SharedRead.get(key)`` joins the callers of one key into the next read of it: while a
read of the key is in flight, new callers wait for the one after it, which answers all
of them. Every caller's answer therefore comes from a read that started after the
caller asked, so it is never older than an answer of its own read would have been: a
pause committed before the call is seen, as it was with one read per call. An error
reaches every caller of that read, as each read of its own would have failed.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Hashable

K = TypeVar("K", bound="Hashable")
V = TypeVar("V")


class SharedRead(Generic[K, V]):
    def __init__(self, read: Callable[[K], Awaitable[V]]) -> None:
        self._read = read
        # The read of each key that callers join now: not yet started.
        self._next: dict[K, asyncio.Future[V]] = {}
        # One read of a key at a time: the next one starts when it ends.
        self._locks: dict[K, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.reads = 0

    async def get(self, key: K) -> V:
        future = self._next.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._next[key] = future
            task = asyncio.create_task(self._run(key, future))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        # A caller cancelled leaves the read to the others.
        return await asyncio.shield(future)

    async def _run(self, key: K, future: asyncio.Future[V]) -> None:
        lock = self._locks.setdefault(key, asyncio.Lock())
        try:
            async with lock:
                # From here on, newcomers wait for the read after this one.
                del self._next[key]
                self.reads += 1
                try:
                    value = await self._read(key)
                except Exception as exc:  # noqa: BLE001 - every caller of this read gets it
                    future.set_exception(exc)
                    future.exception()  # retrieved: no warning when every caller left
                else:
                    future.set_result(value)
        finally:
            if not future.done():  # this task itself was cancelled (shutdown)
                if self._next.get(key) is future:
                    del self._next[key]
                future.cancel()
            if not lock.locked() and key not in self._next:
                self._locks.pop(key, None)
