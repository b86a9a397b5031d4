"""API keys: issue them once in plaintext, keep only their hash, authenticate callers.

A key reads ``fm_<key_id>_<secret>``. The key_id (12 hex characters) is the
public lookup prefix; the stored hash is the sha256 of the whole key, compared in
constant time. Every way a token can be wrong raises the same AuthenticationError,
so a caller cannot tell an unknown key from a wrong secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import AuthenticationError, InvalidRequestError
from ferryman.ports.keys import ApiKeyRecord

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.keys import ApiKeyStore

KEY_PREFIX = "fm"
_KEY_ID_HEX_CHARS = 12
_TOKEN_RE = re.compile(r"fm_(?P<key_id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{16,128})")
_TENANT_RE = re.compile(r"[A-Za-z0-9._-]{1,64}")
# Hashed when the key_id is unknown, so that path costs what a wrong secret costs.
_DUMMY_HASH = hashlib.sha256(b"ferryman-no-such-key").hexdigest()


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant every request is scoped to, and the key that proved it."""

    tenant_id: str
    key_id: str
    admin: bool


def validate_tenant_id(tenant_id: str) -> str:
    if not _TENANT_RE.fullmatch(tenant_id):
        msg = "a tenant name is 1-64 characters of A-Z, a-z, 0-9, '.', '_' and '-'"
        raise InvalidRequestError(msg, errors=[{"loc": ["tenant"], "msg": msg}])
    return tenant_id


def hash_key(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


class ApiKeys:
    def __init__(self, keys: ApiKeyStore, clock: Clock) -> None:
        self._keys = keys
        self._clock = clock

    async def create(self, tenant_id: str, *, admin: bool = False) -> str:
        """Store a new key for the tenant and return it in plaintext: the only time it exists."""
        validate_tenant_id(tenant_id)
        key_id = secrets.token_hex(_KEY_ID_HEX_CHARS // 2)
        token = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        await self._keys.add_key(
            ApiKeyRecord(
                key_id=key_id,
                tenant_id=tenant_id,
                secret_hash=hash_key(token),
                admin=admin,
                created_at=self._clock.now(),
            )
        )
        return token

    async def authenticate(self, token: str) -> Principal:
        match = _TOKEN_RE.fullmatch(token)
        if match is None:
            raise AuthenticationError()
        record = await self._keys.find_key(match["key_id"])
        expected = record.secret_hash if record is not None else _DUMMY_HASH
        if not hmac.compare_digest(hash_key(token), expected) or record is None:
            raise AuthenticationError()
        return Principal(tenant_id=record.tenant_id, key_id=record.key_id, admin=record.admin)
