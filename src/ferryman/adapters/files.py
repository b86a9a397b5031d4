"""FileResultStore: results in append-only segment files under one directory.

Why segments and not a file per result: creating a file and making it durable costs
an inode, a directory entry and a journal commit each, which on ordinary ext4 is far
more than the job's whole database work. Appending to a segment and syncing it once
for every result written at that moment costs one ``write`` and one ``fdatasync``
per batch.

Layout: ``<root>/<ULID>.results``, one active segment per store (per process), a
new one after ``segment_bytes``. Each record is a JSON header line, the result's
bytes, and a newline, so a segment reads as text::

    {"key": "acme/gen_01.../att_01....json", "length": 17}
    {"text": "hello"}

A ref names the segment and where the bytes are: ``file:<segment>@<offset>+<length>``.
A put returns only after ``fdatasync``. A crash mid-batch can leave a torn record
at the end of a segment; no ref points at it (its put never returned), and the
segment is never appended to again (a new store opens a new segment). After a failed
write or sync a segment is abandoned too, since what reached the disk is unknown.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from pathlib import Path, PurePosixPath

from ulid import ULID

from ferryman.adapters.batching import BatchingThread, Outcome

_PREFIX = "file:"
_REF = re.compile(r"^file:([0-9A-Z]{26}\.results)@(\d+)\+(\d+)$")
MAX_BATCH = 256
DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024


class FileResultStore:
    def __init__(
        self, root: str | os.PathLike[str], *, segment_bytes: int = DEFAULT_SEGMENT_BYTES
    ) -> None:
        self._root = Path(root)
        self._segments = _SegmentWriter(self._root, segment_bytes=segment_bytes)
        self._writer: BatchingThread[tuple[str, bytes]] = BatchingThread(
            self._segments.append_batch, max_batch=MAX_BATCH, name="ferryman-results-write"
        )

    async def put(self, key: str, data: bytes) -> str:
        _check_key(key)
        ref: str = await self._writer.submit((key, data))
        return ref

    async def get(self, ref: str) -> bytes:
        match = _REF.match(ref)
        if match is None:
            raise KeyError(ref)
        name, offset, length = match.group(1), int(match.group(2)), int(match.group(3))
        try:
            data = await asyncio.to_thread(_read_at, self._root / name, offset, length)
        except FileNotFoundError:
            raise KeyError(ref) from None
        if len(data) != length:
            raise KeyError(ref)
        return data

    def close(self) -> None:
        """Finish the puts already submitted, stop the writer, close the segment (blocking)."""
        self._writer.close()
        self._segments.close()


def _check_key(key: str) -> None:
    """Keys are relative, path-like names; refuse what would be ambiguous or hostile."""
    if not key or "\x00" in key or "\\" in key or "\n" in key:
        raise ValueError("a result key must be a non-empty relative path on one line")
    if PurePosixPath(key).is_absolute() or os.path.isabs(key):
        raise ValueError("a result key cannot be an absolute path")
    if any(part in ("", ".", "..") for part in key.split("/")):
        raise ValueError("a result key cannot contain '..', '.' or empty segments")


def _read_at(path: Path, offset: int, length: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, length, offset)
    finally:
        os.close(fd)


class _SegmentWriter:
    """The active segment; used by the store's writer thread only."""

    def __init__(self, root: Path, *, segment_bytes: int) -> None:
        self._root = root
        self._segment_bytes = segment_bytes
        self._fd: int | None = None
        self._name = ""
        self._size = 0

    def append_batch(self, puts: list[tuple[str, bytes]]) -> list[Outcome]:
        try:
            refs = self._append(puts)
        except OSError as exc:
            self._abandon()
            return [Outcome(error=exc)] * len(puts)
        return [Outcome(value=ref) for ref in refs]

    def _append(self, puts: list[tuple[str, bytes]]) -> list[str]:
        if self._fd is None or self._size >= self._segment_bytes:
            self._open_new_segment()
        assert self._fd is not None
        chunks: list[bytes] = []
        refs: list[str] = []
        position = self._size
        for key, data in puts:
            header = json.dumps({"key": key, "length": len(data)}).encode() + b"\n"
            position += len(header)
            refs.append(f"{_PREFIX}{self._name}@{position}+{len(data)}")
            chunks += [header, data, b"\n"]
            position += len(data) + 1
        payload = b"".join(chunks)
        written = 0
        while written < len(payload):
            written += os.write(self._fd, payload[written:])
        os.fdatasync(self._fd)
        self._size = position
        return refs

    def _open_new_segment(self) -> None:
        self._abandon()
        _make_dirs_durably(self._root)
        self._name = f"{ULID()}.results"
        self._fd = os.open(
            self._root / self._name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644
        )
        self._size = 0
        # The new name must survive a crash before any ref into it is handed out.
        _fsync_dir(self._root)

    def _abandon(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            os.close(fd)

    def close(self) -> None:
        self._abandon()


def _make_dirs_durably(directory: Path) -> None:
    """Create missing directories, fsyncing each parent so the new entries persist."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for new_dir in reversed(missing):
        new_dir.mkdir(exist_ok=True)
        _fsync_dir(new_dir.parent)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
