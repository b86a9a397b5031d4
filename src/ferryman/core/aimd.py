"""Additive-increase, multiplicative-decrease: how many calls a provider gets at once.

A throttled provider halves the window; every success widens it by 1/window, so
the window grows by about one per round trip. A backlog then shows up as queue
depth, not as a wall of 429s that each burn an attempt.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class AimdWindow:
    maximum: float
    minimum: float = 1.0
    decrease_factor: float = 0.5
    limit: float = 0.0

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

    def on_throttle(self) -> None:
        self.limit = max(self.minimum, self.limit * self.decrease_factor)
