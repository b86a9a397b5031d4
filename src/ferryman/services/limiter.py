"""How many calls, and how fast, a worker process makes to one (provider, model).

Each (provider, model) pair gets its own limiter, shared by every call of the
process: a concurrency window that opens narrow and doubles each round trip until
the first throttle, then halves on THROTTLED and grows by about one per round trip
(core.aimd); a request rate learned from the throttles (core.adaptive_rate),
which paces calls near a provider's requests-per-second limit without being told it;
and, when the provider has them, requests-per-minute and tokens-per-minute budgets
(core.ratelimit token buckets). A call waits for a slot
and for its budgets before it is made, so a backlog shows up as queue depth, not as
a wall of 429s that each burn an attempt. A throttle a client's script made up (the
sim's) never narrows the window: it says nothing about the provider.

When the engine shares limits between processes (PostgreSQL), the window, the learned
rate and the per-minute budgets are the whole cluster's, and this process paces
itself at its share of them (services/provider_share.py); otherwise they are this
process's own.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.aimd import AimdWindow
from ferryman.core.ratelimit import TokenBucket
from ferryman.observability import metrics
from ferryman.services.provider_share import PerMinute, ProviderShareSync

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ferryman.ports.limits import SharedLimits

SECONDS_PER_MINUTE = 60.0
# Where a real provider's window opens, unless its configuration says otherwise.
DEFAULT_START_CONCURRENCY = 8
# A learned rate lets this much of a second's calls go at once.
_PACE_BURST_SECONDS = 0.05
# The window a learned rate needs: rate x latency (Little's law), with headroom for
# latencies that vary.
_WINDOW_HEADROOM = 1.25
# Weight of the newest call in the running mean of call latency.
_LATENCY_WEIGHT = 0.2
# A throttle's Retry-After holds every call to the provider, up to this long (a longer
# wait is asked again by the next throttle; each job's own retry honours all of it).
_MAX_HOLD_SECONDS = 60.0
_MAX_BUDGET_WAITS = 1000


@dataclass(frozen=True, slots=True)
class CallBudget:
    """``[providers.NAME]``'s limits, for each of its models: per worker process, or for
    all worker processes together when the engine shares them (PostgreSQL)."""

    max_concurrency: int = 64
    requests_per_minute: float | None = None
    tokens_per_minute: float | None = None
    # Calls at once before the window has grown (slow start); None: max_concurrency.
    start_concurrency: int | None = None


@dataclass(slots=True)
class Admission:
    """One call let through: under which epochs, with how many tokens reserved."""

    epoch: int
    rate_epoch: int
    reserved_tokens: float
    # How many times the window had filled up before this call went out.
    fills: int
    started_at: float
    # The cluster epoch it was admitted under (limits shared between processes).
    cluster_epoch: int = 0


class CallLimiter:
    def __init__(
        self,
        budget: CallBudget,
        *,
        provider: str,
        model: str,
        shared: SharedLimits | None = None,
        member: str = "",
    ) -> None:
        maximum = max(1, budget.max_concurrency)
        start = min(maximum, budget.start_concurrency or maximum)
        self.window = AimdWindow(maximum=float(maximum), start=float(start))
        self.learned = AdaptiveRate()
        # Paces calls at the learned rate once there is one (50 ms worth at once).
        self._pace = TokenBucket(rate_per_second=1.0, burst=1)
        self._requests = _per_minute_bucket(budget.requests_per_minute)
        self._tokens = _per_minute_bucket(budget.tokens_per_minute)
        self._active = 0  # calls holding a place in the window
        self._calling = 0  # of those, calls past every budget: at the provider
        self._fills = 0  # times a call going out found every other place taken
        self._latency: float | None = None  # running mean of a successful call, seconds
        self._hold_until = 0.0  # monotonic time before which no call goes out
        # Nothing awaits while holding its lock: the condition only wakes waiting calls.
        self._changed = asyncio.Condition()
        self._waiting = 0  # calls waiting on it for a place in the window
        self._gauge = metrics.PROVIDER_WINDOW.labels(provider=provider, model=model)
        self._shown_permits = self.window.permits
        self._gauge.set(self._shown_permits)
        self._rate_gauge = metrics.PROVIDER_RATE.labels(provider=provider, model=model)
        self._shown_rate = 0.0
        self.share = (
            None if shared is None else self._share(shared, provider, model, member, budget)
        )

    def _share(
        self, shared: SharedLimits, provider: str, model: str, member: str, budget: CallBudget
    ) -> ProviderShareSync:
        per_minute = (
            (self._requests, budget.requests_per_minute),
            (self._tokens, budget.tokens_per_minute),
        )
        return ProviderShareSync(
            shared,
            provider=provider,
            model=model,
            member=member,
            window=self.window,
            learned=self.learned,
            budgets=tuple(
                PerMinute(bucket, rate)
                for bucket, rate in per_minute
                if bucket is not None and rate is not None
            ),
        )

    @property
    def active(self) -> int:
        return self._active

    @property
    def token_balance(self) -> float | None:
        """Model tokens the per-minute token budget holds as of its last use (negative:
        spent ahead of its refill); None without a token budget."""
        if self._tokens is None:
            return None
        return self._tokens.burst - self._tokens.seconds_until_full * self._tokens.rate_per_second

    def slot(self, *, estimated_tokens: int) -> Slot:
        """Wait for a place in the window, then for the learned pace and the request
        and token budgets (last, so calls leave at the pace, not in bursts).
        ``async with limiter.slot(...) as admission:`` holds the place for the call."""
        return Slot(self, float(estimated_tokens))

    async def _admit(self, estimated_tokens: float) -> Admission:
        if self._active < self.window.permits and not self._changed.locked():
            # A free place and nobody between the condition's checks: taken at once
            # (what acquiring the free lock and a true wait_for would do, for less).
            self._active += 1
        else:
            self._waiting += 1
            try:
                async with self._changed:
                    await self._changed.wait_for(lambda: self._active < self.window.permits)
                    self._active += 1
            finally:
                self._waiting -= 1
        epoch = self.window.epoch
        try:
            if self._hold_until > 0.0:
                await self._wait_out_hold()
            if self.learned.rate is not None:
                await _spend(self._paced(), 1.0)
            if self._requests is not None:
                await _spend(self._requests, 1.0)
            if self._tokens is not None:
                await _spend(self._tokens, estimated_tokens)
            now = time.monotonic()
            admission = Admission(
                epoch=epoch,
                rate_epoch=self.learned.admitted(now),
                reserved_tokens=estimated_tokens,
                fills=self._fills,
                started_at=now,
                cluster_epoch=0 if self.share is None else self.share.epoch,
            )
        except BaseException:  # never admitted: the place goes back at once
            await self._leave()
            raise
        self._calling += 1
        if self._calling >= self.window.permits:
            self._fills += 1
        return admission

    async def _release(self) -> None:
        self._calling -= 1
        await self._leave()

    async def _leave(self) -> None:
        self._active -= 1
        await self._notify()

    async def _notify(self) -> None:
        """Wake the calls waiting for a place (none waiting: nothing to wake)."""
        if self._waiting:
            async with self._changed:
                self._changed.notify_all()

    async def record(
        self,
        admission: Admission,
        *,
        throttled: bool,
        used_tokens: int | None = None,
        retry_after_seconds: float | None = None,
    ) -> None:
        """How the call went. A throttle lowers the learned rate and a success raises
        it. The window follows only calls during which it filled up (every place
        taken by a call at the provider), as TCP grows only a window it uses: when the
        pace holds calls back instead, the window was not what overloaded the provider
        (narrowing it too would cut throughput twice for one overload), nor is a
        success a reason to widen a window nobody waits for. The token budget learns
        what the call really used; ``used_tokens`` None (a failed call, or an answer
        that reported no usage) keeps the call's estimate spent, never refunds it as if
        the call had used nothing. A throttle that says when to come back (Retry-After)
        holds every call until then: the provider has said the calls in between would
        be refused."""
        now = time.monotonic()
        if throttled and retry_after_seconds is not None and retry_after_seconds > 0:
            hold = min(retry_after_seconds, _MAX_HOLD_SECONDS)
            self._hold_until = max(self._hold_until, now + hold)
        if self._tokens is not None and used_tokens is not None:
            self._tokens.adjust(now, used_tokens - admission.reserved_tokens)
        lowered = narrowed = False
        if throttled:
            lowered = self.learned.on_throttle(now, admission.rate_epoch)
        else:
            self.learned.on_success(now)
            self._note_latency(now - admission.started_at)
        holding_back = self._fills > admission.fills
        if holding_back and throttled:
            narrowed = self.window.on_throttle(admission.epoch, floor=self._window_for_rate())
        elif holding_back:
            self.window.on_success()
        if self.share is not None:
            await self.share.after_call(
                now, admitted_epoch=admission.cluster_epoch, narrowed=narrowed, lowered=lowered
            )
        # The gauges move only when their values do (most calls change neither).
        if self.window.permits != self._shown_permits:
            self._shown_permits = self.window.permits
            self._gauge.set(self._shown_permits)
        rate = self.learned.rate or 0.0
        if rate != self._shown_rate:
            self._shown_rate = rate
            self._rate_gauge.set(rate)
        await self._notify()

    async def _wait_out_hold(self) -> None:
        # Again after each wait: another throttle may have moved the hold on meanwhile.
        for _ in range(_MAX_BUDGET_WAITS):
            wait = self._hold_until - time.monotonic()
            if wait <= 0:
                return
            await asyncio.sleep(wait)

    def _note_latency(self, seconds: float) -> None:
        if self._latency is None:
            self._latency = seconds
        else:
            self._latency += _LATENCY_WEIGHT * (seconds - self._latency)

    def _window_for_rate(self) -> float:
        """The calls at once the learned rate needs at the calls' usual latency."""
        if self.learned.rate is None or self._latency is None:
            return 0.0
        return self.learned.rate * self._latency * _WINDOW_HEADROOM

    def _paced(self) -> TokenBucket | None:
        rate = self.learned.rate
        if rate is None:
            return None
        self._pace.rate_per_second = rate
        self._pace.burst = max(1, int(rate * _PACE_BURST_SECONDS))
        return self._pace


class Slot:
    """A call's place in its limiter's window, from admission until the call is done."""

    __slots__ = ("_estimated_tokens", "_limiter")

    def __init__(self, limiter: CallLimiter, estimated_tokens: float) -> None:
        self._limiter = limiter
        self._estimated_tokens = estimated_tokens

    async def __aenter__(self) -> Admission:
        return await self._limiter._admit(self._estimated_tokens)

    async def __aexit__(self, *exc_info: object) -> None:
        await self._limiter._release()


class Limiters:
    """The limiter of every (provider, model) this process calls, made on first use."""

    def __init__(
        self,
        budgets: Mapping[str, CallBudget],
        *,
        max_concurrency: int,
        shared: SharedLimits | None = None,
        member: str = "",
    ) -> None:
        self._budgets = budgets
        self._max_concurrency = max_concurrency
        # Where the limits of every worker process are kept together (None: each its own).
        self._shared = shared
        self._member = member
        self._limiters: dict[tuple[str, str], CallLimiter] = {}

    def get(self, provider: str, model: str) -> CallLimiter:
        limiter = self._limiters.get((provider, model))
        if limiter is None:
            budget = self._budgets.get(provider, CallBudget())
            # No more at once than the worker itself runs.
            capped = CallBudget(
                max_concurrency=min(budget.max_concurrency, self._max_concurrency),
                requests_per_minute=budget.requests_per_minute,
                tokens_per_minute=budget.tokens_per_minute,
                start_concurrency=budget.start_concurrency,
            )
            limiter = self._limiters[(provider, model)] = CallLimiter(
                capped, provider=provider, model=model, shared=self._shared, member=self._member
            )
        return limiter


def _per_minute_bucket(per_minute: float | None) -> TokenBucket | None:
    if per_minute is None:
        return None
    rate = per_minute / SECONDS_PER_MINUTE
    # A second's worth at once: enough to start a batch, not a minute's burst.
    return TokenBucket(rate, burst=max(1, int(rate)))


async def _spend(bucket: TokenBucket | None, amount: float) -> None:
    """Wait until the bucket holds ``amount`` and spend it (the budget paces the call)."""
    if bucket is None:
        return
    for _ in range(_MAX_BUDGET_WAITS):
        wait = bucket.take(time.monotonic(), amount)
        if wait <= 0:
            return
        await asyncio.sleep(wait)
    # Unreachable with a bucket that refills: each wait is exactly until it holds enough.
    bucket.adjust(time.monotonic(), amount)


def estimate_tokens(*texts: str | None, max_tokens: int | None) -> int:
    """A call's tokens before it is made: about four characters a token in, and the
    answer's cap out (corrected by the real usage afterwards)."""
    characters = sum(len(text) for text in texts if text)
    return characters // 4 + 1 + (max_tokens or 256)
