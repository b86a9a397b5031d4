"""SqliteApiKeyStore: API keys by public prefix; only the secret's hash is stored."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.ports.keys import ApiKeyRecord

if TYPE_CHECKING:
    import sqlite3

    from ferryman.adapters.sqlite.database import SqliteDatabase


class SqliteApiKeyStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def add_key(self, record: ApiKeyRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            if conn.execute(MISC["get_api_key"], {"key_id": record.key_id}).fetchone():
                raise ValueError("an API key with this key_id already exists")
            conn.execute(
                MISC["insert_api_key"],
                {
                    "key_id": record.key_id,
                    "tenant_id": record.tenant_id,
                    "secret_hash": record.secret_hash,
                    "admin": int(record.admin),
                    "created_at": record.created_at,
                },
            )

        await self._db.write(op)

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        def op(conn: sqlite3.Connection) -> ApiKeyRecord | None:
            row = conn.execute(MISC["get_api_key"], {"key_id": key_id}).fetchone()
            if row is None:
                return None
            return ApiKeyRecord(
                key_id=row["key_id"],
                tenant_id=row["tenant_id"],
                secret_hash=row["secret_hash"],
                admin=bool(row["admin"]),
                created_at=row["created_at"],
            )

        return await self._db.read(op)
