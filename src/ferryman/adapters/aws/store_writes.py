"""TransactWriteItems for the job store: its operations, and how a cancelled one is read.

Every write of the store is one transaction of Puts, Updates, Deletes and condition
checks. DynamoDB cancels the whole transaction when any item's condition fails and
says, per item, why (``CancellationReasons``, in request order, with the item as it
was where the request asked for ``ALL_OLD``): the store reads its conflicts there,
in the same call. A cancellation that is nobody's condition (another transaction on
the same item, throttling) is retried here with a short jittered backoff, then is an
outage. Each call carries a fresh ClientRequestToken, so botocore's own retry of a
request whose answer was lost is answered as the first was, never applied twice.
"""

from __future__ import annotations

import asyncio
import random
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.errors import error_code, translate_errors
from ferryman.adapters.aws.job_items import value_of
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.job_items import Item

# DynamoDB's limits for one transaction.
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 4 * 1024 * 1024
# Cancellations that no condition caused: tried again this many times, then an outage.
TRANSIENT_RETRIES = 6
_BACKOFF_SECONDS = 0.02
_TRANSIENT_REASONS = frozenset(
    {"TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded"}
)
CONDITION_FAILED = "ConditionalCheckFailed"


@dataclass(slots=True)
class Expression:
    """Placeholders for names and values: every attribute name goes through one
    (``status``, ``model`` and ``ttl`` are among DynamoDB's reserved words)."""

    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, dict[str, Any]] = field(default_factory=dict)

    def name(self, attribute: str) -> str:
        for placeholder, named in self.names.items():
            if named == attribute:
                return placeholder
        placeholder = f"#n{len(self.names)}"
        self.names[placeholder] = attribute
        return placeholder

    def value(self, value: dict[str, Any]) -> str:
        placeholder = f":v{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def arguments(self) -> dict[str, Any]:
        arguments: dict[str, Any] = {}
        if self.names:
            arguments["ExpressionAttributeNames"] = dict(self.names)
        if self.values:
            arguments["ExpressionAttributeValues"] = dict(self.values)
        return arguments


def update_expression(expression: Expression, values: dict[str, Any]) -> str:
    """SET for each value, REMOVE for each None (values in attribute form or plain)."""
    sets: list[str] = []
    removes: list[str] = []
    for attribute, value in values.items():
        if value is None:
            removes.append(expression.name(attribute))
            continue
        form = value if isinstance(value, dict) else value_of(value)
        sets.append(f"{expression.name(attribute)} = {expression.value(form)}")
    parts = []
    if sets:
        parts.append("SET " + ", ".join(sets))
    if removes:
        parts.append("REMOVE " + ", ".join(removes))
    return " ".join(parts)


def put(table: str, item: Item, *, condition: str | None = None, **extra: Any) -> dict[str, Any]:
    op: dict[str, Any] = {"TableName": table, "Item": item, **extra}
    if condition is not None:
        op["ConditionExpression"] = condition
    return {"Put": op}


def key(pk: str, sk: str) -> dict[str, dict[str, str]]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def item_bytes(item: Item) -> int:
    """An item's size as DynamoDB counts it, near enough for the transaction's bound:
    names and values in UTF-8."""
    size = 0
    for name, value in item.items():
        size += len(name.encode())
        (kind, data), *_ = value.items()
        if kind in ("S", "N"):
            size += len(str(data).encode())
        else:
            size += 1
    return size


class TransactionCancelled(Exception):
    """A transaction a condition cancelled: ``reasons`` in request order."""

    def __init__(self, reasons: list[dict[str, Any]]) -> None:
        super().__init__("transaction cancelled by a condition")
        self.reasons = reasons

    def failed(self, index: int) -> bool:
        """Whether the operation at ``index`` failed its condition."""
        return index < len(self.reasons) and self.reasons[index].get("Code") == CONDITION_FAILED

    def old_item(self, index: int) -> Item | None:
        """The item as the failed condition found it (where ALL_OLD was asked for)."""
        if index >= len(self.reasons):
            return None
        item = self.reasons[index].get("Item")
        return item if item else None


async def transact(clients: AwsClients, ops: list[dict[str, Any]]) -> None:
    """Write ``ops`` in one transaction (one op: its single-item write, as atomic and half
    the price). Raises TransactionCancelled when a condition failed (nothing was
    written), StoreUnavailableError on an outage."""
    if len(ops) > MAX_TRANSACTION_ITEMS:
        raise ValueError(
            f"a DynamoDB transaction holds at most {MAX_TRANSACTION_ITEMS} items, not {len(ops)}"
        )
    if len(ops) == 1:
        await _write_one(clients, ops[0])
        return
    for attempt in range(TRANSIENT_RETRIES + 1):
        try:
            with translate_errors("dynamodb"):
                await clients.dynamodb.transact_write_items(
                    TransactItems=ops, ClientRequestToken=str(uuid.uuid4())
                )
            return
        except Exception as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = _reasons(exc)
            codes = {str(r.get("Code")) for r in reasons}
            if CONDITION_FAILED in codes:
                raise TransactionCancelled(reasons) from exc
            if not codes & _TRANSIENT_REASONS or attempt == TRANSIENT_RETRIES:
                raise StoreUnavailableError(
                    f"dynamodb: transaction cancelled ({', '.join(sorted(codes))})"
                ) from exc
        await asyncio.sleep(_BACKOFF_SECONDS * (2**attempt) * random.uniform(0.5, 1.5))


# A transaction of one item costs twice what the same conditional write does alone, and
# is no more atomic: a heartbeat (the job's Update and nothing else) is written alone.
_SINGLE_WRITES = {"Put": "put_item", "Update": "update_item", "Delete": "delete_item"}


async def _write_one(clients: AwsClients, op: dict[str, Any]) -> None:
    (kind, arguments), *_ = op.items()
    try:
        with translate_errors("dynamodb"):
            await getattr(clients.dynamodb, _SINGLE_WRITES[kind])(**arguments)
    except Exception as exc:
        if error_code(exc) != "ConditionalCheckFailedException":
            raise
        response: Any = getattr(exc, "response", {})
        old = response.get("Item") if isinstance(response, dict) else None
        reason: dict[str, Any] = {"Code": CONDITION_FAILED}
        if old:
            reason["Item"] = old
        raise TransactionCancelled([reason]) from exc


def _reasons(exc: BaseException) -> list[dict[str, Any]]:
    response: Any = getattr(exc, "response", {})
    reasons = response.get("CancellationReasons") if isinstance(response, dict) else None
    return list(reasons) if isinstance(reasons, list) else []
