"""SqliteResultStore: results kept inline in the database file.

A ref is ``db:<key>;sha256=<hex>``: the row's key, and the checksum of its bytes, so
a row changed in place is caught on read. Refs written before checksums existed,
``db:<key>``, stay readable; for them the key alone is checked.
"""

from __future__ import annotations

import re
from functools import partial
from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.core.errors import (
    ResultsUnavailableError,
    ResultUnreadableError,
    StoreUnavailableError,
)
from ferryman.core.results import checksum, gone_jobs, job_id_of

if TYPE_CHECKING:
    import sqlite3
    from collections.abc import Awaitable, Callable, Collection

    from ferryman.adapters.sqlite.database import SqliteDatabase

_REF = re.compile(r"^db:(.+?)(?:;sha256=([0-9a-f]{64}))?$", re.DOTALL)
# Never a key the result rule makes (those start with a tenant id and a slash).
_PROBE_KEY = ".probe"
_RECLAIM_PAGE = 500


class SqliteResultStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def put(self, key: str, data: bytes) -> str:
        if not key:
            raise ValueError("a result key cannot be empty")
        # Durable on return: write() resolves only after COMMIT (synchronous=FULL).
        await self._db.write(
            lambda conn: conn.execute(MISC["put_result"], {"key": key, "data": data})
        )
        return f"db:{key};sha256={checksum(data)}"

    async def get(self, ref: str, *, key: str) -> bytes:
        match = _REF.match(ref)
        if match is None:
            raise ResultUnreadableError("the stored result's reference is not a database reference")
        stored_key, digest = match.groups()
        # Never say whose result the ref names: that could be another tenant's.
        if stored_key != key:
            raise ResultUnreadableError("the stored result's reference names another result")

        def op(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(MISC["get_result"], {"key": key}).fetchone()
            return None if row is None else bytes(row["data"])

        data = await self._db.read(op)
        if data is None:
            raise ResultUnreadableError("the stored result is missing")
        if digest is not None and checksum(data) != digest:
            raise ResultUnreadableError("the stored result's bytes do not match their checksum")
        return data

    async def probe(self) -> None:
        def op(conn: sqlite3.Connection) -> None:
            # A real write (undone in the same transaction) finds a full disk or a lock.
            conn.execute(MISC["put_result"], {"key": _PROBE_KEY, "data": b"probe"})
            conn.execute(MISC["delete_result"], {"key": _PROBE_KEY})

        try:
            await self._db.write(op)
        except StoreUnavailableError as exc:
            raise ResultsUnavailableError(f"results: {exc.message}") from exc

    async def reclaim(self, *, any_job_exists: Callable[[Collection[str]], Awaitable[bool]]) -> int:
        reclaimed = 0
        after = ""
        while True:
            page = await self._db.read(partial(_sizes_after, after=after))
            if not page:
                return reclaimed
            after = page[-1][0]
            owners = {key: job_id_of(key) for key, _ in page}
            gone = await gone_jobs({o for o in owners.values() if o}, any_job_exists)
            doomed = [(key, size) for key, size in page if owners[key] in gone]
            if doomed:
                await self._db.write(partial(_delete, keys=[key for key, _ in doomed]))
                reclaimed += sum(size for _, size in doomed)


def _sizes_after(conn: sqlite3.Connection, *, after: str) -> list[tuple[str, int]]:
    rows = conn.execute(MISC["result_sizes_after"], {"after": after, "limit": _RECLAIM_PAGE})
    return [(str(row["key"]), int(row["size"])) for row in rows]


def _delete(conn: sqlite3.Connection, *, keys: list[str]) -> None:
    conn.executemany(MISC["delete_result"], [{"key": key} for key in keys])
