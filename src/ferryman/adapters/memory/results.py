"""InMemoryResultStore: validated outputs kept in a dict."""

from __future__ import annotations


class InMemoryResultStore:
    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes) -> str:
        ref = f"memory://{key}"
        self._data[ref] = bytes(data)
        return ref

    async def get(self, ref: str) -> bytes:
        return self._data[ref]
