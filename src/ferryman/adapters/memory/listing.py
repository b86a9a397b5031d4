"""Pages of jobs, newest first, cut where the SQL engines cut them.

The cursor is written and read by core/cursors.py, as in the SQL engines. A
job weighs what it weighs there (ports/store.py, ``JobStore.list_jobs``): the bytes of
its metadata and error as a SQL engine stores them, so a budget ends a page at the
same job on every engine.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.job_rows import dump_json, error_json
from ferryman.core.cursors import cursor_after, position_of
from ferryman.ports.store import LIST_ITEM_BYTES, JobPage, JobSummary

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ferryman.core.job import Job


def weight_of(job: Job) -> int:
    metadata = "" if job.metadata is None else dump_json(job.metadata)
    return LIST_ITEM_BYTES + len(metadata.encode()) + len((error_json(job.error) or "").encode())


def page_of(
    jobs: Iterable[Job], *, limit: int, cursor: str | None, max_bytes: int | None
) -> JobPage:
    """The page after ``cursor`` of the matching jobs; job ids are ULIDs, so newest sorts last."""
    after = None if cursor is None else position_of(cursor)
    ordered = sorted(jobs, key=lambda j: j.job_id, reverse=True)
    if after is not None:
        ordered = [j for j in ordered if j.job_id < after]
    limit = max(1, limit)
    page: list[JobSummary] = []
    listed = 0
    for job in ordered:
        weight = weight_of(job)
        over = max_bytes is not None and listed + weight > max_bytes
        if len(page) == limit or (page and over):
            return JobPage(
                jobs=page, next_cursor=cursor_after(page[-1].job_id), listed_bytes=listed
            )
        page.append(JobSummary.of(job))
        listed += weight
    return JobPage(jobs=page, next_cursor=None, listed_bytes=listed)
