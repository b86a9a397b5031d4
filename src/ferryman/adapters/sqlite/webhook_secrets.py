"""SqliteWebhookSecretStore: each tenant's webhook signing secrets, sealed, in the file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.ports.webhooks import StoredSecret

if TYPE_CHECKING:
    import sqlite3

    from ferryman.adapters.sqlite.database import SqliteDatabase


class SqliteWebhookSecretStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def get_secret(self, tenant_id: str) -> StoredSecret | None:
        def op(conn: sqlite3.Connection) -> StoredSecret | None:
            row = conn.execute(MISC["get_webhook_secret"], {"tenant_id": tenant_id}).fetchone()
            if row is None:
                return None
            return StoredSecret(
                tenant_id=row["tenant_id"],
                current=row["current"],
                created_at=row["created_at"],
                previous=row["previous"],
                previous_until=row["previous_until"],
            )

        return await self._db.read(op)

    async def put_secret(self, secret: StoredSecret) -> None:
        params = {
            "tenant_id": secret.tenant_id,
            "current": secret.current,
            "previous": secret.previous,
            "previous_until": secret.previous_until,
            "created_at": secret.created_at,
        }
        await self._db.write(lambda conn: conn.execute(MISC["put_webhook_secret"], params))
