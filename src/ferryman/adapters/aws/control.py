"""DynamoControlStore: operator switches, provider pauses and the audit log on the table.

Items:

- ``switch`` / ``<switch>``: one item per switch (``intake``, ``workers``,
  ``provider:<name>``) in one partition, so every pause is one strongly consistent
  Query. Each provider pause change is one conditional write on its item: an
  automatic pause only over no pause, a probe taken only while due, a resume only of
  the automatic pause that began at ``since``.
- ``audit`` / ``id#<record_id:019d>``: the audit log, newest first by sort key.
  ``audit`` / ``next`` holds the last record id given out.

A change and its audit record are one TransactWriteItems: the switch's item (with
its own condition), the counter moved from the id read to the next one (conditioned
on the id read), and the record under that id. Two changes at once read the same id;
one commits, the other's counter condition fails and it tries again with the next
id. So ids increase in commit order with no gap, and a change is never recorded
without its audit record nor the other way round. Operator actions are rare, so the
one counter item is never hot.
"""

from __future__ import annotations

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
    read_int,
    read_text,
    text,
)
from ferryman.adapters.aws.cancellation import (
    CONDITION_FAILED,
    MAX_ATTEMPTS,
    back_off,
    cancellation_reasons,
    condition_failed,
)
from ferryman.adapters.aws.errors import translate_errors
from ferryman.core.errors import StoreUnavailableError
from ferryman.ports.control import (
    PROVIDER_SWITCH_PREFIX,
    AuditAction,
    AuditRecord,
    ProviderPause,
    Switch,
    provider_switch,
)

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients

SWITCH_PK = "switch"
AUDIT_PK = "audit"
AUDIT_COUNTER_SK = "next"
_AUDIT_SK_PREFIX = "id#"
# record_id is a signed 64-bit integer in every engine: 19 digits hold its maximum.
MAX_RECORD_ID = 2**63 - 1


def _audit_sk(record_id: int) -> str:
    return f"{_AUDIT_SK_PREFIX}{record_id:019d}"


def _pause(item: Item | None) -> ProviderPause | None:
    """A paused switch's item as a provider's pause (None for any other)."""
    if item is None or not read_flag(item, "paused"):
        return None
    switch = need_text(item, "sk")
    if not switch.startswith(PROVIDER_SWITCH_PREFIX):
        return None
    return ProviderPause(
        provider=switch.removeprefix(PROVIDER_SWITCH_PREFIX),
        since=need_float(item, "paused_at"),
        actor=need_text(item, "actor"),
        reason=read_text(item, "reason"),
        automatic=read_flag(item, "automatic"),
        next_probe_at=read_float(item, "next_probe_at"),
        probe_interval_seconds=read_float(item, "probe_interval_seconds"),
    )


def _audit_record(item: Item) -> AuditRecord:
    return AuditRecord(
        at=need_float(item, "at"),
        actor=need_text(item, "actor"),
        action=AuditAction(need_text(item, "action")),
        target=need_text(item, "target"),
        reason=read_text(item, "reason"),
        record_id=read_int(item, "record_id"),
    )


class DynamoControlStore:
    def __init__(self, clients: AwsClients, table: str) -> None:
        self._db = clients.dynamodb
        self._table = table

    def _key(self, pk: str, sk: str) -> dict[str, Any]:
        return {"pk": text(pk), "sk": text(sk)}

    async def _switch_items(self) -> list[Item]:
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": text(SWITCH_PK)},
            "ConsistentRead": True,
        }
        items: list[Item] = []
        with translate_errors("dynamodb"):
            while True:
                response = await self._db.query(**query)
                items += response.get("Items", [])
                if not response.get("LastEvaluatedKey"):
                    return items
                query["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    async def paused(self) -> frozenset[Switch]:
        # A switch written by a newer version that this one does not know is ignored.
        known = {str(s) for s in Switch}
        return frozenset(
            Switch(need_text(item, "sk"))
            for item in await self._switch_items()
            if read_flag(item, "paused") and need_text(item, "sk") in known
        )

    async def paused_providers(self) -> frozenset[str]:
        return frozenset(await self.provider_pauses())

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        pauses = (_pause(item) for item in await self._switch_items())
        return {pause.provider: pause for pause in pauses if pause is not None}

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(str(switch), paused, actor=actor, now=now, reason=reason)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(provider_switch(provider), paused, actor=actor, now=now, reason=reason)

    async def _flip(
        self, switch: str, paused: bool, *, actor: str, now: float, reason: str | None
    ) -> None:
        # An operator's flip replaces the item whole: a pause is the operator's (never
        # lifted automatically, no probe), whatever paused it before; a resume lifts any.
        item: Item = {
            **self._key(SWITCH_PK, switch),
            "paused": flag(paused),
            "actor": text(actor),
            "updated_at": number(now),
            "automatic": flag(False),
            "paused_at": number(now),
        }
        optional(item, "reason", reason)
        record = AuditRecord(
            at=now,
            actor=actor,
            action=AuditAction.PAUSE if paused else AuditAction.RESUME,
            target=switch,
            reason=reason,
        )
        await self._audited({"Put": {"TableName": self._table, "Item": item}}, record)

    async def pause_provider_automatically(self, pause: ProviderPause) -> bool:
        switch = provider_switch(pause.provider)
        item: Item = {
            **self._key(SWITCH_PK, switch),
            "paused": flag(True),
            "actor": text(pause.actor),
            "updated_at": number(pause.since),
            "automatic": flag(True),
            "paused_at": number(pause.since),
        }
        optional(item, "reason", pause.reason)
        optional(item, "next_probe_at", pause.next_probe_at)
        optional(item, "probe_interval_seconds", pause.probe_interval_seconds)
        change = {
            "Put": {
                "TableName": self._table,
                "Item": item,
                # Only over no pause: an operator's stays the operator's, and an
                # automatic one keeps its schedule.
                "ConditionExpression": "attribute_not_exists(pk) OR paused = :false",
                "ExpressionAttributeValues": {":false": flag(False)},
            }
        }
        record = AuditRecord(
            at=pause.since,
            actor=pause.actor,
            action=AuditAction.PAUSE,
            target=switch,
            reason=pause.reason,
        )
        return await self._audited(change, record)

    async def take_provider_probe(
        self, provider: str, *, now: float, next_probe_at: float, probe_interval_seconds: float
    ) -> ProviderPause | None:
        # The one process whose update matches probes; the others find it moved on.
        try:
            with translate_errors("dynamodb"):
                response = await self._db.update_item(
                    TableName=self._table,
                    Key=self._key(SWITCH_PK, provider_switch(provider)),
                    UpdateExpression="SET next_probe_at = :next, probe_interval_seconds = :every",
                    ConditionExpression=(
                        "paused = :true AND automatic = :true AND next_probe_at <= :now"
                    ),
                    ExpressionAttributeValues={
                        ":true": flag(True),
                        ":now": number(now),
                        ":next": number(next_probe_at),
                        ":every": number(probe_interval_seconds),
                    },
                    ReturnValues="ALL_NEW",
                )
        except Exception as exc:
            if condition_failed(exc):
                return None
            raise
        return _pause(response.get("Attributes"))

    async def resume_provider_automatically(
        self, provider: str, *, since: float, actor: str, now: float, reason: str
    ) -> bool:
        switch = provider_switch(provider)
        change = {
            "Update": {
                "TableName": self._table,
                "Key": self._key(SWITCH_PK, switch),
                "UpdateExpression": (
                    "SET paused = :false, actor = :actor, updated_at = :now REMOVE next_probe_at"
                ),
                # Only the automatic pause that began at since: never an operator's,
                # never a later one.
                "ConditionExpression": (
                    "paused = :true AND automatic = :true AND paused_at = :since"
                ),
                "ExpressionAttributeValues": {
                    ":true": flag(True),
                    ":false": flag(False),
                    ":actor": text(actor),
                    ":now": number(now),
                    ":since": number(since),
                },
            }
        }
        record = AuditRecord(
            at=now, actor=actor, action=AuditAction.RESUME, target=switch, reason=reason
        )
        return await self._audited(change, record)

    async def record_audit(self, record: AuditRecord) -> None:
        await self._audited(None, record)

    async def _audited(self, change: dict[str, Any] | None, record: AuditRecord) -> bool:
        """Write ``change`` (one transaction item, maybe conditional) and ``record`` under
        the next record id, atomically. False, nothing written, when the change's own
        condition did not hold."""
        for attempt in range(MAX_ATTEMPTS):
            last = await self._last_record_id()
            items = [change] if change is not None else []
            items += self._append_items(record, last)
            try:
                with translate_errors("dynamodb"):
                    await self._db.transact_write_items(TransactItems=items)
            except Exception as exc:
                reasons = cancellation_reasons(exc)
                if reasons is None:
                    raise
                if change is not None and reasons and reasons[0].code == CONDITION_FAILED:
                    return False
                # Another record took this id (or held an item): read the id again.
                await back_off(attempt)
                continue
            return True
        raise StoreUnavailableError("dynamodb: audit records kept colliding; try again")

    async def _last_record_id(self) -> int:
        with translate_errors("dynamodb"):
            response = await self._db.get_item(
                TableName=self._table,
                Key=self._key(AUDIT_PK, AUDIT_COUNTER_SK),
                ConsistentRead=True,
            )
        item = response.get("Item")
        return 0 if item is None else read_int(item, "last_id") or 0

    def _append_items(self, record: AuditRecord, last: int) -> list[dict[str, Any]]:
        record_id = last + 1
        if record_id > MAX_RECORD_ID:  # pragma: no cover - 9.2e18 operator actions
            raise StoreUnavailableError("dynamodb: the audit log has no record id left")
        counter: dict[str, Any] = {
            "TableName": self._table,
            "Key": self._key(AUDIT_PK, AUDIT_COUNTER_SK),
            "UpdateExpression": "SET last_id = :next",
            "ExpressionAttributeValues": {":next": number(record_id)},
        }
        if last == 0:
            counter["ConditionExpression"] = "attribute_not_exists(pk)"
        else:
            counter["ConditionExpression"] = "last_id = :last"
            counter["ExpressionAttributeValues"][":last"] = number(last)
        entry: Item = {
            **self._key(AUDIT_PK, _audit_sk(record_id)),
            "record_id": number(record_id),
            "at": number(record.at),
            "actor": text(record.actor),
            "action": text(str(record.action)),
            "target": text(record.target),
        }
        optional(entry, "reason", record.reason)
        return [
            {"Update": counter},
            {
                "Put": {
                    "TableName": self._table,
                    "Item": entry,
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ]

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        if limit <= 0 or (before is not None and before <= 1):
            return []
        upper = MAX_RECORD_ID if before is None else min(before - 1, MAX_RECORD_ID)
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk AND sk BETWEEN :first AND :upper",
            "ExpressionAttributeValues": {
                ":pk": text(AUDIT_PK),
                ":first": text(_audit_sk(1)),
                ":upper": text(_audit_sk(upper)),
            },
            "ScanIndexForward": False,  # newest first
            "ConsistentRead": True,
        }
        items: list[Item] = []
        with translate_errors("dynamodb"):
            # A page stops at 1 MB whatever Limit says: read on until limit records.
            while len(items) < limit:
                response = await self._db.query(**query, Limit=limit - len(items))
                items += response.get("Items", [])
                if not response.get("LastEvaluatedKey"):
                    break
                query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        known = {str(a) for a in AuditAction}
        # A record of an action a newer version wrote, that this one does not know, is
        # skipped (as on PostgreSQL).
        return [_audit_record(item) for item in items if read_text(item, "action") in known]
