"""The active segment: appended to by the store's writer thread only.

A batch of puts is one ``write`` and one ``fdatasync``. Before each batch the
segment is checked against its path (deleted, replaced, truncated or grown by
someone else: a ref computed from our own count of bytes would then point at the
wrong place), and after the sync the batch is read back through the path, so a put
returns only when a reader can find exactly what it wrote. A segment that fails
either check, or any write or sync, is abandoned (what reached the disk is unknown)
and the batch is written once more to a new segment.

The active segment holds a shared ``flock`` for as long as it is active, so reclaim
(which takes an exclusive one without waiting) never deletes a segment some live
process still appends to.
"""

from __future__ import annotations

import fcntl
import os
from typing import TYPE_CHECKING

from ulid import ULID

from ferryman.adapters.batching import Outcome
from ferryman.adapters.files.records import FileRef, encode_record
from ferryman.core.errors import ResultsUnavailableError

if TYPE_CHECKING:
    from pathlib import Path

# Results are customer data: segments are the owner's alone, and so is any
# directory the store makes.
FILE_MODE = 0o600
DIRECTORY_MODE = 0o700
SEGMENT_SUFFIX = ".results"
# A batch is written to at most this many segments before its puts fail.
_WRITE_TRIES = 2


class SegmentDamagedError(OSError):
    """The active segment no longer holds what this process wrote to it."""


class SegmentWriter:
    def __init__(self, root: Path, *, segment_bytes: int) -> None:
        self._root = root
        self._segment_bytes = segment_bytes
        self._fd: int | None = None
        self._name = ""
        self._size = 0

    @property
    def active_segment(self) -> str:
        """The name of the segment being appended to ('' before the first put)."""
        return self._name if self._fd is not None else ""

    def append_batch(self, puts: list[tuple[str, bytes]]) -> list[Outcome]:
        error: OSError | None = None
        for _ in range(_WRITE_TRIES):
            try:
                refs = self._append(puts)
            except OSError as exc:
                self._abandon(after_failure=True)
                error = exc
                continue
            return [Outcome(value=ref) for ref in refs]
        failure = ResultsUnavailableError(f"results: cannot write a segment: {_describe(error)}")
        failure.__cause__ = error
        return [Outcome(error=failure)] * len(puts)

    def _append(self, puts: list[tuple[str, bytes]]) -> list[str]:
        if self._fd is None or self._size >= self._segment_bytes or not self._intact():
            self._open_new_segment()
        assert self._fd is not None
        start = self._size
        chunks: list[bytes] = []
        refs: list[str] = []
        position = start
        for key, data in puts:
            header, digest = encode_record(key, data)
            refs.append(str(FileRef(self._name, position, len(data), digest)))
            chunks += [header, data, b"\n"]
            position += len(header) + len(data) + 1
        payload = b"".join(chunks)
        written = 0
        while written < len(payload):
            written += os.write(self._fd, payload[written:])
        os.fdatasync(self._fd)
        self._confirm(start, payload)
        self._size = position
        return refs

    def _intact(self) -> bool:
        """Does the path still lead to our segment, holding exactly what we wrote?"""
        assert self._fd is not None
        mine = os.fstat(self._fd)
        if mine.st_nlink == 0 or mine.st_size != self._size:
            return False
        try:
            named = os.stat(self._root / self._name)
        except OSError:
            return False
        return (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino)

    def _confirm(self, start: int, payload: bytes) -> None:
        """Read the batch back through the path, as any reader will."""
        fd = os.open(self._root / self._name, os.O_RDONLY | os.O_CLOEXEC)
        try:
            found = read_exactly(fd, len(payload), start)
        finally:
            os.close(fd)
        if found != payload:
            raise SegmentDamagedError("the segment changed while this batch was written")

    def _open_new_segment(self) -> None:
        self._abandon()
        make_dirs_durably(self._root)
        name = f"{ULID()}{SEGMENT_SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | os.O_CLOEXEC
        fd = os.open(self._root / name, flags, FILE_MODE)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            # The new name must survive a crash before any ref into it is handed out.
            fsync_dir(self._root)
        except BaseException:
            os.close(fd)
            raise
        self._fd, self._name, self._size = fd, name, 0

    def _abandon(self, *, after_failure: bool = False) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            if after_failure and self._size == 0:
                # No ref points into it (none was handed out): do not leave one empty
                # file per failed try while a full disk is being retried.
                _unlink_if_same(self._root / self._name, fd)
        finally:
            os.close(fd)  # also drops the shared lock: reclaim may have it once it is sealed

    def close(self) -> None:
        self._abandon()


def _unlink_if_same(path: Path, fd: int) -> None:
    try:
        mine, named = os.fstat(fd), os.stat(path)
        if (named.st_dev, named.st_ino) == (mine.st_dev, mine.st_ino):
            os.unlink(path)
    except OSError:
        pass  # gone already, or the disk refuses even this: reclaim can take it later


def read_exactly(fd: int, size: int, offset: int) -> bytes:
    """Up to ``size`` bytes at ``offset`` (fewer only at the end of the file)."""
    parts: list[bytes] = []
    while size > 0:
        part = os.pread(fd, size, offset)
        if not part:
            break
        parts.append(part)
        size -= len(part)
        offset += len(part)
    return b"".join(parts)


def make_dirs_durably(directory: Path) -> None:
    """Create missing directories (owner-only), fsyncing each parent so they persist."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for new_dir in reversed(missing):
        try:
            new_dir.mkdir(mode=DIRECTORY_MODE)
        except FileExistsError:
            continue  # another process made it a moment ago
        fsync_dir(new_dir.parent)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _describe(error: OSError | None) -> str:
    """The reason without the path (operators know the directory; logs stay short)."""
    if error is None:
        return "unknown error"
    if isinstance(error, SegmentDamagedError):
        return str(error)
    return error.strerror or type(error).__name__
