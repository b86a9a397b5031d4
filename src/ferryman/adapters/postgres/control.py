"""PostgresControlStore: operator switches and the audit log, shared by every machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.database import execute
from ferryman.adapters.postgres.sharedread import SharedRead
from ferryman.adapters.postgres.sql import MISC
from ferryman.ports.control import (
    PROVIDER_SWITCH_PREFIX,
    AuditAction,
    AuditRecord,
    Switch,
    provider_switch,
)

if TYPE_CHECKING:
    from typing import Any

    import psycopg

    from ferryman.adapters.postgres.database import PostgresDatabase


class PostgresControlStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        # Every accept asks: concurrent asks share a read that started after each asked.
        self._switches: SharedRead[None, list[str]] = SharedRead(self._read_paused)

    async def _paused_names(self) -> list[str]:
        return await self._switches.get(None)

    async def _read_paused(self, _: None) -> list[str]:
        return [str(row["switch"]) for row in await self._db.fetch_all(MISC["paused_switches"])]

    async def paused(self) -> frozenset[Switch]:
        # A switch written by a newer version that this one does not know is ignored.
        known = {str(s) for s in Switch}
        return frozenset(Switch(name) for name in await self._paused_names() if name in known)

    async def paused_providers(self) -> frozenset[str]:
        return frozenset(
            name.removeprefix(PROVIDER_SWITCH_PREFIX)
            for name in await self._paused_names()
            if name.startswith(PROVIDER_SWITCH_PREFIX)
        )

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(str(switch), paused, actor=actor, now=now, reason=reason)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(provider_switch(provider), paused, actor=actor, now=now, reason=reason)

    async def _flip(
        self, switch: str, paused: bool, *, actor: str, now: float, reason: str | None
    ) -> None:
        record = AuditRecord(
            at=now,
            actor=actor,
            action=AuditAction.PAUSE if paused else AuditAction.RESUME,
            target=switch,
            reason=reason,
        )
        async with self._db.transaction() as conn:
            await execute(
                conn,
                MISC["set_switch"],
                {"switch": switch, "paused": paused, "actor": actor, "updated_at": now},
            )
            await _insert_audit(conn, record)

    async def record_audit(self, record: AuditRecord) -> None:
        async with self._db.transaction() as conn:
            await _insert_audit(conn, record)

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        rows = await self._db.fetch_all(
            MISC["audit_log"], {"limit": max(0, limit), "before": before}
        )
        known = {str(a) for a in AuditAction}
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
            if row["action"] in known
        ]


async def _insert_audit(conn: psycopg.AsyncConnection[Any], record: AuditRecord) -> None:
    await execute(
        conn,
        MISC["insert_audit"],
        {
            "at": record.at,
            "actor": record.actor,
            "action": str(record.action),
            "target": record.target,
            "reason": record.reason,
        },
    )
