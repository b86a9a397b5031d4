"""Pages of jobs, newest first, with an opaque cursor (the last job id seen, encoded)."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING

from ferryman.core.errors import InvalidRequestError
from ferryman.ports.store import JobPage

if TYPE_CHECKING:
    from ferryman.core.job import Job


def encode_cursor(job_id: str) -> str:
    return base64.urlsafe_b64encode(job_id.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> str:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        return base64.urlsafe_b64decode(padded.encode("ascii")).decode("utf-8")
    except (binascii.Error, UnicodeError, ValueError) as exc:
        raise InvalidRequestError("The cursor is not valid.") from exc


def page_of(jobs: list[Job], *, limit: int, cursor: str | None) -> JobPage:
    """The page after ``cursor`` of the matching jobs; job ids are ULIDs, so newest sorts last."""
    ordered = sorted(jobs, key=lambda j: j.job_id, reverse=True)
    if cursor is not None:
        after = decode_cursor(cursor)
        ordered = [j for j in ordered if j.job_id < after]
    page = ordered[: max(1, limit)]
    more = len(ordered) > len(page)
    return JobPage(jobs=page, next_cursor=encode_cursor(page[-1].job_id) if more else None)
