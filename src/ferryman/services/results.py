"""ResultWriter: an output already paid for is kept, and its write retried.

A model call costs money before its result is written. When the result store
cannot take the write (a full or read-only disk, a locked database), throwing the
output away means paying for the call again on the next delivery, and again, up to
the receive budget. So the writer retries with capped exponential backoff for as
long as the caller says the attempt is still worth finishing (its lease is held).

The writer also keeps the store's health as this process sees it: unhealthy from
the first failed write until a write or a probe succeeds. Workers wait in
``wait_until_healthy`` before taking new work, so no new call is started while its
output would have nowhere to go; readiness reports ``healthy`` and ``last_error``.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import TYPE_CHECKING

import structlog

from ferryman.core.errors import BackendUnavailableError, ResultsUnavailableError
from ferryman.ports.results import StagesResults

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ferryman.ports.results import ResultStore, StagedResult

log = structlog.get_logger("ferryman.results")

# What a failed write or probe may raise and still be worth trying again: the result
# store away (ResultsUnavailableError for files, StoreUnavailableError for results kept
# in the job store's database).
RETRYABLE = BackendUnavailableError
DEFAULT_INITIAL_BACKOFF_SECONDS = 0.2
DEFAULT_MAX_BACKOFF_SECONDS = 5.0
DEFAULT_PROBE_INTERVAL_SECONDS = 2.0


class ResultWriter:
    def __init__(
        self,
        store: ResultStore,
        *,
        initial_backoff_seconds: float = DEFAULT_INITIAL_BACKOFF_SECONDS,
        max_backoff_seconds: float = DEFAULT_MAX_BACKOFF_SECONDS,
        probe_interval_seconds: float = DEFAULT_PROBE_INTERVAL_SECONDS,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if initial_backoff_seconds <= 0 or max_backoff_seconds < initial_backoff_seconds:
            raise ValueError("backoff must be positive, its cap no smaller than its start")
        if probe_interval_seconds <= 0:
            raise ValueError("probe_interval_seconds must be positive")
        self._store = store
        self._stages = store if isinstance(store, StagesResults) else None
        self._initial_backoff_seconds = initial_backoff_seconds
        self._max_backoff_seconds = max_backoff_seconds
        self._probe_interval_seconds = probe_interval_seconds
        self._sleep = sleep
        self.healthy = True
        self.last_error: str | None = None

    async def put(
        self, key: str, data: bytes, *, keep_trying: Callable[[], bool | Awaitable[bool]]
    ) -> str:
        """Write until it succeeds or ``keep_trying()`` says stop; then raise
        ResultsUnavailableError (from the last failure)."""
        delay = self._initial_backoff_seconds
        while True:
            try:
                ref = await self._store.put(key, data)
            except RETRYABLE as exc:
                self._failed(exc)
                if not await _ask(keep_trying):
                    raise ResultsUnavailableError(
                        f"results: gave up writing a result: {self.last_error}"
                    ) from exc
                await self._sleep(delay)
                delay = min(delay * 2, self._max_backoff_seconds)
                continue
            self._succeeded()
            return ref

    @property
    def stages(self) -> bool:
        """Whether a publish may write this store's results itself (``staged``)."""
        return self._stages is not None

    def staged(self, key: str, data: bytes) -> StagedResult | None:
        """The result as a publish may write it itself (ports/results.py's
        StagesResults), or None: this store's results must be put first."""
        return None if self._stages is None else self._stages.staged(key, data)

    async def probe(self) -> bool:
        """Check the store now; True when a write would succeed (and it is healthy again)."""
        try:
            await self._store.probe()
        except RETRYABLE as exc:
            self._failed(exc)
            return False
        self._succeeded()
        return True

    async def wait_until_healthy(self, stop_event: asyncio.Event) -> bool:
        """Return at once while healthy; otherwise probe every few seconds until the
        store recovers (True) or ``stop_event`` is set (False)."""
        while not self.healthy:
            if stop_event.is_set():
                return False
            if await self.probe():
                return True
            await self._pause(stop_event)
        return True

    async def _pause(self, stop_event: asyncio.Event) -> None:
        """Sleep one probe interval, or less if stop_event is set meanwhile."""
        sleeping = asyncio.ensure_future(self._sleep(self._probe_interval_seconds))
        stopping = asyncio.ensure_future(stop_event.wait())
        try:
            await asyncio.wait({sleeping, stopping}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (sleeping, stopping):
                task.cancel()
            await asyncio.gather(sleeping, stopping, return_exceptions=True)

    def _failed(self, exc: BaseException) -> None:
        # The engines' outage errors carry safe messages (no data, no keys).
        reason = str(exc)
        self.last_error = f"{type(exc).__name__}: {reason}"
        if self.healthy:
            self.healthy = False
            log.warning("results.unavailable", error_type=type(exc).__name__, reason=reason)

    def _succeeded(self) -> None:
        if not self.healthy:
            self.healthy = True
            log.info("results.recovered")
        self.last_error = None


async def _ask(keep_trying: Callable[[], bool | Awaitable[bool]]) -> bool:
    answer = keep_trying()
    if inspect.isawaitable(answer):
        return bool(await answer)
    return bool(answer)
