"""InMemoryApiKeyStore: API key records by their public id."""

from __future__ import annotations

import dataclasses

from ferryman.core.errors import StateConflictError
from ferryman.ports.keys import ApiKeyRecord, Revocation, RevokeOutcome


def _usable_admin(record: ApiKeyRecord, now: float) -> bool:
    return (
        record.admin
        and record.revoked_at is None
        and (record.expires_at is None or record.expires_at > now)
    )


class InMemoryApiKeyStore:
    def __init__(self) -> None:
        self._records: dict[str, ApiKeyRecord] = {}

    async def add_key(self, record: ApiKeyRecord) -> None:
        if record.key_id in self._records:
            raise StateConflictError("An API key with this id already exists.")
        self._records[record.key_id] = record

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        return self._records.get(key_id)

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        found = [r for r in self._records.values() if tenant_id in (None, r.tenant_id)]
        return sorted(found, key=lambda r: (r.created_at, r.key_id))

    async def revoke_key(
        self, key_id: str, *, actor: str, now: float, keep_an_admin: bool
    ) -> Revocation:
        record = self._records.get(key_id)
        if record is None:
            return Revocation(RevokeOutcome.NOT_FOUND, None)
        if record.revoked_at is not None:
            return Revocation(RevokeOutcome.ALREADY_REVOKED, record)
        if (
            keep_an_admin
            and _usable_admin(record, now)
            and not any(
                _usable_admin(other, now)
                for other in self._records.values()
                if other.key_id != key_id
            )
        ):
            return Revocation(RevokeOutcome.LAST_ADMIN, record)
        revoked = dataclasses.replace(record, revoked_at=now, revoked_by=actor)
        self._records[key_id] = revoked
        return Revocation(RevokeOutcome.REVOKED, revoked)
