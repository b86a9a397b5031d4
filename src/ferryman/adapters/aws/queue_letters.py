"""Undecodable letters: SQS messages whose body is not a job message, kept in DynamoDB.

Such a message names no job for the sweeper to fail, so it is taken out of SQS (off
the job queue at once, or off the dead-letter queue where it may have been redriven)
and kept in the engine's table for an operator to read and purge (``ferryman dlq``).
The queue's items (pk / sk), and no others:

- the letter: ``letters`` / ``<dead_lettered_at:020.6f>#<id>``, with its body, sent_at,
  dead_lettered_at and receive_count: one partition, sorted as letters are paged
  (``dead_lettered_at``, then id), so a page is one Query and never a Scan;
- where it is: ``letter#<id>`` / ``letter`` (its listing sort key), for a read by id;
- how many there are: ``letters#count`` / ``count`` (attribute ``n``).

A letter is written and counted in one TransactWriteItems, conditioned on its
``letter#`` item not being there: the same message met twice (its SQS delete failed
after the write) is kept once. The body is kept as sent, but cut at BODY_LIMIT_BYTES
(DynamoDB's items end at 400 KB; an SQS message may be 1 MiB), marked
``body_truncated``. ``dead_lettered_at`` is kept to the microsecond, so the listing
key and the value agree exactly and a page resumes where the last one ended.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.errors import error_code, translate_errors
from ferryman.adapters.aws.queue_wire import letter_id
from ferryman.ports.queue import UndecodableLetter

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.queue_wire import ReceivedMessage

LISTING_PK = "letters"
COUNTER_KEY = {"pk": {"S": "letters#count"}, "sk": {"S": "count"}}
BODY_LIMIT_BYTES = 350_000
# The ids this module makes (queue_wire.letter_id); anything else is no letter of ours.
_LETTER_ID = re.compile(r"dl_[0-9a-f]{1,64}")


def _pointer_key(dead_letter_id: str) -> dict[str, Any]:
    return {"pk": {"S": f"letter#{dead_letter_id}"}, "sk": {"S": "letter"}}


def _listing_sk(dead_lettered_at: float, dead_letter_id: str) -> str:
    return f"{dead_lettered_at:020.6f}#{dead_letter_id}"


def _cut(body: str) -> tuple[str, bool]:
    data = body.encode("utf-8", "surrogatepass")
    if len(data) <= BODY_LIMIT_BYTES:
        return body, False
    return data[:BODY_LIMIT_BYTES].decode("utf-8", "ignore"), True


def _letter(item: dict[str, Any]) -> UndecodableLetter:
    return UndecodableLetter(
        dead_letter_id=item["letter_id"]["S"],
        body=item["body"]["S"],
        sent_at=float(item["sent_at"]["N"]),
        dead_lettered_at=float(item["dead_lettered_at"]["N"]),
        receive_count=int(item["receive_count"]["N"]),
    )


def _cancelled_by_condition(exc: BaseException) -> bool:
    """A TransactWriteItems refused because one of its conditions did not hold."""
    if error_code(exc) != "TransactionCanceledException":
        return False
    reasons = getattr(exc, "response", {}).get("CancellationReasons") or []
    codes = {reason.get("Code") for reason in reasons if isinstance(reason, dict)}
    # No reasons given (some emulators): the only condition is ours.
    return "ConditionalCheckFailed" in codes or not reasons


class UndecodableLetters:
    """The undecodable letters of one engine's table."""

    def __init__(self, clients: AwsClients, table: str) -> None:
        self._dynamodb = clients.dynamodb
        self._table = table

    async def keep(self, message: ReceivedMessage, *, now: float) -> str:
        """Keep the message as a letter (once, however often it is met); its id."""
        dead_letter_id = letter_id(message.message_id)
        dead_lettered_at = round(now, 6)
        body, truncated = _cut(message.body)
        sk = _listing_sk(dead_lettered_at, dead_letter_id)
        letter = {
            "pk": {"S": LISTING_PK},
            "sk": {"S": sk},
            "letter_id": {"S": dead_letter_id},
            "message_id": {"S": message.message_id},
            "body": {"S": body},
            "body_truncated": {"BOOL": truncated},
            "sent_at": {"N": repr(message.sent_at)},
            "dead_lettered_at": {"N": repr(dead_lettered_at)},
            # The deliveries before the receive that found it (none reached a worker).
            "receive_count": {"N": str(max(0, message.receive_count - 1))},
        }
        pointer = {**_pointer_key(dead_letter_id), "listing_sk": {"S": sk}}
        try:
            with translate_errors("dynamodb"):
                await self._dynamodb.transact_write_items(
                    TransactItems=[
                        {
                            "Put": {
                                "TableName": self._table,
                                "Item": pointer,
                                "ConditionExpression": "attribute_not_exists(pk)",
                            }
                        },
                        {"Put": {"TableName": self._table, "Item": letter}},
                        self._count(+1),
                    ]
                )
        except Exception as exc:
            if not _cancelled_by_condition(exc):
                raise
        return dead_letter_id

    def _count(self, delta: int) -> dict[str, Any]:
        return {
            "Update": {
                "TableName": self._table,
                "Key": COUNTER_KEY,
                "UpdateExpression": "ADD n :delta",
                "ExpressionAttributeValues": {":delta": {"N": str(delta)}},
            }
        }

    async def page(self, *, limit: int, after: tuple[float, str] | None) -> list[UndecodableLetter]:
        if limit <= 0:
            return []
        condition = "pk = :pk"
        values: dict[str, Any] = {":pk": {"S": LISTING_PK}}
        if after is not None:
            condition += " AND sk > :after"
            values[":after"] = {"S": _listing_sk(after[0], after[1])}
        letters: list[UndecodableLetter] = []
        start: dict[str, Any] | None = None
        while len(letters) < limit:
            query: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "Limit": limit - len(letters),
                "ConsistentRead": True,
            }
            if start is not None:
                query["ExclusiveStartKey"] = start
            with translate_errors("dynamodb"):
                response = await self._dynamodb.query(**query)
            letters += [_letter(item) for item in response.get("Items", [])]
            start = response.get("LastEvaluatedKey")
            if start is None:
                break
        return letters

    async def _listing_sk(self, dead_letter_id: str) -> str | None:
        if not _LETTER_ID.fullmatch(dead_letter_id):
            return None
        with translate_errors("dynamodb"):
            response = await self._dynamodb.get_item(
                TableName=self._table, Key=_pointer_key(dead_letter_id), ConsistentRead=True
            )
        item = response.get("Item")
        return None if item is None else str(item["listing_sk"]["S"])

    async def get(self, dead_letter_id: str) -> UndecodableLetter | None:
        sk = await self._listing_sk(dead_letter_id)
        if sk is None:
            return None
        with translate_errors("dynamodb"):
            response = await self._dynamodb.get_item(
                TableName=self._table,
                Key={"pk": {"S": LISTING_PK}, "sk": {"S": sk}},
                ConsistentRead=True,
            )
        item = response.get("Item")
        return None if item is None else _letter(item)

    async def delete(self, dead_letter_id: str) -> bool:
        """Purge one; False when there is none of that id (or another purge won)."""
        sk = await self._listing_sk(dead_letter_id)
        if sk is None:
            return False
        try:
            with translate_errors("dynamodb"):
                await self._dynamodb.transact_write_items(
                    TransactItems=[
                        {
                            "Delete": {
                                "TableName": self._table,
                                "Key": _pointer_key(dead_letter_id),
                                "ConditionExpression": "attribute_exists(pk)",
                            }
                        },
                        {
                            "Delete": {
                                "TableName": self._table,
                                "Key": {"pk": {"S": LISTING_PK}, "sk": {"S": sk}},
                            }
                        },
                        self._count(-1),
                    ]
                )
        except Exception as exc:
            if _cancelled_by_condition(exc):
                return False
            raise
        return True

    async def count(self) -> int:
        with translate_errors("dynamodb"):
            response = await self._dynamodb.get_item(
                TableName=self._table, Key=COUNTER_KEY, ConsistentRead=True
            )
        item = response.get("Item")
        return 0 if item is None else max(0, int(item["n"]["N"]))
