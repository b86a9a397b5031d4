"""SqliteControlStore: operator switches and the audit log in the shared file."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.adapters.sqlite.sql import MISC
from ferryman.ports.control import (
    PROVIDER_SWITCH_PREFIX,
    AuditAction,
    AuditRecord,
    ProviderPause,
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

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        def op(conn: sqlite3.Connection) -> dict[str, ProviderPause]:
            rows = conn.execute(MISC["paused_rows"]).fetchall()
            pauses = (_pause(row) for row in rows)
            return {pause.provider: pause for pause in pauses if pause is not None}

        return await self._db.read(op)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(provider_switch(provider), paused, actor=actor, now=now, reason=reason)

    async def pause_provider_automatically(self, pause: ProviderPause) -> bool:
        switch = provider_switch(pause.provider)
        params = {
            "switch": switch,
            "actor": pause.actor,
            "since": pause.since,
            "reason": pause.reason,
            "next_probe_at": pause.next_probe_at,
            "probe_interval_seconds": pause.probe_interval_seconds,
        }
        record = AuditRecord(
            at=pause.since,
            actor=pause.actor,
            action=AuditAction.PAUSE,
            target=switch,
            reason=pause.reason,
        )

        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(MISC["pause_automatically"], params).rowcount != 1:
                return False
            _insert_audit(conn, record)
            return True

        return await self._db.write(op)

    async def take_provider_probe(
        self, provider: str, *, now: float, next_probe_at: float, probe_interval_seconds: float
    ) -> ProviderPause | None:
        switch = provider_switch(provider)
        params = {
            "switch": switch,
            "now": now,
            "next_probe_at": next_probe_at,
            "probe_interval_seconds": probe_interval_seconds,
        }

        def op(conn: sqlite3.Connection) -> ProviderPause | None:
            if conn.execute(MISC["take_probe"], params).rowcount != 1:
                return None
            return _pause(conn.execute(MISC["paused_row"], {"switch": switch}).fetchone())

        return await self._db.write(op)

    async def resume_provider_automatically(
        self, provider: str, *, since: float, actor: str, now: float, reason: str
    ) -> bool:
        switch = provider_switch(provider)
        params = {"switch": switch, "since": since, "actor": actor, "now": now}
        record = AuditRecord(
            at=now, actor=actor, action=AuditAction.RESUME, target=switch, reason=reason
        )

        def op(conn: sqlite3.Connection) -> bool:
            if conn.execute(MISC["resume_automatically"], params).rowcount != 1:
                return False
            _insert_audit(conn, record)
            return True

        return await self._db.write(op)

    async def _flip(
        self, switch: str, paused: bool, *, actor: str, now: float, reason: str | None
    ) -> None:
        params = {
            "switch": switch,
            "paused": int(paused),
            "actor": actor,
            "updated_at": now,
            "reason": reason,
        }
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


def _pause(row: Any) -> ProviderPause | None:
    """A paused row as a provider's pause (None for a row that is no provider's)."""
    if row is None or not row["switch"].startswith(PROVIDER_SWITCH_PREFIX):
        return None
    return ProviderPause(
        provider=row["switch"].removeprefix(PROVIDER_SWITCH_PREFIX),
        since=row["since"],
        actor=row["actor"],
        reason=row["reason"],
        automatic=bool(row["automatic"]),
        next_probe_at=row["next_probe_at"],
        probe_interval_seconds=row["probe_interval_seconds"],
    )


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
