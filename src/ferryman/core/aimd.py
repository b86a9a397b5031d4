"""Additive-increase, multiplicative-decrease: how many calls a provider gets at once.

A throttled provider halves the window; every success widens it by 1/window, so
the window grows by about one per round trip. A backlog then shows up as queue
depth, not as a wall of 429s that each burn an attempt.

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

    def __post_init__(self) -> None:
        if self.minimum < 1 or self.maximum < self.minimum:
            raise ValueError("need 1 <= minimum <= maximum")
        if not 0 < self.decrease_factor < 1:
            raise ValueError("decrease_factor must be within (0, 1)")
        if self.limit == 0.0:
            self.limit = self.maximum

    @property
    def permits(self) -> int:
        return int(self.limit)

    def on_success(self) -> None:
        self.limit = min(self.maximum, self.limit + 1.0 / self.limit)

    def on_throttle(self, admitted_in_epoch: int | None = None) -> bool:
        """Narrow the window, unless the throttled call was admitted before the last
        narrowing (``admitted_in_epoch`` older than ``epoch``). True if it narrowed."""
        if admitted_in_epoch is not None and admitted_in_epoch < self.epoch:
            return False
        self.limit = max(self.minimum, self.limit * self.decrease_factor)
        self.epoch += 1
        return True
