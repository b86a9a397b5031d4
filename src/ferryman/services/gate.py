"""A per-provider concurrency gate whose width follows core.aimd."""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

from ferryman.core.aimd import AimdWindow

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class ProviderGate:
    """Admits at most ``window.permits`` calls at once; narrows when throttled."""

    def __init__(self, maximum: int) -> None:
        self.window = AimdWindow(maximum=float(max(1, maximum)))
        self._active = 0
        self._changed = asyncio.Condition()

    @property
    def active(self) -> int:
        return self._active

    @asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        async with self._changed:
            await self._changed.wait_for(lambda: self._active < self.window.permits)
            self._active += 1
        try:
            yield
        finally:
            async with self._changed:
                self._active -= 1
                self._changed.notify_all()

    async def record(self, *, throttled: bool) -> None:
        async with self._changed:
            if throttled:
                self.window.on_throttle()
            else:
                self.window.on_success()
            self._changed.notify_all()
