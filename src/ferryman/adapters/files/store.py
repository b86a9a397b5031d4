"""FileResultStore: results in append-only segment files under one directory.

Why segments and not a file per result: creating a file and making it durable costs
an inode, a directory entry and a journal commit each, which on ordinary ext4 is far
more than the job's whole database work. Appending to a segment and syncing it once
for every result written at that moment costs one ``write`` and one ``fdatasync``
per batch.

Layout: ``<root>/<ULID>.results``, one active segment per store (per process), a
new one after ``segment_bytes``. The record format and how a ref is verified are in
``records.py``; how the active segment is written and checked in ``segments.py``;
probing and reclaiming space in ``upkeep.py``.

A put returns only after ``fdatasync`` and a read-back through the path. A crash
mid-batch can leave a torn record at the end of a segment; no ref points at it (its
put never returned), and the segment is never appended to again (a new store opens
a new segment).
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from ferryman.adapters.batching import BatchingThread, ClosedError
from ferryman.adapters.files import upkeep
from ferryman.adapters.files.records import MAX_HEADER_BYTES, FileRef, parse_ref, verify
from ferryman.adapters.files.segments import SegmentWriter, read_exactly
from ferryman.core.errors import ResultsUnavailableError, ResultUnreadableError
from ferryman.core.results import MAX_IDS_PER_QUESTION

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection

MAX_BATCH = 256
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024
# probe() fails below this much free space: a put of an ordinary result would still
# fit, but a worker should not start calls whose output may have nowhere to go.
DEFAULT_MIN_FREE_BYTES = 16 * 1024 * 1024
# reclaim leaves younger segments alone: one just created may not hold its lock yet.
DEFAULT_RECLAIM_MIN_AGE_SECONDS = 60.0
# Room in a header for everything but the key (length, checksum, JSON punctuation).
_HEADER_OVERHEAD_BYTES = 128


class FileResultStore:
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        segment_bytes: int = DEFAULT_SEGMENT_BYTES,
        min_free_bytes: int = DEFAULT_MIN_FREE_BYTES,
        reclaim_min_age_seconds: float = DEFAULT_RECLAIM_MIN_AGE_SECONDS,
    ) -> None:
        self._root = Path(root)
        self._min_free_bytes = min_free_bytes
        self._reclaim_min_age_seconds = reclaim_min_age_seconds
        self._segments = SegmentWriter(self._root, segment_bytes=segment_bytes)
        self._writer: BatchingThread[tuple[str, bytes]] = BatchingThread(
            self._segments.append_batch, max_batch=MAX_BATCH, name="ferryman-results-write"
        )

    async def put(self, key: str, data: bytes) -> str:
        _check_key(key)
        try:
            future = self._writer.submit((key, data))
        except ClosedError:
            raise ResultsUnavailableError("results: the store is closed") from None
        ref: str = await future
        return ref

    async def get(self, ref: str, *, key: str) -> bytes:
        parsed = parse_ref(ref)
        return await asyncio.to_thread(_read_verified, self._root, parsed, key)

    async def probe(self) -> None:
        await asyncio.to_thread(upkeep.probe, self._root, min_free_bytes=self._min_free_bytes)

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        names = await asyncio.to_thread(
            upkeep.sealed_candidates, self._root, active=self._segments.active_segment
        )
        reclaimed = 0
        for name in names:
            held = await asyncio.to_thread(
                upkeep.hold_for_reclaim,
                self._root,
                name,
                min_age_seconds=self._reclaim_min_age_seconds,
            )
            if held is None:
                continue
            try:
                if not await _any_exists(held.job_ids, any_job_exists):
                    reclaimed += await asyncio.to_thread(upkeep.delete_segment, self._root, held)
            finally:
                held.release()
        return reclaimed

    def close(self) -> None:
        """Finish the puts already submitted, stop the writer, close the segment (blocking)."""
        self._writer.close()
        self._segments.close()


async def _any_exists(
    job_ids: set[str], any_job_exists: Callable[[Collection[str]], Awaitable[bool]]
) -> bool:
    ordered = sorted(job_ids)
    for start in range(0, len(ordered), MAX_IDS_PER_QUESTION):
        if await any_job_exists(ordered[start : start + MAX_IDS_PER_QUESTION]):
            return True
    return False


def _check_key(key: str) -> None:
    """Keys are relative, path-like names; refuse what would be ambiguous or hostile."""
    if not key or "\x00" in key or "\\" in key or "\n" in key:
        raise ValueError("a result key must be a non-empty relative path on one line")
    if PurePosixPath(key).is_absolute() or os.path.isabs(key):
        raise ValueError("a result key cannot be an absolute path")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError("a result key cannot contain '..', '.' or empty segments")
    if len(json.dumps(key)) + _HEADER_OVERHEAD_BYTES > MAX_HEADER_BYTES:
        raise ValueError("a result key is too long for a record header")


def _read_verified(root: Path, ref: FileRef, key: str) -> bytes:
    start, size = ref.window()
    try:
        fd = os.open(root / ref.segment, os.O_RDONLY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        raise ResultUnreadableError("the stored result's segment is missing") from None
    except OSError as exc:
        raise ResultsUnavailableError(
            f"results: cannot open a segment: {exc.strerror or type(exc).__name__}"
        ) from exc
    try:
        buffer = read_exactly(fd, size, start)
    except IsADirectoryError:
        raise ResultUnreadableError("the stored result's segment is not a file") from None
    except OSError as exc:
        raise ResultsUnavailableError(
            f"results: cannot read a segment: {exc.strerror or type(exc).__name__}"
        ) from exc
    finally:
        os.close(fd)
    return verify(ref, buffer, start, key=key)
