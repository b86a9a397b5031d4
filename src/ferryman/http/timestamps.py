"""The one way the API writes a moment: RFC 3339 in UTC, microseconds, ``Z``.

``2026-11-30T14:23:12.123456Z``: always the same length and precision, so clients
may parse it (``datetime.fromisoformat`` reads it from Python 3.11 on) or even sort
it as text. Every timestamp in every response goes through ``rfc3339``; the engines
keep epoch seconds (float), which hold microseconds exactly for centuries yet.

A time a request sends (a query's ``from``, a key's ``expires_at``) is RFC 3339 too,
with its offset: a time without one is refused rather than guessed.
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


def rfc3339(epoch_seconds: float | None) -> str | None:
    """``epoch_seconds`` as RFC 3339 UTC with microseconds and ``Z``; None stays None."""
    if epoch_seconds is None:
        return None
    # isoformat, not strftime: strftime writes year 319 as "319", not "0319".
    moment = datetime.fromtimestamp(epoch_seconds, UTC)
    return moment.isoformat(timespec="microseconds").removesuffix("+00:00") + "Z"


def epoch_seconds(text: str | None, *, loc: list[str | int]) -> float | None:
    """A time a request gave (RFC 3339, offset included), as epoch seconds; anything
    else, epoch numbers and times without an offset included, is a 422 at ``loc``."""
    if text is None:
        return None
    try:
        if not _INPUT_RE.fullmatch(text):
            raise ValueError(text)
        return datetime.fromisoformat(text.upper()).timestamp()
    except (ValueError, OverflowError):
        msg = "a time is RFC 3339 with its UTC offset, like 2026-11-30T00:00:00Z"
        raise InvalidRequestError(msg, errors=[{"loc": loc, "msg": msg}]) from None
