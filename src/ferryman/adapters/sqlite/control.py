"""SqliteControlStore: operator switches and the audit log in the shared file."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.sqlite.sql import MISC
from ferryman.ports.control import (
    PROVIDER_SWITCH_PREFIX,
    AuditAction,
    AuditRecord,
    Switch,
    provider_switch,
)

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

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(str(switch), paused, actor=actor, now=now, reason=reason)

    async def paused_providers(self) -> frozenset[str]:
        def op(conn: sqlite3.Connection) -> frozenset[str]:
            rows = conn.execute(MISC["paused_switches"]).fetchall()
            return frozenset(
                row["switch"].removeprefix(PROVIDER_SWITCH_PREFIX)
                for row in rows
                if row["switch"].startswith(PROVIDER_SWITCH_PREFIX)
            )

        return await self._db.read(op)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(provider_switch(provider), paused, actor=actor, now=now, reason=reason)

    async def _flip(
        self, switch: str, paused: bool, *, actor: str, now: float, reason: str | None
    ) -> None:
        params = {"switch": switch, "paused": int(paused), "actor": actor, "updated_at": now}
        record = AuditRecord(
            at=now,
            actor=actor,
            action=AuditAction.PAUSE if paused else AuditAction.RESUME,
            target=switch,
            reason=reason,
        )

        def op(conn: sqlite3.Connection) -> None:
            conn.execute(MISC["set_switch"], params)
            _insert_audit(conn, record)

        await self._db.write(op)

    async def record_audit(self, record: AuditRecord) -> None:
        await self._db.write(lambda conn: _insert_audit(conn, record))

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        def op(conn: sqlite3.Connection) -> list[AuditRecord]:
            rows = conn.execute(
                MISC["audit_log"], {"limit": max(0, limit), "before": before}
            ).fetchall()
            return [
                AuditRecord(
                    at=row["at"],
                    actor=row["actor"],
                    action=AuditAction(row["action"]),
                    target=row["target"],
                    reason=row["reason"],
                    record_id=row["id"],
                )
                for row in rows
                if row["action"] in {str(a) for a in AuditAction}
            ]

        return await self._db.read(op)


def _insert_audit(conn: sqlite3.Connection, record: AuditRecord) -> None:
    conn.execute(
        MISC["insert_audit"],
        {
            "at": record.at,
            "actor": record.actor,
            "action": str(record.action),
            "target": record.target,
            "reason": record.reason,
        },
    )
