"""PostgresApiKeyStore: API keys by public id; only the secret's hash is stored.

Every lookup reads the database (no cache), so a key revoked by any process on any
machine is refused by every process from its next request on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.database import Row, execute, fetch_one
from ferryman.adapters.postgres.sql import MISC
from ferryman.core.errors import StateConflictError
from ferryman.ports.keys import ApiKeyRecord, Revocation, RevokeOutcome

if TYPE_CHECKING:
    from typing import Any

    import psycopg

    from ferryman.adapters.postgres.database import PostgresDatabase


def _record(row: Row) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=row["key_id"],
        tenant_id=row["tenant_id"],
        secret_hash=row["secret_hash"],
        admin=row["admin"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        revoked_by=row["revoked_by"],
    )


async def _find(conn: psycopg.AsyncConnection[Any], key_id: str) -> ApiKeyRecord | None:
    row = await fetch_one(conn, MISC["get_api_key"], {"key_id": key_id})
    return None if row is None else _record(row)


class PostgresApiKeyStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def add_key(self, record: ApiKeyRecord) -> None:
        inserted = await self._db.execute(
            MISC["insert_api_key"],
            {
                "key_id": record.key_id,
                "tenant_id": record.tenant_id,
                "secret_hash": record.secret_hash,
                "admin": record.admin,
                "created_at": record.created_at,
                "expires_at": record.expires_at,
            },
        )
        if inserted != 1:
            raise StateConflictError("An API key with this id already exists.")

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        row = await self._db.fetch_one(MISC["get_api_key"], {"key_id": key_id})
        return None if row is None else _record(row)

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        if tenant_id is None:
            rows = await self._db.fetch_all(MISC["list_api_keys"])
        else:
            rows = await self._db.fetch_all(MISC["list_tenant_api_keys"], {"tenant_id": tenant_id})
        return [_record(row) for row in rows]

    async def revoke_key(
        self, key_id: str, *, actor: str, now: float, keep_an_admin: bool
    ) -> Revocation:
        # Revocations take turns on an advisory lock held to the end of the
        # transaction: the last-admin check and the update cannot interleave with
        # another process's revocation.
        async with self._db.transaction() as conn:
            await conn.execute(MISC["lock_key_revocations"])
            record = await _find(conn, key_id)
            if record is None:
                return Revocation(RevokeOutcome.NOT_FOUND, None)
            if record.revoked_at is not None:
                return Revocation(RevokeOutcome.ALREADY_REVOKED, record)
            usable_admin = record.admin and (record.expires_at is None or record.expires_at > now)
            if keep_an_admin and usable_admin:
                others = await fetch_one(
                    conn, MISC["count_other_usable_admin_keys"], {"key_id": key_id, "now": now}
                )
                if others is None or others["n"] == 0:
                    return Revocation(RevokeOutcome.LAST_ADMIN, record)
            await execute(
                conn, MISC["revoke_api_key"], {"key_id": key_id, "now": now, "actor": actor}
            )
            return Revocation(RevokeOutcome.REVOKED, await _find(conn, key_id))
