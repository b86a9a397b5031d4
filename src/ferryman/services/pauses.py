"""Which providers are paused: a worker looks before it claims a job for one.

A provider is paused when it refused our credentials (a worker pauses it; every other
job would be refused too) or by an operator; it stays paused until resumed. A worker
reads the set at most once a second.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferryman.ports.control import ControlStore

# How long a worker trusts its last look at which providers are paused.
PAUSES_CACHE_SECONDS = 1.0


class ProviderPauses:
    """Which providers are paused, read at most once a second per worker."""

    def __init__(self, control: ControlStore) -> None:
        self._control = control
        self._paused: frozenset[str] = frozenset()
        self._read_at = float("-inf")

    async def paused(self, provider: str) -> bool:
        await self.refresh()
        return provider in self._paused

    async def refresh(self) -> None:
        """Read the set again if the last look is too old to trust."""
        now = time.monotonic()
        if now - self._read_at > PAUSES_CACHE_SECONDS:
            self._paused = await self._control.paused_providers()
            self._read_at = now

    def known(self, provider: str) -> bool | None:
        """Whether it is paused, from a look still fresh enough to trust; None when the
        next ``paused`` would read again (this never reads: it may run off the loop)."""
        if time.monotonic() - self._read_at > PAUSES_CACHE_SECONDS:
            return None
        return provider in self._paused

    def mark_paused(self, provider: str) -> None:
        """This worker paused it: no need to wait for the next look to know."""
        self._paused = self._paused | {provider}
