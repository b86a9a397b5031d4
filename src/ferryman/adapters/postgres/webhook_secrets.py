"""PostgresWebhookSecretStore: each tenant's webhook signing secrets, sealed, in the
database every process shares (a rotation on one machine signs on all of them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.sql import MISC
from ferryman.ports.webhooks import StoredSecret

if TYPE_CHECKING:
    from ferryman.adapters.postgres.database import PostgresDatabase


class PostgresWebhookSecretStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def get_secret(self, tenant_id: str) -> StoredSecret | None:
        row = await self._db.fetch_one(MISC["get_webhook_secret"], {"tenant_id": tenant_id})
        if row is None:
            return None
        return StoredSecret(
            tenant_id=row["tenant_id"],
            current=row["current"],
            created_at=row["created_at"],
            previous=row["previous"],
            previous_until=row["previous_until"],
        )

    async def put_secret(self, secret: StoredSecret) -> None:
        await self._db.execute(
            MISC["put_webhook_secret"],
            {
                "tenant_id": secret.tenant_id,
                "current": secret.current,
                "previous": secret.previous,
                "previous_until": secret.previous_until,
                "created_at": secret.created_at,
            },
        )
