"""PostgresControlStore: operator switches and the audit log, shared by every machine."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.database import execute, fetch_one
from ferryman.adapters.postgres.sharedread import SharedRead
from ferryman.adapters.postgres.sql import MISC
from ferryman.ports.control import (
    PROVIDER_SWITCH_PREFIX,
    AuditAction,
    AuditRecord,
    ProviderPause,
    Switch,
    provider_switch,
)

if TYPE_CHECKING:
    from typing import Any

    import psycopg

    from ferryman.adapters.postgres.database import PostgresDatabase, Row


class PostgresControlStore:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db
        # Every accept asks: concurrent asks share a read that started after each asked.
        self._switches: SharedRead[None, list[Row]] = SharedRead(self._read_paused)

    async def _paused_rows(self) -> list[Row]:
        return await self._switches.get(None)

    async def _read_paused(self, _: None) -> list[Row]:
        return await self._db.fetch_all(MISC["paused_rows"])

    async def paused(self) -> frozenset[Switch]:
        # A switch written by a newer version that this one does not know is ignored.
        known = {str(s) for s in Switch}
        return frozenset(
            Switch(row["switch"]) for row in await self._paused_rows() if row["switch"] in known
        )

    async def paused_providers(self) -> frozenset[str]:
        return frozenset(await self.provider_pauses())

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        pauses = (_pause(row) for row in await self._paused_rows())
        return {pause.provider: pause for pause in pauses if pause is not None}

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        await self._flip(str(switch), paused, actor=actor, now=now, reason=reason)

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
        async with self._db.transaction() as conn:
            if await fetch_one(conn, MISC["pause_automatically"], params) is None:
                return False
            await _insert_audit(conn, record)
        return True

    async def take_provider_probe(
        self, provider: str, *, now: float, next_probe_at: float, probe_interval_seconds: float
    ) -> ProviderPause | None:
        params = {
            "switch": provider_switch(provider),
            "now": now,
            "next_probe_at": next_probe_at,
            "probe_interval_seconds": probe_interval_seconds,
        }
        async with self._db.transaction() as conn:
            return _pause(await fetch_one(conn, MISC["take_probe"], params))

    async def resume_provider_automatically(
        self, provider: str, *, since: float, actor: str, now: float, reason: str
    ) -> bool:
        switch = provider_switch(provider)
        params = {"switch": switch, "since": since, "actor": actor, "now": now}
        record = AuditRecord(
            at=now, actor=actor, action=AuditAction.RESUME, target=switch, reason=reason
        )
        async with self._db.transaction() as conn:
            if await fetch_one(conn, MISC["resume_automatically"], params) is None:
                return False
            await _insert_audit(conn, record)
        return True

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
                {
                    "switch": switch,
                    "paused": paused,
                    "actor": actor,
                    "updated_at": now,
                    "reason": reason,
                },
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


def _pause(row: Row | None) -> ProviderPause | None:
    """A paused row as a provider's pause (None for a row that is no provider's)."""
    if row is None or not str(row["switch"]).startswith(PROVIDER_SWITCH_PREFIX):
        return None
    return ProviderPause(
        provider=str(row["switch"]).removeprefix(PROVIDER_SWITCH_PREFIX),
        since=row["since"],
        actor=row["actor"],
        reason=row["reason"],
        automatic=bool(row["automatic"]),
        next_probe_at=row["next_probe_at"],
        probe_interval_seconds=row["probe_interval_seconds"],
    )


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
