"""SqliteControlStore: operator switches in the shared file, seen by every process."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.ports.control import Switch

if TYPE_CHECKING:
    import sqlite3

    from ferryman.adapters.sqlite.database import SqliteDatabase


class SqliteControlStore:
    def __init__(self, db: SqliteDatabase) -> None:
        self._db = db

    async def paused(self) -> frozenset[Switch]:
        def op(conn: sqlite3.Connection) -> frozenset[Switch]:
            rows = conn.execute(MISC["paused_switches"]).fetchall()
            # A switch written by a newer version that this one does not know is ignored.
            known = {str(s) for s in Switch}
            return frozenset(Switch(row["switch"]) for row in rows if row["switch"] in known)

        return await self._db.read(op)

    async def set_paused(self, switch: Switch, paused: bool, *, actor: str, now: float) -> None:
        params = {"switch": str(switch), "paused": int(paused), "actor": actor, "updated_at": now}
        await self._db.write(lambda conn: conn.execute(MISC["set_switch"], params))
