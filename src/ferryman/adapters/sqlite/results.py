"""SqliteResultStore: results kept inline in the database file (``db:<key>`` refs)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC

if TYPE_CHECKING:
    import sqlite3

    from ferryman.adapters.sqlite.database import SqliteDatabase

_PREFIX = "db:"


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
        return _PREFIX + key

    async def get(self, ref: str) -> bytes:
        if not ref.startswith(_PREFIX):
            raise KeyError(ref)
        key = ref.removeprefix(_PREFIX)

        def op(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute(MISC["get_result"], {"key": key}).fetchone()
            return None if row is None else bytes(row["data"])

        data = await self._db.read(op)
        if data is None:
            raise KeyError(ref)
        return data
