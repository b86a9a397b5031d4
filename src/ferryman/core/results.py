"""The result key rule: where an attempt's output is stored, and how to tell whose it is.

A key names the tenant, the job and the attempt: ``<tenant>/<job_id>.<attempt_id>.json``.
Attempt-specific, so a late attempt can never overwrite the published result; and
every store checks on read that the record it found carries the key the reader
expected, so a damaged or misplaced record is never served as another job's output.
The layout is the one ferryman has always written, so old data stays readable.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

_SUFFIX = ".json"
# reclaim asks about at most this many job ids at once (SQL engines bind each one).
MAX_IDS_PER_QUESTION = 500


def result_key(tenant_id: str, job_id: str, attempt_id: str) -> str:
    return f"{tenant_id}/{job_id}.{attempt_id}{_SUFFIX}"


def _ids_of(key: str) -> tuple[str, str] | None:
    """(job id, attempt id) of a key this rule made; None for any other key."""
    _, _, name = key.rpartition("/")
    if not name.endswith(_SUFFIX):
        return None
    job_id, dot, attempt_id = name.removesuffix(_SUFFIX).partition(".")
    if not job_id or not dot or not attempt_id or "." in attempt_id:
        return None
    return job_id, attempt_id


def job_id_of(key: str) -> str | None:
    """The job a key belongs to, or None for a key this rule did not make."""
    ids = _ids_of(key)
    return None if ids is None else ids[0]


def attempt_id_of(key: str) -> str | None:
    """The attempt whose output a key names, or None for a key this rule did not make."""
    ids = _ids_of(key)
    return None if ids is None else ids[1]


def checksum(data: bytes) -> str:
    """The checksum a ref carries for its bytes (sha256, lowercase hex)."""
    return hashlib.sha256(data).hexdigest()


async def gone_jobs(
    job_ids: Collection[str], any_job_exists: Callable[[Collection[str]], Awaitable[bool]]
) -> set[str]:
    """The ids among ``job_ids`` whose jobs no longer exist.

    Asks ``any_job_exists`` about whole groups and splits only the groups where some
    job lives, so after a purge (most gone) it takes a few questions, not one per job.
    """
    gone: set[str] = set()
    pending = [sorted(set(job_ids))]
    while pending:
        group = pending.pop()
        if not group:
            continue
        if len(group) > MAX_IDS_PER_QUESTION:
            middle = len(group) // 2
            pending += [group[:middle], group[middle:]]
        elif not await any_job_exists(group):
            gone.update(group)
        elif len(group) > 1:
            middle = len(group) // 2
            pending += [group[:middle], group[middle:]]
    return gone
