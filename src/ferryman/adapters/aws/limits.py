"""DynamoSharedLimits: limits every process shares, on the engine's table.

DynamoDB's update expressions have no LEAST, GREATEST, floor or CASE, so each shared
number is changed optimistically: read it (strongly consistent), compute the new
value exactly as PostgreSQL's statements do (adapters/postgres/limits.sql), and write
it conditioned on the version read. A writer that lost the race reads again; after
MAX_ATTEMPTS collisions the caller is told the store is unavailable for now, never
given a value computed from a stale read.

Items:

- ``limit#<key>`` / ``bucket``: a token bucket (tokens, refreshed_at, version);
- ``limit#<provider>#<model>`` / ``provider``: the cluster's window, learned rate
  and epoch for one (provider, model), with its version;
- ``member#<provider>#<model>`` / ``<member>``: when each worker process calling it
  last reported, so a dead one stops counting. Provider and model are
  percent-encoded in keys, so no ``#`` in a name can make two pairs share an item.
"""

from __future__ import annotations

import asyncio
import math
import urllib.parse
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.adapters.aws.attribute_values import (
    Item,
    need_float,
    number,
    optional,
    read_float,
    read_int,
    text,
)
from ferryman.adapters.aws.cancellation import MAX_ATTEMPTS, back_off, condition_failed
from ferryman.adapters.aws.errors import translate_errors
from ferryman.core.errors import StoreUnavailableError
from ferryman.ports.limits import ProviderReport, ProviderShare, TokenLease

if TYPE_CHECKING:
    from ferryman.adapters.aws.clients import AwsClients

# The cluster's learned rate never falls below this (requests per second), as each
# process's own (core/adaptive_rate.py) does not.
MIN_RATE_PER_SECOND = 0.1
BUCKET_SK = "bucket"
PROVIDER_SK = "provider"
# Members long gone (this many times the liveness horizon) are deleted for good.
FORGET_AFTER_HORIZONS = 100


def _name(value: str) -> str:
    return urllib.parse.quote(value, safe="")


def bucket_pk(key: str) -> str:
    return f"limit#{key}"


def provider_pk(provider: str, model: str) -> str:
    return f"limit#{_name(provider)}#{_name(model)}"


def members_pk(provider: str, model: str) -> str:
    return f"member#{_name(provider)}#{_name(model)}"


@dataclass(frozen=True, slots=True)
class _Bucket:
    tokens: float
    refreshed_at: float
    version: int


def refill_and_take(
    bucket: _Bucket | None, *, rate_per_second: float, burst: int, want: int, now: float
) -> tuple[int, float, float]:
    """(granted, tokens after, refreshed_at after), as limits.sql's lease_tokens: a new
    bucket starts full; a clock that steps back mints nothing."""
    if bucket is None:
        granted = min(want, burst)
        return granted, float(burst) - granted, now
    full = min(float(burst), bucket.tokens + max(0.0, now - bucket.refreshed_at) * rate_per_second)
    granted = min(want, max(0, math.floor(full)))
    return granted, full - granted, max(bucket.refreshed_at, now)


@dataclass(frozen=True, slots=True)
class _Cluster:
    window: float
    rate: float | None
    epoch: int


def next_cluster(
    current: _Cluster | None,
    report: ProviderReport,
    *,
    members: int,
    joined: bool,
) -> _Cluster:
    """The (provider, model)'s cluster after ``report``, as limits.sql's provider_report.

    One decrease per epoch: a throttle reported under the current epoch narrows the
    window (and lowers the rate), each by its process's factor, and advances the
    epoch; reports of the same overload from other processes then carry the old epoch
    and change nothing. Growth adds up, and a process that joins (or comes back) adds
    its starting window, capped at every live process's maximum together.
    """
    learned_total = None if report.learned_rate is None else report.learned_rate * members
    if current is None:
        return _Cluster(window=report.start_window, rate=learned_total, epoch=0)
    throttled = report.throttled_epoch is not None and current.epoch == report.throttled_epoch
    if throttled and report.narrowed_window:
        window = max(1.0, current.window * report.window_decrease_factor)
    else:
        joined_window = report.start_window if joined else 0.0
        window = min(
            report.max_window * members,
            current.window + max(0.0, report.grown_window) + joined_window,
        )
    rate: float | None
    if throttled and report.lowered_rate:
        rate = (
            learned_total
            if current.rate is None
            else max(MIN_RATE_PER_SECOND, current.rate * report.rate_decrease_factor)
        )
    elif current.rate is None:
        rate = None
    else:
        rate = current.rate + max(0.0, report.grown_rate)
    decreased = throttled and (report.narrowed_window or report.lowered_rate)
    return _Cluster(window=window, rate=rate, epoch=current.epoch + (1 if decreased else 0))


class DynamoSharedLimits:
    def __init__(self, clients: AwsClients, table: str) -> None:
        self._db = clients.dynamodb
        self._table = table

    def _key(self, pk: str, sk: str) -> dict[str, Any]:
        return {"pk": text(pk), "sk": text(sk)}

    async def _get(self, pk: str, sk: str) -> Item | None:
        with translate_errors("dynamodb"):
            response = await self._db.get_item(
                TableName=self._table, Key=self._key(pk, sk), ConsistentRead=True
            )
        item: Item | None = response.get("Item")
        return item

    async def _put_if_version(self, item: Item, version: int | None) -> bool:
        """Write ``item`` (with version + 1) only while the stored one is at ``version``
        (None: only while there is none). False: another process wrote first."""
        condition: dict[str, Any]
        if version is None:
            condition = {"ConditionExpression": "attribute_not_exists(pk)"}
        else:
            condition = {
                "ConditionExpression": "version = :version",
                "ExpressionAttributeValues": {":version": number(version)},
            }
        written = {**item, "version": number((version or 0) + 1)}
        try:
            with translate_errors("dynamodb"):
                await self._db.put_item(TableName=self._table, Item=written, **condition)
        except Exception as exc:
            if condition_failed(exc):
                return False
            raise
        return True

    async def lease(
        self, key: str, *, rate_per_second: float, burst: int, want: int, now: float
    ) -> TokenLease:
        if want < 1:
            raise ValueError("want must be at least 1")
        pk = bucket_pk(key)
        for attempt in range(MAX_ATTEMPTS):
            item = await self._get(pk, BUCKET_SK)
            bucket = None
            if item is not None:
                bucket = _Bucket(
                    tokens=need_float(item, "tokens"),
                    refreshed_at=need_float(item, "refreshed_at"),
                    version=read_int(item, "version") or 0,
                )
            granted, tokens, refreshed_at = refill_and_take(
                bucket, rate_per_second=rate_per_second, burst=burst, want=want, now=now
            )
            if granted == 0 and bucket is not None:
                # Nothing taken: the stored bucket refills to the same balance later
                # as the one we would write, so a refused lease costs one read only.
                return TokenLease(granted=0, tokens_left=tokens)
            written = {
                **self._key(pk, BUCKET_SK),
                "tokens": number(tokens),
                "refreshed_at": number(refreshed_at),
            }
            if await self._put_if_version(written, None if bucket is None else bucket.version):
                return TokenLease(granted=granted, tokens_left=tokens)
            await back_off(attempt)
        raise StoreUnavailableError(
            "dynamodb: the shared rate limit kept colliding with other processes' leases"
        )

    async def report_provider(self, report: ProviderReport) -> ProviderShare:
        joined = await self._seen(report)
        members = max(1, await self._live_members(report))
        pk = provider_pk(report.provider, report.model)
        for attempt in range(MAX_ATTEMPTS):
            item = await self._get(pk, PROVIDER_SK)
            current = None
            version = None
            if item is not None:
                current = _Cluster(
                    window=need_float(item, "window_calls"),
                    rate=read_float(item, "rate"),
                    epoch=read_int(item, "epoch") or 0,
                )
                version = read_int(item, "version") or 0
            cluster = next_cluster(current, report, members=members, joined=joined)
            share = ProviderShare(
                window=cluster.window, rate=cluster.rate, epoch=cluster.epoch, members=members
            )
            if cluster == current:
                # Nothing moved (the steady state): a report is then only a read, and
                # saves the write unit each process would spend on it every second.
                return share
            written: Item = {
                **self._key(pk, PROVIDER_SK),
                "window_calls": number(cluster.window),
                "epoch": number(cluster.epoch),
                "updated_at": number(report.now),
            }
            optional(written, "rate", cluster.rate)
            if await self._put_if_version(written, version):
                return share
            await back_off(attempt)
        raise StoreUnavailableError(
            "dynamodb: the shared provider limit kept colliding with other processes' reports"
        )

    async def _seen(self, report: ProviderReport) -> bool:
        """Record ``report.member`` as seen at ``report.now`` (never moving it back);
        True when it joins: never seen, or silent longer than the liveness horizon."""
        try:
            with translate_errors("dynamodb"):
                response = await self._db.update_item(
                    TableName=self._table,
                    Key=self._key(members_pk(report.provider, report.model), report.member),
                    UpdateExpression="SET seen_at = :now",
                    ConditionExpression="attribute_not_exists(seen_at) OR seen_at < :now",
                    ExpressionAttributeValues={":now": number(report.now)},
                    ReturnValues="ALL_OLD",
                )
        except Exception as exc:
            if condition_failed(exc):
                return False  # seen at or after now already: live
            raise
        last = read_float(response.get("Attributes") or {}, "seen_at")
        return last is None or last < report.now - report.live_after_seconds

    async def _live_members(self, report: ProviderReport) -> int:
        """How many members reported within the liveness horizon; those long gone are
        deleted on the way."""
        pk = members_pk(report.provider, report.model)
        live_since = report.now - report.live_after_seconds
        forget_before = report.now - FORGET_AFTER_HORIZONS * report.live_after_seconds
        query: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": text(pk)},
            "ConsistentRead": True,
        }
        live = 0
        gone: list[str] = []
        with translate_errors("dynamodb"):
            while True:
                response = await self._db.query(**query)
                for item in response.get("Items", []):
                    seen_at = need_float(item, "seen_at")
                    live += seen_at >= live_since
                    if seen_at < forget_before:
                        gone.append(str(item["sk"]["S"]))
                if not response.get("LastEvaluatedKey"):
                    break
                query["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        await asyncio.gather(*(self._forget(pk, member, forget_before) for member in gone))
        return live

    async def _forget(self, pk: str, member: str, forget_before: float) -> None:
        # Conditioned, so a member that reported again meanwhile is kept.
        try:
            with translate_errors("dynamodb"):
                await self._db.delete_item(
                    TableName=self._table,
                    Key=self._key(pk, member),
                    ConditionExpression="seen_at < :before",
                    ExpressionAttributeValues={":before": number(forget_before)},
                )
        except Exception as exc:
            if not condition_failed(exc):
                raise
