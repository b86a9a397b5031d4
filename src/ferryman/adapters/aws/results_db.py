"""DynamoResultStore: results kept in the engine's table (FERRYMAN_RESULTS_URL=db on aws://).

A ref is ``db:<key>;sha256=<hex>``, as on SQLite and PostgreSQL: the key the result
was written under and the checksum of its bytes, both verified on every read.

Items:

- ``result#<key>`` / ``result``: the bytes (Binary), their sha256 and size. Written
  only where there is none, or the same bytes (a retried put): a different result is
  never written over one already stored under the same key. One item holds at most
  400 KB, so a larger result is refused with a ValueError that names the S3 store.
- ``resultlist#<shard>`` / ``<key>``: the key and its size, written before the result
  so that every stored result is listed. ``reclaim`` pages through these few
  partitions with Query (never a Scan); spreading keys over SHARDS partitions keeps
  any one of them from taking every job's write. A listed key whose result was never
  written (a put that failed after listing it) is deleted like any other.

The job purge does not delete results (as on PostgreSQL): results of attempts that
lost their job are referenced by no job, and only the listing can find them.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.attribute_values import Item, blob, number, read_blob, read_int, text
from ferryman.adapters.aws.cancellation import MAX_ATTEMPTS, back_off, condition_failed
from ferryman.adapters.aws.errors import describe, is_outage, translate_errors
from ferryman.core.errors import (
    BackendUnavailableError,
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
    StoreUnavailableError,
)
from ferryman.core.results import checksum, gone_jobs, job_id_of

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

    from ferryman.adapters.aws.clients import AwsClients

_REF = re.compile(r"^db:(.+?)(?:;sha256=([0-9a-f]{64}))?$", re.DOTALL)
RESULT_SK = "result"
SHARDS = 16
# DynamoDB's item limit is 400 KB, counting attribute names and the key; the rest of
# the item (key up to MAX_KEY_BYTES twice over, checksum, size, names) fits in 2 KB.
MAX_ITEM_BYTES = 400 * 1024
MAX_RESULT_BYTES = MAX_ITEM_BYTES - 2 * 1024
# A sort key holds at most 1024 bytes: the listing's sort key is the result key.
MAX_KEY_BYTES = 1024
# Never a key the result rule makes (those start with a tenant id and a slash).
_PROBE_KEY = ".probe"
_RECLAIM_PAGE = 500
_BATCH_WRITE = 25  # BatchWriteItem's limit


def result_pk(key: str) -> str:
    return f"result#{key}"


def list_pk(key: str) -> str:
    shard = hashlib.sha256(key.encode()).digest()[0] % SHARDS
    return f"resultlist#{shard:02d}"


def _ref(key: str, data: bytes) -> str:
    return f"db:{key};sha256={checksum(data)}"


def _check(key: str, data: bytes) -> None:
    if not key:
        raise ValueError("a result key cannot be empty")
    if len(key.encode()) > MAX_KEY_BYTES:
        raise ValueError(f"a result key is longer than DynamoDB keeps ({MAX_KEY_BYTES} bytes)")
    if len(data) > MAX_RESULT_BYTES:
        raise ValueError(
            f"a result of {len(data)} bytes is larger than a DynamoDB item holds "
            f"({MAX_RESULT_BYTES} bytes): keep results in S3 with "
            "FERRYMAN_RESULTS_URL=s3://BUCKET/PREFIX"
        )


class DynamoResultStore:
    def __init__(self, clients: AwsClients, table: str) -> None:
        self._db = clients.dynamodb
        self._table = table

    def _key(self, pk: str, sk: str) -> dict[str, Any]:
        return {"pk": text(pk), "sk": text(sk)}

    async def put(self, key: str, data: bytes) -> str:
        _check(key, data)
        digest = checksum(data)
        with translate_errors("dynamodb"):
            # Listed first: a result is never stored without its listing entry.
            await self._db.put_item(
                TableName=self._table,
                Item={**self._key(list_pk(key), key), "size": number(len(data))},
            )
        try:
            with translate_errors("dynamodb"):
                await self._db.put_item(
                    TableName=self._table,
                    Item={
                        **self._key(result_pk(key), RESULT_SK),
                        "data": blob(data),
                        "sha256": text(digest),
                        "size": number(len(data)),
                    },
                    ConditionExpression="attribute_not_exists(pk) OR sha256 = :sha256",
                    ExpressionAttributeValues={":sha256": text(digest)},
                )
        except Exception as exc:
            if condition_failed(exc):
                raise StateConflictError(
                    "another result is stored under this key already; it is kept"
                ) from exc
            raise
        # Read back as written before the ref is published.
        stored = await self._read(key, unavailable=StoreUnavailableError)
        if stored is None or checksum(stored) != digest:
            raise StoreUnavailableError("dynamodb: a result did not read back as written")
        return _ref(key, data)

    async def get(self, ref: str, *, key: str) -> bytes:
        match = _REF.match(ref)
        if match is None:
            raise ResultUnreadableError("the stored result's reference is not a database reference")
        stored_key, digest = match.groups()
        # Never say whose result the ref names: that could be another tenant's.
        if stored_key != key:
            raise ResultUnreadableError("the stored result's reference names another result")
        data = await self._read(key, unavailable=ResultsUnavailableError)
        if data is None:
            raise ResultUnreadableError("the stored result is missing")
        if digest is not None and checksum(data) != digest:
            raise ResultUnreadableError("the stored result's bytes do not match their checksum")
        return data

    async def _read(self, key: str, *, unavailable: type[BackendUnavailableError]) -> bytes | None:
        """The bytes stored under ``key`` (None when there are none); an item whose
        bytes disagree with its own checksum is unreadable."""
        try:
            response = await self._db.get_item(
                TableName=self._table,
                Key=self._key(result_pk(key), RESULT_SK),
                ConsistentRead=True,
            )
        except Exception as exc:
            if is_outage(exc):
                raise unavailable(describe(exc, "dynamodb")) from exc
            raise
        item: Item | None = response.get("Item")
        if item is None:
            return None
        data = read_blob(item, "data")
        stored_digest = item.get("sha256", {}).get("S")
        if data is None or stored_digest != checksum(data):
            raise ResultUnreadableError("the stored result's bytes do not match their checksum")
        return data

    async def probe(self) -> None:
        # A real write the table refuses by its condition: it proves the table is
        # there, answers and lets us write, and leaves nothing behind.
        try:
            await self._db.put_item(
                TableName=self._table,
                Item={**self._key(result_pk(_PROBE_KEY), RESULT_SK), "data": blob(b"probe")},
                ConditionExpression="attribute_exists(pk)",
            )
        except Exception as exc:
            if condition_failed(exc):
                return
            if is_outage(exc):
                raise ResultsUnavailableError(f"results: {describe(exc, 'dynamodb')}") from exc
            raise
        # The probe item existed (left by hand?): it was only rewritten, never made.

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        reclaimed = 0
        for shard in range(SHARDS):
            reclaimed += await self._reclaim_shard(f"resultlist#{shard:02d}", any_job_exists)
        return reclaimed

    async def _reclaim_shard(
        self, pk: str, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]
    ) -> int:
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": text(pk)},
            "Limit": _RECLAIM_PAGE,
        }
        reclaimed = 0
        while True:
            with translate_errors("dynamodb"):
                response = await self._db.query(**query)
            page = [
                (str(item["sk"]["S"]), read_int(item, "size") or 0)
                for item in response.get("Items", [])
            ]
            owners = {key: job_id_of(key) for key, _ in page}
            gone = await gone_jobs({o for o in owners.values() if o}, any_job_exists)
            doomed = [(key, size) for key, size in page if owners[key] in gone]
            if doomed:
                # The result before its listing entry: a reclaim stopped in between
                # finds the entry again next time and finishes.
                await self._delete([self._key(result_pk(k), RESULT_SK) for k, _ in doomed])
                await self._delete([self._key(pk, k) for k, _ in doomed])
                reclaimed += sum(size for _, size in doomed)
            if not response.get("LastEvaluatedKey"):
                return reclaimed
            query["ExclusiveStartKey"] = response["LastEvaluatedKey"]

    async def _delete(self, keys: list[dict[str, Any]]) -> None:
        for start in range(0, len(keys), _BATCH_WRITE):
            pending: list[dict[str, Any]] = [
                {"DeleteRequest": {"Key": key}} for key in keys[start : start + _BATCH_WRITE]
            ]
            for attempt in range(MAX_ATTEMPTS):
                with translate_errors("dynamodb"):
                    response = await self._db.batch_write_item(RequestItems={self._table: pending})
                # What the table had no capacity for now comes back: send it again.
                pending = response.get("UnprocessedItems", {}).get(self._table, [])
                if not pending:
                    break
                await back_off(attempt)
            else:
                raise StoreUnavailableError("dynamodb: deletes of reclaimed results kept failing")
