"""A request rate learned from a provider's throttles: a gentle increase while calls go
through, a multiplicative decrease on each overload, applied to requests per second.

A provider that limits requests per second answers 429 above its limit whatever our
concurrency. Halving concurrency on each throttle makes throughput saw between half
and all of the limit (three quarters on average, and a throttle at every peak).
Pacing by rate instead, and probing gently, keeps close to the limit: until the first
throttle nothing is paced; at an overload the rate is set a little
(``decrease_factor``) under what the provider accepted in the last second, once per
overload however many calls it throttled; then it grows back, fast while well under
that mark and by ``increase_per_second`` of itself per second near it. The rate
hovers between ``decrease_factor`` and 1 of the limit: above 90% of it on average
with the default factor, with one short burst of throttles per probe.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field

# How far back the "what we were sending" measure looks.
_MEASURE_SECONDS = 1.0
# Within this share of the last overload's rate, growth turns gentle.
_NEAR_CEILING = 0.95


@dataclass(slots=True)
class AdaptiveRate:
    decrease_factor: float = 0.85
    # Growth per second near the last rate that was throttled (probing) ...
    increase_per_second: float = 0.05
    # ... and well below it (climbing back after a fall, like a slow start).
    recovery_per_second: float = 0.5
    # ... and never by less than this many requests per second each second, so a
    # throttle met at a trickle (a one-off, or a provider-wide blip) is not a pace
    # that takes minutes to outgrow.
    increase_floor_per_second: float = 0.25
    minimum: float = 0.1  # requests per second: never paced down to nothing
    # After a decrease, throttles are the overload's echo for this long (a provider
    # counts over a window: calls sent just after the decrease still land in it).
    quiet_seconds: float = 1.0
    # None until the first throttle: the provider's limit is unknown, nothing is paced.
    rate: float | None = None
    # Advanced by every decrease; a throttle of a call admitted before it is the same
    # overload already answered.
    epoch: int = 0
    # The rate at which the last overload happened: growth slows as it comes near.
    ceiling: float | None = None
    _admitted: collections.deque[float] = field(default_factory=collections.deque)
    _throttled: collections.deque[float] = field(default_factory=collections.deque)
    _raised_at: float | None = None
    _quiet_until: float = float("-inf")

    def __post_init__(self) -> None:
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must be within (0, 1)")
        if self.increase_per_second <= 0 or self.recovery_per_second < self.increase_per_second:
            raise ValueError("need 0 < increase_per_second <= recovery_per_second")
        if self.minimum <= 0:
            raise ValueError("minimum must be positive")
        if self.increase_floor_per_second < 0:
            raise ValueError("increase_floor_per_second must not be negative")

    def admitted(self, now: float) -> int:
        """A call was let through now; returns the epoch it was admitted in."""
        self._admitted.append(now)
        self._forget_before(now - _MEASURE_SECONDS)
        return self.epoch

    def sending_rate(self, now: float) -> float:
        """Calls admitted in the last second."""
        self._forget_before(now - _MEASURE_SECONDS)
        return len(self._admitted) / _MEASURE_SECONDS

    def accepted_rate(self, now: float) -> float:
        """An estimate of what the provider accepted in the last second: the calls
        admitted less those it throttled. Throttles come back at once and successes
        only after the call's latency, so counting successes would see the calls of a
        latency ago (a fraction of the rate, in a worker still speeding up)."""
        self._forget_before(now - _MEASURE_SECONDS)
        return max(len(self._admitted) - len(self._throttled), 0) / _MEASURE_SECONDS

    def on_throttle(self, now: float, admitted_in_epoch: int) -> bool:
        """Lower the rate, unless the call was admitted before the last lowering or the
        last lowering is too recent (the same overload). True if it lowered."""
        self._throttled.append(now)
        if admitted_in_epoch < self.epoch or now < self._quiet_until:
            return False
        # What the provider accepted in the last second is the best guess at its
        # limit; with nothing accepted, the rate we were at is all there is to go on.
        accepted = self.accepted_rate(now)
        sent = self.sending_rate(now) if self.rate is None else self.rate
        base = min(accepted, sent) if accepted > 0 else sent
        self.ceiling = base
        self.rate = max(self.minimum, base * self.decrease_factor)
        self.epoch += 1
        self._raised_at = now
        self._quiet_until = now + self.quiet_seconds
        return True

    def on_success(self, now: float) -> None:
        """Raise a known rate for the time since the last change: fast while well below
        the last overload's rate, gently near it (nothing while the limit is unknown:
        nothing is paced then)."""
        if self.rate is None or self._raised_at is None:
            return
        elapsed = max(0.0, now - self._raised_at)
        near = self.ceiling is None or self.rate >= self.ceiling * _NEAR_CEILING
        growth = self.increase_per_second if near else self.recovery_per_second
        self.rate = max(
            self.rate * (1.0 + growth) ** elapsed,
            self.rate + self.increase_floor_per_second * elapsed,
        )
        self._raised_at = now

    def adopt(self, rate: float, now: float) -> None:
        """Take a rate decided elsewhere (this process's share of the rate every worker
        process learned together); it grows from now as a rate learned here would."""
        self.rate = max(self.minimum, rate)
        if self.ceiling is None:
            self.ceiling = self.rate
        self._raised_at = now

    def _forget_before(self, cutoff: float) -> None:
        for times in (self._admitted, self._throttled):
            while times and times[0] < cutoff:
                times.popleft()
