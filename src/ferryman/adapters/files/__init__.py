"""ResultStore on a filesystem: append-only segment files under one directory."""

from __future__ import annotations

from ferryman.adapters.files.store import FileResultStore

__all__ = ["FileResultStore"]
