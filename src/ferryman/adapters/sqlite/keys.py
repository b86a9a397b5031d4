"""SqliteApiKeyStore: API keys by public id; only the secret's hash is stored.

Every lookup reads the shared file (no cache), so a key revoked by any process
is refused by every process from its next request on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.core.errors import StateConflictError
from ferryman.ports.keys import ApiKeyRecord, Revocation, RevokeOutcome

if TYPE_CHECKING:
    import sqlite3

    from ferryman.adapters.sqlite.database import SqliteDatabase


def _record(row: sqlite3.Row) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=row["key_id"],
        tenant_id=row["tenant_id"],
        secret_hash=row["secret_hash"],
        admin=bool(row["admin"]),
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        revoked_by=row["revoked_by"],
    )


def _find(conn: sqlite3.Connection, key_id: str) -> ApiKeyRecord | None:
    row = conn.execute(MISC["get_api_key"], {"key_id": key_id}).fetchone()
    return None if row is None else _record(row)


class SqliteApiKeyStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def add_key(self, record: ApiKeyRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            if _find(conn, record.key_id) is not None:
                raise StateConflictError("An API key with this id already exists.")
            conn.execute(
                MISC["insert_api_key"],
                {
                    "key_id": record.key_id,
                    "tenant_id": record.tenant_id,
                    "secret_hash": record.secret_hash,
                    "admin": int(record.admin),
                    "created_at": record.created_at,
                    "expires_at": record.expires_at,
                },
            )

        await self._db.write(op)

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        return await self._db.read(lambda conn: _find(conn, key_id))

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        def op(conn: sqlite3.Connection) -> list[ApiKeyRecord]:
            if tenant_id is None:
                rows = conn.execute(MISC["list_api_keys"]).fetchall()
            else:
                rows = conn.execute(
                    MISC["list_tenant_api_keys"], {"tenant_id": tenant_id}
                ).fetchall()
            return [_record(row) for row in rows]

        return await self._db.read(op)

    async def revoke_key(
        self, key_id: str, *, actor: str, now: float, keep_an_admin: bool
    ) -> Revocation:
        # One write transaction (BEGIN IMMEDIATE): the last-admin check and the update
        # cannot interleave with another process's revocation.
        def op(conn: sqlite3.Connection) -> Revocation:
            record = _find(conn, key_id)
            if record is None:
                return Revocation(RevokeOutcome.NOT_FOUND, None)
            if record.revoked_at is not None:
                return Revocation(RevokeOutcome.ALREADY_REVOKED, record)
            usable_admin = record.admin and (record.expires_at is None or record.expires_at > now)
            if keep_an_admin and usable_admin:
                others = conn.execute(
                    MISC["count_other_usable_admin_keys"], {"key_id": key_id, "now": now}
                ).fetchone()[0]
                if others == 0:
                    return Revocation(RevokeOutcome.LAST_ADMIN, record)
            conn.execute(MISC["revoke_api_key"], {"key_id": key_id, "now": now, "actor": actor})
            return Revocation(RevokeOutcome.REVOKED, _find(conn, key_id))

        return await self._db.write(op)
