"""ApiKeyStore: API keys, stored only as hashes, found by their public id, revocable."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    key_id: str  # the public part of the key, unique, used for lookup and shown in lists
    tenant_id: str
    secret_hash: str  # sha256 hex of the whole key
    admin: bool
    created_at: float
    expires_at: float | None = None  # None: never expires
    revoked_at: float | None = None
    revoked_by: str | None = None  # who revoked it (an operator or an admin key id)


class RevokeOutcome(enum.StrEnum):
    REVOKED = "revoked"
    ALREADY_REVOKED = "already_revoked"  # nothing changed: the first revocation stands
    NOT_FOUND = "not_found"
    LAST_ADMIN = "last_admin"  # refused: no other usable admin key would remain


@dataclass(frozen=True, slots=True)
class Revocation:
    outcome: RevokeOutcome
    record: ApiKeyRecord | None  # the key as stored after the call; None when not found


class ApiKeyStore(Protocol):
    async def add_key(self, record: ApiKeyRecord) -> None:
        """Store a new key; StateConflictError if its key_id is taken."""
        ...

    async def find_key(self, key_id: str) -> ApiKeyRecord | None: ...

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Every key (revoked and expired ones too), oldest first."""
        ...

    async def revoke_key(
        self, key_id: str, *, actor: str, now: float, keep_an_admin: bool
    ) -> Revocation:
        """Mark a key revoked at ``now`` by ``actor``, in one conditional write.

        With ``keep_an_admin``, revoking an admin key that is usable at ``now``
        (not revoked, not expired) is refused (LAST_ADMIN) unless another admin key
        is usable at ``now``: checked and written atomically, so two operators each
        revoking one of the last two admin keys cannot lock everyone out.
        """
        ...
