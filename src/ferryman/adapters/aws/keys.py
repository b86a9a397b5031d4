"""DynamoApiKeyStore: API keys by public id on the engine's table; only hashes are kept.

Each key is two items written and changed together in one TransactWriteItems:

- ``apikey#<key_id>`` / ``key``: found by id with one strongly consistent GetItem,
  so a key revoked by any process is refused by every process from its next request;
- ``apikeys`` / ``<created_at>#<key_id>``: the same record in one partition, so the
  list is one Query (never a Scan). Keys are few (people make them), so a single
  partition holds them all.

Keeping an admin key. Revoking a usable admin key with ``keep_an_admin`` names a
*witness*: another admin key that is usable at ``now``. The transaction revokes the
key only while it is unrevoked and, with a ConditionCheck, only while the witness is
still unrevoked (its expiry never changes, and it was past ``now`` already). DynamoDB
serializes transactions that touch the same items: of two operators revoking the
last two admin keys at once, each naming the other's key as witness, one commits and
the other's ConditionCheck fails; that one reads again, finds no witness left, and is
refused (LAST_ADMIN). Why not a counter of usable admin keys: "usable" depends on
``now`` (a key expires without any write), so no counter stays true; a guard item
bumped by every revocation would be one hot item for a check the witness makes on
the keys themselves. A witness revoked meanwhile costs one more read and try.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.attribute_values import (
    Item,
    flag,
    need_float,
    need_text,
    number,
    optional,
    read_flag,
    read_float,
    read_text,
    text,
)
from ferryman.adapters.aws.cancellation import (
    CONDITION_FAILED,
    MAX_ATTEMPTS,
    back_off,
    cancellation_reasons,
)
from ferryman.adapters.aws.errors import translate_errors
from ferryman.core.errors import StateConflictError, StoreUnavailableError
from ferryman.ports.keys import ApiKeyRecord, Revocation, RevokeOutcome

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients

KEY_SK = "key"
LIST_PK = "apikeys"


def key_pk(key_id: str) -> str:
    return f"apikey#{key_id}"


def list_sk(record: ApiKeyRecord) -> str:
    """Sorts by creation time (epoch seconds, zero-padded) then id; list_keys still
    sorts exactly, this only keeps a page of the partition in roughly that order."""
    return f"{max(0.0, record.created_at):020.6f}#{record.key_id}"


def _usable_admin(record: ApiKeyRecord, now: float) -> bool:
    return (
        record.admin
        and record.revoked_at is None
        and (record.expires_at is None or record.expires_at > now)
    )


def _attributes(record: ApiKeyRecord) -> Item:
    item: Item = {
        "key_id": text(record.key_id),
        "tenant_id": text(record.tenant_id),
        "secret_hash": text(record.secret_hash),
        "admin": flag(record.admin),
        "created_at": number(record.created_at),
    }
    optional(item, "expires_at", record.expires_at)
    optional(item, "revoked_at", record.revoked_at)
    optional(item, "revoked_by", record.revoked_by)
    return item


def _record(item: Item) -> ApiKeyRecord:
    return ApiKeyRecord(
        key_id=need_text(item, "key_id"),
        tenant_id=need_text(item, "tenant_id"),
        secret_hash=need_text(item, "secret_hash"),
        admin=read_flag(item, "admin"),
        created_at=need_float(item, "created_at"),
        expires_at=read_float(item, "expires_at"),
        revoked_at=read_float(item, "revoked_at"),
        revoked_by=read_text(item, "revoked_by"),
    )


def _witness(candidates: list[ApiKeyRecord]) -> ApiKeyRecord | None:
    """The admin key least likely to be gone by the time the transaction runs: one
    that never expires, else the one expiring last."""
    if not candidates:
        return None
    return max(candidates, key=lambda r: float("inf") if r.expires_at is None else r.expires_at)


class DynamoApiKeyStore:
    def __init__(self, clients: AwsClients, table: str) -> None:
        self._db = clients.dynamodb
        self._table = table

    async def add_key(self, record: ApiKeyRecord) -> None:
        attributes = _attributes(record)
        new = "attribute_not_exists(pk)"
        items = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": {"pk": text(key_pk(record.key_id)), "sk": text(KEY_SK), **attributes},
                    "ConditionExpression": new,
                }
            },
            {
                "Put": {
                    "TableName": self._table,
                    "Item": {"pk": text(LIST_PK), "sk": text(list_sk(record)), **attributes},
                    "ConditionExpression": new,
                }
            },
        ]
        for attempt in range(MAX_ATTEMPTS):
            try:
                with translate_errors("dynamodb"):
                    await self._db.transact_write_items(TransactItems=items)
            except Exception as exc:
                reasons = cancellation_reasons(exc)
                if reasons is None:
                    raise
                if any(r.code == CONDITION_FAILED for r in reasons):
                    raise StateConflictError("An API key with this id already exists.") from exc
                # Another transaction held an item (the same id added at once): again.
                await back_off(attempt)
                continue
            return
        raise StoreUnavailableError("dynamodb: adding the API key kept colliding; try again")

    async def find_key(self, key_id: str) -> ApiKeyRecord | None:
        with translate_errors("dynamodb"):
            response = await self._db.get_item(
                TableName=self._table,
                Key={"pk": text(key_pk(key_id)), "sk": text(KEY_SK)},
                ConsistentRead=True,
            )
        item = response.get("Item")
        return None if item is None else _record(item)

    async def list_keys(self, *, tenant_id: str | None = None) -> list[ApiKeyRecord]:
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": text(LIST_PK)},
            "ConsistentRead": True,
        }
        if tenant_id is not None:
            query["FilterExpression"] = "tenant_id = :tenant"
            query["ExpressionAttributeValues"][":tenant"] = text(tenant_id)
        records: list[ApiKeyRecord] = []
        with translate_errors("dynamodb"):
            while True:
                response = await self._db.query(**query)
                records += [_record(item) for item in response.get("Items", [])]
                last = response.get("LastEvaluatedKey")
                if not last:
                    break
                query["ExclusiveStartKey"] = last
        return sorted(records, key=lambda r: (r.created_at, r.key_id))

    async def revoke_key(
        self, key_id: str, *, actor: str, now: float, keep_an_admin: bool
    ) -> Revocation:
        for attempt in range(MAX_ATTEMPTS):
            record = await self.find_key(key_id)
            if record is None:
                return Revocation(RevokeOutcome.NOT_FOUND, None)
            if record.revoked_at is not None:
                return Revocation(RevokeOutcome.ALREADY_REVOKED, record)
            witness = None
            if keep_an_admin and _usable_admin(record, now):
                witness = _witness(
                    [
                        other
                        for other in await self.list_keys()
                        if other.key_id != key_id and _usable_admin(other, now)
                    ]
                )
                if witness is None:
                    return Revocation(RevokeOutcome.LAST_ADMIN, record)
            revoked = dataclasses.replace(record, revoked_at=now, revoked_by=actor)
            if await self._write_revocation(revoked, witness):
                return Revocation(RevokeOutcome.REVOKED, revoked)
            # Revoked meanwhile, or the witness was: read again and decide again.
            await back_off(attempt)
        raise StoreUnavailableError(
            "dynamodb: API key revocations kept colliding; try the revocation again"
        )

    async def _write_revocation(self, revoked: ApiKeyRecord, witness: ApiKeyRecord | None) -> bool:
        """One transaction: the key's two items, only while it is unrevoked, and only
        while the witness (when there is one) is unrevoked too. False: a condition
        did not hold, or another transaction held an item."""
        change = {
            "UpdateExpression": "SET revoked_at = :at, revoked_by = :by",
            "ConditionExpression": "attribute_exists(pk) AND attribute_not_exists(revoked_at)",
            "ExpressionAttributeValues": {
                ":at": number(revoked.revoked_at or 0.0),
                ":by": text(revoked.revoked_by or ""),
            },
        }
        items: list[dict[str, Any]] = [
            {
                "Update": {
                    "TableName": self._table,
                    "Key": {"pk": text(key_pk(revoked.key_id)), "sk": text(KEY_SK)},
                    **change,
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": {"pk": text(LIST_PK), "sk": text(list_sk(revoked))},
                    **change,
                }
            },
        ]
        if witness is not None:
            items.append(
                {
                    "ConditionCheck": {
                        "TableName": self._table,
                        "Key": {"pk": text(key_pk(witness.key_id)), "sk": text(KEY_SK)},
                        "ConditionExpression": (
                            "attribute_exists(pk) AND attribute_not_exists(revoked_at)"
                        ),
                    }
                }
            )
        try:
            with translate_errors("dynamodb"):
                await self._db.transact_write_items(TransactItems=items)
        except Exception as exc:
            if cancellation_reasons(exc) is None:
                raise
            return False
        return True
