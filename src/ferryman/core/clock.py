"""Time as a dependency, so lease and retry rules can be tested without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Wall-clock seconds since the epoch, as a float."""

    def now(self) -> float: ...


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()


class FakeClock:
    """A clock that moves only when told to; tests use it instead of sleeping."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("a clock does not run backwards")
        self._now += seconds

    def set(self, at: float) -> None:
        self._now = at
