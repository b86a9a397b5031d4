"""DynamoWebhookSecretStore: each tenant's webhook signing secrets, one item of the table.

``webhook_secret#<tenant>`` / ``secret`` holds the secrets as the sealer left them
(ports/webhooks.py: never in the clear): the current one and, during a rotation, the
one it replaced with the time it stops signing. A rotation replaces the item whole with
one PutItem, so a reader sees the old pair or the new one, never half of each; reads
are strongly consistent, so a rotation is seen by every process at its next signing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.aws.attribute_values import (
    Item,
    need_float,
    need_text,
    number,
    optional,
    read_float,
    read_text,
    text,
)
from ferryman.adapters.aws.errors import translate_errors
from ferryman.adapters.aws.store_writes import key
from ferryman.ports.webhooks import StoredSecret

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients

SECRET_SK = "secret"


def secret_pk(tenant_id: str) -> str:
    return f"webhook_secret#{tenant_id}"


def _item(secret: StoredSecret) -> Item:
    item: Item = {
        **key(secret_pk(secret.tenant_id), SECRET_SK),
        "tenant_id": text(secret.tenant_id),
        "current": text(secret.current),
        "created_at": number(secret.created_at),
    }
    optional(item, "previous", secret.previous)
    optional(item, "previous_until", secret.previous_until)
    return item


def _secret(item: Item) -> StoredSecret:
    return StoredSecret(
        tenant_id=need_text(item, "tenant_id"),
        current=need_text(item, "current"),
        created_at=need_float(item, "created_at"),
        previous=read_text(item, "previous"),
        previous_until=read_float(item, "previous_until"),
    )


class DynamoWebhookSecretStore:
    """The WebhookSecretStore port on the engine's table."""

    def __init__(self, clients: AwsClients, table: str) -> None:
        self._db = clients.dynamodb
        self._table = table

    async def get_secret(self, tenant_id: str) -> StoredSecret | None:
        with translate_errors("dynamodb"):
            response = await self._db.get_item(
                TableName=self._table,
                Key=key(secret_pk(tenant_id), SECRET_SK),
                ConsistentRead=True,
            )
        item = response.get("Item")
        return None if item is None else _secret(item)

    async def put_secret(self, secret: StoredSecret) -> None:
        with translate_errors("dynamodb"):
            await self._db.put_item(TableName=self._table, Item=_item(secret))
