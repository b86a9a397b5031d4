"""Where an ``aws://NAME`` URL puts things: a DynamoDB table, an SQS queue and its DLQ.

``aws://NAME`` names the table ``NAME``, the queue ``NAME-jobs`` and its dead-letter
queue ``NAME-jobs-dlq``; the query parameters ``table``, ``queue`` and ``dlq`` override
each (a queue by its name or its URL). Region, credentials and endpoint are never in
the URL: they come from the standard AWS configuration chain, as boto3 reads it.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass

# The AWS rules for each name, checked here so a mistyped URL is named before any call.
_TABLE_NAME = re.compile(r"[A-Za-z0-9_.-]{3,255}")
_QUEUE_NAME = re.compile(r"[A-Za-z0-9_-]{1,80}")
_QUEUE_URL = re.compile(r"https?://[^/?#]+/\d{12}/(?P<name>[A-Za-z0-9_-]{1,80})")
_PARAMETERS = ("table", "queue", "dlq")

QUEUE_SUFFIX = "-jobs"
DLQ_SUFFIX = "-jobs-dlq"


class AwsUrlError(ValueError):
    """An ``aws://`` URL that cannot be used; the message names what is wrong."""


@dataclass(frozen=True, slots=True)
class QueueName:
    """A queue as the URL gives it: its name, and its URL when the URL gave one (None:
    found by name)."""

    name: str
    url: str | None


@dataclass(frozen=True, slots=True)
class AwsLocation:
    name: str
    table: str
    queue: QueueName
    dlq: QueueName

    def shown(self) -> str:
        """For people: which table and queues."""
        return (
            f"aws://{self.name} (table {self.table}, queue {self.queue.name}, dlq {self.dlq.name})"
        )


def _queue(value: str, parameter: str) -> QueueName:
    if value.startswith(("http://", "https://")):
        found = _QUEUE_URL.fullmatch(value)
        if found is None:
            raise AwsUrlError(
                f"aws:// URL: {parameter}= must be a queue name or a queue URL "
                f"(https://sqs.REGION.amazonaws.com/ACCOUNT/NAME), got {value!r}"
            )
        return QueueName(name=found["name"], url=value)
    if not _QUEUE_NAME.fullmatch(value):
        raise AwsUrlError(
            f"aws:// URL: queue name {value!r} ({parameter}) must be 1-80 letters, digits, "
            "'-' or '_'"
        )
    return QueueName(name=value, url=None)


def parse_aws_url(url: str) -> AwsLocation:
    """The location ``url`` names; AwsUrlError (naming the part) when it cannot be used."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "aws":
        raise AwsUrlError(f"not an aws:// URL: {url!r}")
    if parts.path not in ("", "/") or parts.fragment or "@" in parts.netloc:
        raise AwsUrlError(
            "an aws:// URL is aws://NAME with optional ?table=&queue=&dlq=; region, "
            "credentials and endpoint come from the AWS configuration chain, never the URL"
        )
    name = parts.netloc
    try:
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True, strict_parsing=False)
    except ValueError as exc:  # pragma: no cover - parse_qs raises only in strict mode
        raise AwsUrlError(f"aws:// URL: cannot read its query: {exc}") from exc
    unknown = sorted(set(query) - set(_PARAMETERS))
    if unknown:
        raise AwsUrlError(
            f"aws:// URL: unknown parameter {unknown[0]!r} (known: {', '.join(_PARAMETERS)})"
        )
    given: dict[str, str] = {}
    for key, values in query.items():
        if len(values) != 1 or not values[0]:
            raise AwsUrlError(f"aws:// URL: {key}= must be given once, with a value")
        given[key] = values[0]
    if not name:
        raise AwsUrlError("aws:// URL: a NAME is needed (aws://NAME)")
    table = given.get("table", name)
    if not _TABLE_NAME.fullmatch(table):
        raise AwsUrlError(
            f"aws:// URL: table name {table!r} must be 3-255 letters, digits, '_', '-' or '.'"
        )
    if not {"queue", "dlq"} <= given.keys() and not _QUEUE_NAME.fullmatch(name + DLQ_SUFFIX):
        raise AwsUrlError(
            f"aws:// URL: NAME {name!r} cannot name the queues {name}{QUEUE_SUFFIX} and "
            f"{name}{DLQ_SUFFIX} (a queue name is 1-80 letters, digits, '-' or '_'); "
            "shorten it or give queue= and dlq="
        )
    return AwsLocation(
        name=name,
        table=table,
        queue=_queue(given.get("queue", name + QUEUE_SUFFIX), "queue"),
        dlq=_queue(given.get("dlq", name + DLQ_SUFFIX), "dlq"),
    )
