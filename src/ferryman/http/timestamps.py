"""The one way the API writes a moment: RFC 3339 in UTC, microseconds, ``Z``.

``2026-11-30T14:23:12.123456Z``: always the same length and precision, so clients
may parse it (``datetime.fromisoformat`` reads it from Python 3.11 on) or even sort
it as text. Every timestamp in every response goes through ``rfc3339``; the engines
keep epoch seconds (float), which hold microseconds exactly for centuries yet.

A time a request sends (a query's ``from``, a key's ``expires_at``) is RFC 3339 too,
with its offset: a time without one is refused rather than guessed.
"""

from __future__ import annotations

from datetime import UTC, datetime

from ferryman.core.errors import InvalidRequestError

_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
# For the OpenAPI document and the docs: what every timestamp looks like.
EXAMPLE = "2026-11-30T14:23:12.123456Z"
PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"


def rfc3339(epoch_seconds: float | None) -> str | None:
    """``epoch_seconds`` as RFC 3339 UTC with microseconds and ``Z``; None stays None."""
    if epoch_seconds is None:
        return None
    return datetime.fromtimestamp(epoch_seconds, UTC).strftime(_FORMAT)


def epoch_seconds(moment: datetime | None, *, loc: list[str | int]) -> float | None:
    """A time a request gave, as epoch seconds; refused (422 at ``loc``) without an offset."""
    if moment is None:
        return None
    if moment.tzinfo is None or moment.utcoffset() is None:
        msg = "a time needs its UTC offset (RFC 3339), like 2026-11-30T00:00:00Z"
        raise InvalidRequestError(msg, errors=[{"loc": loc, "msg": msg}])
    return moment.timestamp()
