"""A thread that handles, as one batch, every request waiting for it at that moment.

The engines' expensive step is a durability barrier (a COMMIT, an fsync) whose cost
hardly depends on how much it covers. Callers on an asyncio loop submit requests;
the thread takes all that are waiting (up to ``max_batch``), hands them to the
engine's batch handler, and settles the callers' futures with one callback per
event loop (one cross-thread wake-up per batch, not one per request). A caller
cancelled before its batch starts is left out of it.

A request submitted ``alone`` (a large one: a slice of a tenant's batch of jobs) is
handled in a batch of its own, after the other requests that were waiting with it:
the small requests of everyone else never wait for a large one they happened to be
queued beside, only for the one already running.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable

Req = TypeVar("Req")


@dataclass(slots=True)
class Outcome:
    """One request's result: a value, or the exception its caller gets."""

    value: Any = None
    error: BaseException | None = None


@dataclass(slots=True)
class _Pending(Generic[Req]):
    request: Req
    future: asyncio.Future[Any]
    loop: asyncio.AbstractEventLoop
    alone: bool = False


class ClosedError(RuntimeError):
    """The batching thread was closed; nothing more is accepted."""


class BatchingThread(Generic[Req]):
    """``handle_batch(requests) -> outcomes`` (same order) runs on this thread only."""

    def __init__(
        self,
        handle_batch: Callable[[list[Req]], list[Outcome]],
        *,
        max_batch: int,
        name: str,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self._handle_batch = handle_batch
        self._max_batch = max_batch
        self._inbox: queue.SimpleQueue[_Pending[Req] | None] = queue.SimpleQueue()
        self._closed = False
        self._lock = threading.Lock()
        self.batches = 0
        self.requests = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, request: Req, *, alone: bool = False) -> asyncio.Future[Any]:
        """Queue ``request`` for the next batch (``alone``: in a batch of its own, after
        the others waiting with it); the future belongs to the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._closed:
                raise ClosedError("closed")
            self._inbox.put(_Pending(request, future, loop, alone))
        return future

    def close(self) -> None:
        """Finish what was already submitted, then stop the thread (blocking)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._inbox.put(None)
        self._thread.join()

    def _run(self) -> None:
        stopping = False
        while not stopping:
            first = self._inbox.get()
            if first is None:
                return
            batch = [first]
            while len(batch) < self._max_batch:
                try:
                    item = self._inbox.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    stopping = True
                    break
                batch.append(item)
            together = [item for item in batch if not item.alone]
            if together:
                self._run_batch(together)
            for item in batch:
                if item.alone:
                    self._run_batch([item])

    def _run_batch(self, batch: list[_Pending[Req]]) -> None:
        # Reading cancelled() across threads can only be late; then the request runs.
        live = [item for item in batch if not item.future.cancelled()]
        if not live:
            return
        try:
            outcomes = self._handle_batch([item.request for item in live])
        except Exception as exc:  # noqa: BLE001 - every caller of the batch gets it
            outcomes = [Outcome(error=exc)] * len(live)
        self.batches += 1
        self.requests += len(live)
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Outcome]]] = {}
        for item, outcome in zip(live, outcomes, strict=True):
            by_loop.setdefault(item.loop, []).append((item.future, outcome))
        for loop, settled in by_loop.items():
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody waits
                loop.call_soon_threadsafe(_settle, settled)


def _settle(settled: list[tuple[asyncio.Future[Any], Outcome]]) -> None:
    for future, outcome in settled:
        if future.cancelled():
            continue
        if outcome.error is not None:
            future.set_exception(outcome.error)
        else:
            future.set_result(outcome.value)
