"""The dead letters no worker can read, as the SQL engines page and return them.

Both engines keep them in a ``dead_letters`` table (``job_id`` NULL) and page them by
(``dead_lettered_at``, ``id``): one way to bind the page and to read a row, here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.ports.queue import UndecodableLetter

if TYPE_CHECKING:
    from collections.abc import Mapping


def page_params(limit: int, after: tuple[float, str] | None) -> dict[str, Any]:
    """The bound parameters of an ``undecodable_letters`` query."""
    return {
        "limit": max(0, limit),
        "after_at": None if after is None else after[0],
        "after_id": None if after is None else after[1],
    }


def letter_from_row(row: Mapping[str, Any]) -> UndecodableLetter:
    return UndecodableLetter(
        dead_letter_id=row["id"],
        body=row["body"],
        sent_at=row["sent_at"],
        dead_lettered_at=row["dead_lettered_at"],
        receive_count=row["receive_count"],
    )
