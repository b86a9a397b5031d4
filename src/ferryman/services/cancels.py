"""The cancel watcher: stop the calls whose job's client asked for a cancel.

A worker process runs one watcher over every call it attends. It reads which of
those jobs have a cancel request in one batched query, and runs that query when the
store's cancel hint is nudged (a cancel was just requested for a running job, in
this process or another one the engine hears from), or every ``interval_seconds``
whatever happens. A hint is never the cancel itself: only the read decides, so a
lost hint costs the time to the next periodic check and an extra one costs a read.

Hints are gathered: after a nudge the watcher waits ``gather_seconds`` before it
reads, and nudges that come while it waits or reads lead to one more read, not one
each, so a burst of cancels (an operator stopping a tenant's jobs) is a few reads.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Protocol

import structlog

if TYPE_CHECKING:
    from collections.abc import Collection, Mapping

    from ferryman.ports.store import Hint

log = structlog.get_logger("ferryman.worker")

# Long enough for the cancels of one burst to share a read, short against a call.
DEFAULT_GATHER_SECONDS = 0.003


class Interruptible(Protocol):
    """A running attempt as the watcher sees it (services/attempt.py's RunningAttempt)."""

    cancel_requested: bool

    def interrupt(self) -> None: ...


class CancelRequests(Protocol):
    """Where cancel requests are read (services/ledger.py's JobLedger)."""

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]: ...


class CancelWatcher:
    def __init__(
        self,
        *,
        requests: CancelRequests,
        hints: Hint,
        attended: Mapping[str, Interruptible],
        interval_seconds: float,
        gather_seconds: float = DEFAULT_GATHER_SECONDS,
    ) -> None:
        self._requests = requests
        self._hints = hints
        # The attempts running now, by job id; the runner adds and removes them.
        self._attended = attended
        self._interval_seconds = interval_seconds
        self._gather_seconds = gather_seconds
        self.checks = 0  # reads made (tests and benchmarks look)

    async def run(self, stop: asyncio.Event) -> None:
        """Check on every hint and every interval until ``stop`` is set."""
        # Taken before each read: a hint after it means a cancel the read may have
        # missed, so it leads to another read.
        since = self._hints.generation
        while not stop.is_set():
            hinted = await self._next(stop, since)
            if stop.is_set():
                return
            if hinted and self._gather_seconds > 0:
                await _wait_or(stop, self._gather_seconds)
            since = self._hints.generation
            await self.check()

    async def check(self) -> None:
        """One batched read for every attended call; interrupt those asked to stop."""
        running = list(self._attended)
        if not running:
            return
        self.checks += 1
        try:
            requested = await self._requests.cancel_requested(running)
        except Exception as exc:  # noqa: BLE001 - the heartbeat still carries cancels
            log.warning("cancel_check.failed", error_type=type(exc).__name__)
            return
        for job_id in requested:
            attempt = self._attended.get(job_id)
            if attempt is not None and not attempt.cancel_requested:
                attempt.cancel_requested = True
                attempt.interrupt()

    async def _next(self, stop: asyncio.Event, since: int) -> bool:
        """Wait for a hint after ``since``, the interval, or ``stop``; True on a hint."""
        if self._hints.generation != since:
            return True
        stopping = asyncio.create_task(stop.wait())
        hinted = asyncio.create_task(
            self._hints.wait(since=since, timeout_seconds=self._interval_seconds)
        )
        try:
            await asyncio.wait({stopping, hinted}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopping.cancel()
            hinted.cancel()
        return self._hints.generation != since


async def _wait_or(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(seconds):
            await stop.wait()
