"""ResultStore: where validated model outputs are kept, under attempt-specific keys."""

from __future__ import annotations

from typing import Protocol


class ResultStore(Protocol):
    async def put(self, key: str, data: bytes) -> str:
        """Store durably (on return it survives a crash) and return the reference to publish."""
        ...

    async def get(self, ref: str) -> bytes:
        """Raises KeyError when nothing is stored under ref."""
        ...
