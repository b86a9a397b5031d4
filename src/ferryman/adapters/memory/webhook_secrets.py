"""InMemoryWebhookSecretStore: each tenant's webhook signing secrets, by tenant."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferryman.ports.webhooks import StoredSecret


class InMemoryWebhookSecretStore:
    def __init__(self) -> None:
        self._secrets: dict[str, StoredSecret] = {}

    async def get_secret(self, tenant_id: str) -> StoredSecret | None:
        return self._secrets.get(tenant_id)

    async def put_secret(self, secret: StoredSecret) -> None:
        self._secrets[secret.tenant_id] = secret
