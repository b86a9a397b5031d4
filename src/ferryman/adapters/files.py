"""FileResultStore: results as files under one directory (``file:<key>`` refs).

A put is durable on return: the bytes go to a temporary file in the target
directory, which is fsynced, renamed over the final name (atomic on POSIX), and
the directory is fsynced so the rename itself survives a crash. Readers therefore
see either nothing or the whole result, never a torn file.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path, PurePosixPath

_PREFIX = "file:"


class FileResultStore:
    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._root = Path(root)

    async def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        await asyncio.to_thread(self._write, path, data)
        return _PREFIX + key

    async def get(self, ref: str) -> bytes:
        if not ref.startswith(_PREFIX):
            raise KeyError(ref)
        path = self._path(ref.removeprefix(_PREFIX))
        try:
            return await asyncio.to_thread(path.read_bytes)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyError(ref) from None

    def _path(self, key: str) -> Path:
        """The file for ``key``; ValueError for a key that could leave the root."""
        if not key or "\x00" in key or "\\" in key:
            raise ValueError("a result key must be a non-empty relative path")
        pure = PurePosixPath(key)
        if pure.is_absolute() or os.path.isabs(key):
            raise ValueError("a result key cannot be an absolute path")
        parts = key.split("/")
        if any(part in ("", ".", "..") for part in parts):
            raise ValueError("a result key cannot contain '..', '.' or empty segments")
        return self._root.joinpath(*parts)

    def _write(self, path: Path, data: bytes) -> None:
        _make_dirs_durably(path.parent)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
        try:
            with open(tmp, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


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
