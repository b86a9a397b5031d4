"""One worker process's part in limits every worker process shares for a provider.

On one machine each worker process learns its own window and rate for each
(provider, model) (services/limiter.py). With many processes on one database, the
provider sees their sum, so the window, the learned rate and the per-minute budgets
are kept for all of them together (ports/limits.py), and each process paces itself
at its share: the cluster's figure divided by the live processes calling that model.

A process reports about once a second while it makes calls, and at once when a
throttle narrowed its window or lowered its rate: what its share grew by since the
last report (the cluster adds everyone's growth, as TCP flows sharing a link each
grow their own window), or the throttle, with the cluster epoch its call was admitted
under (the cluster decreases once per epoch, however many processes report the same
overload). A process that joins adds its starting window to the cluster's. Each
report is also the process's heartbeat: one that dies or stops calling is not counted
after LIVE_AFTER_SECONDS, and the others' shares grow back to the whole. If the database cannot be reached the process keeps pacing itself with
what it has, and tries again a report interval later.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from ferryman.core.errors import StoreUnavailableError
from ferryman.ports.limits import ProviderReport, ProviderShare

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.adaptive_rate import AdaptiveRate
    from ferryman.core.aimd import AimdWindow
    from ferryman.core.ratelimit import TokenBucket
    from ferryman.ports.limits import SharedLimits

log = structlog.get_logger(__name__)

REPORT_SECONDS = 1.0
# A process not heard from in this long no longer counts (several missed reports, so
# a busy event loop or a slow commit does not make it flicker).
LIVE_AFTER_SECONDS = 5.0
SECONDS_PER_MINUTE = 60.0


@dataclass(frozen=True, slots=True)
class PerMinute:
    """A per-minute budget configured for all worker processes together, and the
    bucket through which this process spends its share of it."""

    bucket: TokenBucket
    per_minute: float


@dataclass(slots=True)
class _Throttle:
    epoch: int
    narrowed: bool
    lowered: bool


class ProviderShareSync:
    """Reports one process's window and rate for one (provider, model), and adopts its
    share of the cluster's."""

    def __init__(
        self,
        shared: SharedLimits,
        *,
        provider: str,
        model: str,
        member: str,
        window: AimdWindow,
        learned: AdaptiveRate,
        budgets: tuple[PerMinute, ...] = (),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._shared = shared
        self._provider, self._model, self._member = provider, model, member
        self._window, self._learned, self._budgets = window, learned, budgets
        self._wall_clock = wall_clock
        self._start_window = window.limit
        self.epoch = 0  # the cluster epoch last seen: calls are admitted under it
        self.members = 1
        self._window_after: float | None = None
        self._rate_after: float | None = None
        self._reported_at = float("-inf")
        self._pending: _Throttle | None = None
        self._reporting = False

    async def after_call(
        self, now: float, *, admitted_epoch: int, narrowed: bool, lowered: bool
    ) -> None:
        """After each call (``now`` on the limiter's monotonic clock): report at once a
        throttle that changed this process's window or rate, else when one is due."""
        if (narrowed or lowered) and self._pending is None:
            self._pending = _Throttle(admitted_epoch, narrowed, lowered)
        if self._pending is not None or now - self._reported_at >= REPORT_SECONDS:
            await self.report(now)

    async def report(self, now: float) -> None:
        if self._reporting:
            return  # one report at a time; what this one misses goes in the next
        self._reporting = True
        self._reported_at = now
        try:
            try:
                share = await self._shared.report_provider(self._report())
            except StoreUnavailableError:
                log.warning("limiter.share_unavailable", provider=self._provider, model=self._model)
                return
            self._pending = None
            self._adopt(share, now)
        finally:
            self._reporting = False

    def _report(self) -> ProviderReport:
        pending = self._pending
        rate = self._learned.rate
        grown_window = (
            0.0 if self._window_after is None else self._window.limit - self._window_after
        )
        grown_rate = 0.0 if rate is None or self._rate_after is None else rate - self._rate_after
        return ProviderReport(
            provider=self._provider,
            model=self._model,
            member=self._member,
            now=self._wall_clock(),
            grown_window=max(0.0, grown_window),
            grown_rate=max(0.0, grown_rate),
            throttled_epoch=None if pending is None else pending.epoch,
            narrowed_window=pending is not None and pending.narrowed,
            lowered_rate=pending is not None and pending.lowered,
            learned_rate=rate,
            start_window=self._start_window,
            max_window=self._window.maximum,
            live_after_seconds=LIVE_AFTER_SECONDS,
            window_decrease_factor=self._window.decrease_factor,
            rate_decrease_factor=self._learned.decrease_factor,
        )

    def _adopt(self, share: ProviderShare, now: float) -> None:
        members = max(1, share.members)
        self.epoch, self.members = share.epoch, members
        self._window.adopt(share.window / members)
        if share.rate is not None:
            self._learned.adopt(share.rate / members, now)
        for budget in self._budgets:
            rate = budget.per_minute / SECONDS_PER_MINUTE / members
            budget.bucket.rate_per_second = rate
            budget.bucket.burst = max(1, int(rate))
        self._window_after = self._window.limit
        self._rate_after = self._learned.rate
