"""ApiKeyStore: API keys, stored only as hashes and found by their public prefix."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    key_id: str  # the public prefix, unique, used for lookup
    tenant_id: str
    secret_hash: str  # sha256 hex of the whole key
    admin: bool
    created_at: float


class ApiKeyStore(Protocol):
    async def add_key(self, record: ApiKeyRecord) -> None: ...

    async def find_key(self, key_id: str) -> ApiKeyRecord | None: ...
