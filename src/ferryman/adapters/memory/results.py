"""InMemoryResultStore: validated outputs kept in a dict, verified on read like the others."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ferryman.core.errors import ResultUnreadableError
from ferryman.core.results import checksum, gone_jobs, job_id_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

_REF = re.compile(r"^memory://(.+?)#sha256=([0-9a-f]{64})$", re.DOTALL)


class InMemoryResultStore:
    def __init__(self) -> None:
        self._data: dict[str, bytes] = {}

    async def put(self, key: str, data: bytes) -> str:
        if not key:
            raise ValueError("a result key cannot be empty")
        self._data[key] = bytes(data)
        return f"memory://{key}#sha256={checksum(data)}"

    async def get(self, ref: str, *, key: str) -> bytes:
        match = _REF.match(ref)
        if match is None or match.group(1) != key:
            raise ResultUnreadableError("the stored result's reference names another result")
        data = self._data.get(key)
        if data is None:
            raise ResultUnreadableError("the stored result is missing")
        if checksum(data) != match.group(2):
            raise ResultUnreadableError("the stored result's bytes do not match their checksum")
        return data

    async def probe(self) -> None:
        return None

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        owners = {key: job_id_of(key) for key in self._data}
        gone = await gone_jobs({o for o in owners.values() if o}, any_job_exists)
        reclaimed = 0
        for key, owner in owners.items():
            if owner in gone:
                reclaimed += len(self._data.pop(key))
        return reclaimed
