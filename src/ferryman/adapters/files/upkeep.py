"""Looking after a results directory: can it take a write now, and which segments may go.

Space is reclaimed a whole segment at a time: a sealed segment (no live process
appends to it: none holds its shared lock) whose records all belong to jobs that no
longer exist is deleted. A segment with a record whose owner cannot be told (an
unreadable header in its middle, a key ferryman did not make) is kept. These are
blocking functions for a worker thread.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ulid import ULID

from ferryman.adapters.files.records import SEGMENT_NAME, parse_header
from ferryman.adapters.files.segments import FILE_MODE, fsync_dir
from ferryman.core.errors import ResultsUnavailableError
from ferryman.core.results import job_id_of

if TYPE_CHECKING:
    from pathlib import Path

_LEGACY_HEADER_BYTES = 65536


def probe(root: Path, *, min_free_bytes: int) -> None:
    """Raise ResultsUnavailableError unless a put into ``root`` would succeed now.

    An existing directory gets a real test (a tiny file written, synced and
    removed). A directory not made yet passes when the nearest existing parent
    would let a put create it; the probe itself never creates it.
    """
    target = root
    while not target.exists():
        if target.parent == target:
            raise ResultsUnavailableError("results: no existing parent of the results directory")
        target = target.parent
    if not target.is_dir():
        raise ResultsUnavailableError(f"results: {target.name} is not a directory")
    try:
        stats = os.statvfs(target)
    except OSError as exc:
        raise _unavailable("cannot inspect the results directory", exc) from exc
    free = stats.f_bavail * stats.f_frsize
    if free < min_free_bytes:
        raise ResultsUnavailableError(
            f"results: {free // 1024} KiB free, below the {min_free_bytes // 1024} KiB floor"
        )
    if target != root:
        if not os.access(target, os.W_OK | os.X_OK):
            raise ResultsUnavailableError("results: cannot create the results directory")
        return
    _write_probe_file(root)


def _write_probe_file(root: Path) -> None:
    path = root / f".probe-{ULID()}.tmp"
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        raise _unavailable("cannot create a file in the results directory", exc) from exc
    try:
        os.write(fd, b"probe\n")
        os.fsync(fd)
    except OSError as exc:
        raise _unavailable("cannot write to the results directory", exc) from exc
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


def _unavailable(what: str, exc: OSError) -> ResultsUnavailableError:
    return ResultsUnavailableError(f"results: {what}: {exc.strerror or type(exc).__name__}")


def sealed_candidates(root: Path, *, active: str) -> list[str]:
    """Segment names in ``root`` other than this process's active one, oldest first."""
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if SEGMENT_NAME.match(n) and n != active)


@dataclass(slots=True)
class HeldSegment:
    """A sealed segment under our exclusive lock, and whose records it holds."""

    name: str
    fd: int
    size: int
    job_ids: set[str] = field(default_factory=set)

    def release(self) -> None:
        os.close(self.fd)  # drops the lock


def hold_for_reclaim(root: Path, name: str, *, min_age_seconds: float) -> HeldSegment | None:
    """Lock ``name`` exclusively and read whose records it holds; None to keep it
    (in use, too young to judge, or holding a record whose owner cannot be told)."""
    try:
        fd = os.open(root / name, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)  # some live process appends to it
        return None
    try:
        held = _scan(fd, name, min_age_seconds=min_age_seconds)
    except OSError:
        held = None
    if held is None:
        os.close(fd)
    return held


def _scan(fd: int, name: str, *, min_age_seconds: float) -> HeldSegment | None:
    stats = os.fstat(fd)
    if stats.st_nlink == 0 or time.time() - stats.st_mtime < min_age_seconds:
        return None
    held = HeldSegment(name=name, fd=fd, size=stats.st_size)
    position = 0
    with os.fdopen(os.dup(fd), "rb") as segment:
        while True:
            line = segment.readline(_LEGACY_HEADER_BYTES)
            if not line.endswith(b"\n"):
                # At the end: a torn record from a crash (its put never returned).
                # Before the end: a header too long to be ours, so keep the segment.
                return held if not segment.read(1) else None
            header = parse_header(line[:-1])
            owner = None if header is None else job_id_of(header.key)
            if header is None or owner is None:
                return None
            position += len(line) + header.length + 1
            if position > stats.st_size:
                return held  # torn data at the end
            held.job_ids.add(owner)
            segment.seek(position)


def delete_segment(root: Path, held: HeldSegment) -> int:
    """Unlink a held segment (still under our lock) and make that durable; 0 when the
    name no longer leads to the segment we judged."""
    mine, named = os.fstat(held.fd), os.stat(root / held.name)
    if (named.st_dev, named.st_ino) != (mine.st_dev, mine.st_ino):
        return 0
    os.unlink(root / held.name)
    fsync_dir(root)
    return held.size
