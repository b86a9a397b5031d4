"""Additive-increase, multiplicative-decrease: how many calls a provider gets at once.

A throttled provider halves the window; every success widens it by 1/window, so
the window grows by about one per round trip. A backlog then shows up as queue
depth, not as a wall of 429s that each burn an attempt.

A window may start narrower than its maximum (``start``) and then *slow start*:
every success widens it by one, doubling it each round trip, until the first
throttle or the maximum. A fresh worker thus finds a provider's limit within a few
round trips instead of opening with its whole concurrency of 429s.

A burst of throttles answers one overload, so it narrows the window once: each call
is admitted under the window's current ``epoch``, and only a throttle of a call
admitted in the current epoch narrows it (and starts a new epoch). Calls that were
already in flight under the wider window do not narrow it again.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class AimdWindow:
    maximum: float
    minimum: float = 1.0
    decrease_factor: float = 0.5
    limit: float = 0.0
    epoch: int = 0
    # Where the window opens (0: at the maximum, no slow start).
    start: float = 0.0
    slow_start: bool = False

    def __post_init__(self) -> None:
        if self.minimum < 1 or self.maximum < self.minimum:
            raise ValueError("need 1 <= minimum <= maximum")
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must be within (0, 1)")
        if self.start and not self.minimum <= self.start <= self.maximum:
            raise ValueError("need minimum <= start <= maximum")
        if self.limit == 0.0:
            self.limit = self.start or self.maximum
            self.slow_start = self.limit < self.maximum

    @property
    def permits(self) -> int:
        return int(self.limit)

    def on_success(self) -> None:
        step = 1.0 if self.slow_start else 1.0 / self.limit
        self.limit = min(self.maximum, self.limit + step)
        if self.limit >= self.maximum:
            self.slow_start = False

    def on_throttle(self, admitted_in_epoch: int | None = None, *, floor: float = 0.0) -> bool:
        """Narrow the window, unless the throttled call was admitted before the last
        narrowing (``admitted_in_epoch`` older than ``epoch``). True if it narrowed.

        Never below ``floor`` (nor above the window as it was): the calls at once that a
        request rate paced elsewhere needs, so a provider limiting requests per second
        is answered by that rate alone, not by a halved window as well."""
        if admitted_in_epoch is not None and admitted_in_epoch < self.epoch:
            return False
        narrowed = max(self.minimum, self.limit * self.decrease_factor)
        self.limit = min(self.limit, max(narrowed, min(floor, self.maximum)))
        self.slow_start = False
        self.epoch += 1
        return True

    def adopt(self, limit: float) -> None:
        """Take a window decided elsewhere (this process's share of the window every
        worker process learned together), within this window's bounds."""
        self.limit = min(self.maximum, max(self.minimum, limit))
        if self.limit >= self.maximum:
            self.slow_start = False
