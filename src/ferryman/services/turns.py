"""Turns per key: at most ``per_key`` callers of one key (a tenant) inside at once; the
others wait their turn, in order.

A tenant that sends a hundred lists at once then reads two pages at a time instead of a
hundred: its own requests queue behind each other, and the store (SQLite's one reader
thread, PostgreSQL's pool) stays free for every other tenant's requests.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@dataclass(slots=True)
class _Turns:
    semaphore: asyncio.Semaphore
    # Inside or waiting: the entry goes when the last of them leaves.
    callers: int = 0


class TurnsPerKey:
    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise ValueError("per_key must be positive")
        self._per_key = per_key
        self._turns: dict[str, _Turns] = {}

    @asynccontextmanager
    async def turn(self, key: str) -> AsyncIterator[None]:
        turns = self._turns.get(key)
        if turns is None:
            turns = self._turns[key] = _Turns(asyncio.Semaphore(self._per_key))
        turns.callers += 1
        try:
            async with turns.semaphore:
                yield
        finally:
            turns.callers -= 1
            if turns.callers == 0:
                del self._turns[key]

    def __len__(self) -> int:
        """Keys with a caller inside or waiting."""
        return len(self._turns)
