"""InMemoryApiKeyStore: API key records by their public prefix."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.core.errors import StateConflictError

if TYPE_CHECKING:
    from ferryman.ports.keys import ApiKeyRecord


class InMemoryApiKeyStore:
    def __init__(self) -> None:
        self._records: dict[str, ApiKeyRecord] = {}

    async def add_key(self, record: ApiKeyRecord) -> None:
        if record.key_id in self._records:
            raise StateConflictError("An API key with this id already exists.")
        self._records[record.key_id] = record

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        return self._records.get(key_id)
