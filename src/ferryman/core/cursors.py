"""Page cursors: where a list of jobs resumes, written and read in this one place.

A cursor is opaque: a client passes back a ``next_cursor`` a list gave it and never
builds one. What it holds is the id of the last job the previous page served: job
ids are ULIDs, so they order every list (newest first) on every engine, and the
tenant and filters come with the request, so the id alone says where to resume.
Every engine's ``list_jobs`` writes its ``next_cursor`` with ``cursor_after`` and
reads the cursor it is given with ``position_of``; the HTTP layer refuses anything
``CURSOR_PATTERN`` does not match before a store sees it. Should a position ever
need more than a job id, only this module changes (a new form is told from this one
by its first characters, so cursors given out before stay readable).
"""

from __future__ import annotations

import re

from ferryman.core.errors import InvalidRequestError

# What ``cursor_after`` writes, and all ``position_of`` reads: ``gen_`` and a ULID
# (core/ids.py), in Crockford's base32 capitals.
CURSOR_PATTERN = r"^gen_[0-9A-HJKMNP-TV-Z]{26}$"
CURSOR_CHARS = 30
_CURSOR = re.compile(CURSOR_PATTERN)


class InvalidCursorError(InvalidRequestError):
    """The cursor is not a next_cursor a list of jobs gave."""


def cursor_after(job_id: str) -> str:
    """The cursor of a page whose last job is ``job_id``: the next page starts after it."""
    return job_id


def position_of(cursor: str) -> str:
    """The job id a page resumes after (the next page holds older jobs only).

    Raises InvalidCursorError for anything ``cursor_after`` did not write: empty, too
    long, another list's cursor, text no engine could compare (a lone surrogate).
    """
    if len(cursor) != CURSOR_CHARS or _CURSOR.fullmatch(cursor) is None:
        raise InvalidCursorError()
    return cursor
