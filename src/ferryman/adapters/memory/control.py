"""InMemoryControlStore: the operator's pause switches and the audit log."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ferryman.ports.control import AuditAction, AuditRecord, provider_switch

if TYPE_CHECKING:
    from ferryman.ports.control import Switch


class InMemoryControlStore:
    def __init__(self) -> None:
        self._paused: set[Switch] = set()
        self._paused_providers: set[str] = set()
        self._audit: list[AuditRecord] = []

    async def paused(self) -> frozenset[Switch]:
        return frozenset(self._paused)

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        if paused:
            self._paused.add(switch)
        else:
            self._paused.discard(switch)
        action = AuditAction.PAUSE if paused else AuditAction.RESUME
        await self.record_audit(
            AuditRecord(at=now, actor=actor, action=action, target=str(switch), reason=reason)
        )

    async def paused_providers(self) -> frozenset[str]:
        return frozenset(self._paused_providers)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        if paused:
            self._paused_providers.add(provider)
        else:
            self._paused_providers.discard(provider)
        action = AuditAction.PAUSE if paused else AuditAction.RESUME
        await self.record_audit(
            AuditRecord(
                at=now, actor=actor, action=action, target=provider_switch(provider), reason=reason
            )
        )

    async def record_audit(self, record: AuditRecord) -> None:
        self._audit.append(dataclasses.replace(record, record_id=len(self._audit) + 1))

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        newest_first = [
            r for r in reversed(self._audit) if before is None or (r.record_id or 0) < before
        ]
        return newest_first[: max(0, limit)]
