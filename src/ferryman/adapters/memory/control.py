"""InMemoryControlStore: the operator's pause switches and the audit log."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ferryman.ports.control import AuditAction, AuditRecord, ProviderPause, provider_switch

if TYPE_CHECKING:
    from ferryman.ports.control import Switch


class InMemoryControlStore:
    def __init__(self) -> None:
        self._paused: set[Switch] = set()
        self._provider_pauses: dict[str, ProviderPause] = {}
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
        return frozenset(self._provider_pauses)

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        return dict(self._provider_pauses)

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        if paused:
            self._provider_pauses[provider] = ProviderPause(
                provider=provider, since=now, actor=actor, reason=reason
            )
        else:
            self._provider_pauses.pop(provider, None)
        action = AuditAction.PAUSE if paused else AuditAction.RESUME
        self._audit_provider(provider, action, actor=actor, now=now, reason=reason)

    async def pause_provider_automatically(self, pause: ProviderPause) -> bool:
        if pause.provider in self._provider_pauses:
            return False
        self._provider_pauses[pause.provider] = dataclasses.replace(pause, automatic=True)
        self._audit_provider(
            pause.provider,
            AuditAction.PAUSE,
            actor=pause.actor,
            now=pause.since,
            reason=pause.reason,
        )
        return True

    async def take_provider_probe(
        self, provider: str, *, now: float, next_probe_at: float, probe_interval_seconds: float
    ) -> ProviderPause | None:
        pause = self._provider_pauses.get(provider)
        if pause is None or not pause.automatic or pause.next_probe_at is None:
            return None
        if pause.next_probe_at > now:
            return None
        taken = self._provider_pauses[provider] = dataclasses.replace(
            pause, next_probe_at=next_probe_at, probe_interval_seconds=probe_interval_seconds
        )
        return taken

    async def resume_provider_automatically(
        self, provider: str, *, since: float, actor: str, now: float, reason: str
    ) -> bool:
        pause = self._provider_pauses.get(provider)
        if pause is None or not pause.automatic or pause.since != since:
            return False
        del self._provider_pauses[provider]
        self._audit_provider(provider, AuditAction.RESUME, actor=actor, now=now, reason=reason)
        return True

    def _audit_provider(
        self, provider: str, action: AuditAction, *, actor: str, now: float, reason: str | None
    ) -> None:
        self._append_audit(
            AuditRecord(
                at=now, actor=actor, action=action, target=provider_switch(provider), reason=reason
            )
        )

    async def record_audit(self, record: AuditRecord) -> None:
        self._append_audit(record)

    def _append_audit(self, record: AuditRecord) -> None:
        self._audit.append(dataclasses.replace(record, record_id=len(self._audit) + 1))

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        newest_first = [
            r for r in reversed(self._audit) if before is None or (r.record_id or 0) < before
        ]
        return newest_first[: max(0, limit)]
