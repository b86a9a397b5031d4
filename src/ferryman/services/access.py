"""API keys: issue them once in plaintext, keep only their hash, authenticate, revoke.

A key reads ``fm_<key_id>_<secret>``. The key_id (12 hex characters) is the
public lookup prefix, and the id that lists show; the stored hash is the sha256 of
the whole key, compared in constant time. Every way a token can be wrong (unknown,
wrong secret, revoked, expired) raises the same AuthenticationError, so a caller
cannot tell them apart. Nothing is cached: each request reads the key's record, so
a revocation holds on every API process from its next request.

Revoking the last usable admin key is refused unless asked for explicitly: without
an admin key nobody can use the operations API, and over that API nobody could
undo it (the CLI, which writes to the database, can always create a new one).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import math
import re
import secrets
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import (
    ApiKeyNotFoundError,
    AuthenticationError,
    InvalidRequestError,
    LastAdminKeyError,
)
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.keys import ApiKeyStore, Revocation

KEY_PREFIX = "fm"
_KEY_ID_HEX_CHARS = 12
_TOKEN_RE = re.compile(r"fm_(?P<key_id>[0-9a-f]{12})_(?P<secret>[A-Za-z0-9_-]{16,128})")
_KEY_ID_RE = re.compile(r"(?:fm_)?(?P<key_id>[0-9a-f]{12})")
# What a tenant name may be (also told to the OpenAPI document).
TENANT_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
_TENANT_RE = re.compile(TENANT_PATTERN)
# The longest a key may be made to live: far beyond any real expiry, and near enough
# that every expiry stays a date that can be written (datetime stops at year 9999).
MAX_KEY_LIFETIME_SECONDS = 100 * 365 * 86_400
# Hashed when the key_id is unknown, so that path costs what a wrong secret costs.
_DUMMY_HASH = hashlib.sha256(b"ferryman-no-such-key").hexdigest()


class KeyState(enum.StrEnum):
    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


def key_state(record: ApiKeyRecord, now: float) -> KeyState:
    if record.revoked_at is not None:
        return KeyState.REVOKED
    if record.expires_at is not None and record.expires_at <= now:
        return KeyState.EXPIRED
    return KeyState.ACTIVE


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the tenant every request is scoped to, and the key that proved it."""

    tenant_id: str
    key_id: str
    admin: bool


@dataclass(frozen=True, slots=True)
class IssuedKey:
    token: str  # the key itself: shown once, never stored
    record: ApiKeyRecord


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

    def now(self) -> float:
        return self._clock.now()

    async def create(
        self, tenant_id: str, *, admin: bool = False, expires_at: float | None = None
    ) -> str:
        """Store a new key for the tenant and return it in plaintext: the only time it exists."""
        issued = await self.issue(tenant_id, admin=admin, expires_at=expires_at)
        return issued.token

    async def issue(
        self, tenant_id: str, *, admin: bool = False, expires_at: float | None = None
    ) -> IssuedKey:
        """Like create, also returning the stored record (for showing its id and expiry)."""
        validate_tenant_id(tenant_id)
        now = self._clock.now()
        if expires_at is not None and not (
            math.isfinite(expires_at) and now < expires_at <= now + MAX_KEY_LIFETIME_SECONDS
        ):
            msg = "the expiry must be in the future, and at most 100 years away"
            raise InvalidRequestError(msg, errors=[{"loc": ["expires_at"], "msg": msg}])
        key_id = secrets.token_hex(_KEY_ID_HEX_CHARS // 2)
        token = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
        record = ApiKeyRecord(
            key_id=key_id,
            tenant_id=tenant_id,
            secret_hash=hash_key(token),
            admin=admin,
            created_at=now,
            expires_at=expires_at,
        )
        await self._keys.add_key(record)
        return IssuedKey(token=token, record=record)

    async def authenticate(self, token: str) -> Principal:
        match = _TOKEN_RE.fullmatch(token)
        if match is None:
            raise AuthenticationError()
        record = await self._keys.find_key(match["key_id"])
        expected = record.secret_hash if record is not None else _DUMMY_HASH
        if not hmac.compare_digest(hash_key(token), expected) or record is None:
            raise AuthenticationError()
        if key_state(record, self._clock.now()) is not KeyState.ACTIVE:
            raise AuthenticationError()
        return Principal(tenant_id=record.tenant_id, key_id=record.key_id, admin=record.admin)

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        """Every key, or one tenant's, oldest first; records hold hashes, never secrets."""
        return await self._keys.list_keys(tenant_id=tenant_id)

    async def revoke(
        self, reference: str, *, actor: str, allow_last_admin: bool = False
    ) -> Revocation:
        """Revoke a key named by its id (as lists show it) or by the whole key.

        Revoking a revoked key changes nothing (ALREADY_REVOKED, the first revocation
        stands). An unknown id, or a whole key whose secret does not match, raises
        ApiKeyNotFoundError; the last usable admin key raises LastAdminKeyError
        unless ``allow_last_admin``.
        """
        key_id = await self._resolve(reference.strip())
        revocation = await self._keys.revoke_key(
            key_id, actor=actor, now=self._clock.now(), keep_an_admin=not allow_last_admin
        )
        if revocation.outcome is RevokeOutcome.NOT_FOUND:
            raise ApiKeyNotFoundError(f"No API key with id {key_id}.")
        if revocation.outcome is RevokeOutcome.LAST_ADMIN:
            raise LastAdminKeyError()
        return revocation

    async def _resolve(self, reference: str) -> str:
        token = _TOKEN_RE.fullmatch(reference)
        if token is not None:
            # A whole key counts only if it is one we issued: never revoke by a guess.
            record = await self._keys.find_key(token["key_id"])
            expected = record.secret_hash if record is not None else _DUMMY_HASH
            if record is None or not hmac.compare_digest(hash_key(reference), expected):
                raise ApiKeyNotFoundError("No API key matches that key.")
            return record.key_id
        key_id = _KEY_ID_RE.fullmatch(reference)
        if key_id is None:
            # Not echoed: a mangled key would put part of a secret in a message or log.
            raise ApiKeyNotFoundError(
                "No such API key: give the 12-character id that `keys list` shows, "
                "or the whole key."
            )
        return key_id["key_id"]
