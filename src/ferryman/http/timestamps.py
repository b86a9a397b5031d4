"""The one way the API writes a moment: RFC 3339 in UTC, microseconds, ``Z``.

``2026-11-30T14:23:12.123456Z``: always the same length and precision, so clients
may parse it (``datetime.fromisoformat`` reads it from Python 3.11 on) or even sort
it as text. Every timestamp in every response goes through ``rfc3339``; the engines
keep epoch seconds (float), which hold microseconds exactly for centuries yet.

A time a request sends (a query's ``from``, a key's ``expires_at``) is RFC 3339 too,
with its offset: a time without one is refused rather than guessed. It must also lie
between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z: whatever an answer derives from
it (a report's default start, 30 days before its end) must be writable as RFC 3339
again, which years before 1 and after 9999 are not (the last microsecond of 9999 is
already year 10000 as a float of epoch seconds).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from ferryman.core.errors import InvalidRequestError

# For the OpenAPI document and the docs: what every timestamp looks like.
EXAMPLE = "2026-11-30T14:23:12.123456Z"
PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"
# What a request may send: any RFC 3339 date-time (its offset required).
INPUT_PATTERN = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
_INPUT_RE = re.compile(INPUT_PATTERN)
# The earliest and latest time a request may send, as epoch seconds (see above).
EARLIEST_INPUT = "1970-01-01T00:00:00Z"
LATEST_INPUT = "9999-12-31T23:59:59Z"
_EARLIEST_SECONDS = datetime.fromisoformat(EARLIEST_INPUT).timestamp()
_LATEST_SECONDS = datetime.fromisoformat(LATEST_INPUT).timestamp()


def rfc3339(epoch_seconds: float | None) -> str | None:
    """``epoch_seconds`` as RFC 3339 UTC with microseconds and ``Z``; None stays None."""
    if epoch_seconds is None:
        return None
    # isoformat, not strftime: strftime writes year 319 as "319", not "0319".
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def epoch_seconds(text: str | None, *, loc: list[str | int]) -> float | None:
    """A time a request gave (RFC 3339, offset included), as epoch seconds; anything
    else, epoch numbers, times without an offset and times outside [EARLIEST_INPUT,
    LATEST_INPUT] included, is a 422 at ``loc``."""
    if text is None:
        return None
    try:
        if not _INPUT_RE.fullmatch(text):
            raise ValueError(text)
        seconds = datetime.fromisoformat(text.upper()).timestamp()
    except (ValueError, OverflowError):
        msg = "a time is RFC 3339 with its UTC offset, like 2026-11-30T00:00:00Z"
        raise InvalidRequestError(msg, errors=[{"loc": loc, "msg": msg}]) from None
    if not _EARLIEST_SECONDS <= seconds <= _LATEST_SECONDS:
        msg = f"a time lies between {EARLIEST_INPUT} and {LATEST_INPUT}"
        raise InvalidRequestError(msg, errors=[{"loc": loc, "msg": msg}])
    return seconds
