"""ControlStore: operator switches (pause/resume) shared by every process, and the audit log.

Every operator action that changes how the system behaves for others (pausing,
resuming, replaying) leaves an audit record: who, when, what and why.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Protocol


class Switch(enum.StrEnum):
    INTAKE = "intake"
    WORKERS = "workers"


class AuditAction(enum.StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    REPLAY = "replay"
    PURGE_DEAD_LETTER = "purge_dead_letter"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    at: float
    actor: str
    action: AuditAction
    target: str  # the switch, the job replayed, or the dead letter purged
    reason: str | None = None
    # Assigned by the store, increasing: the cursor of the log.
    record_id: int | None = None


PROVIDER_SWITCH_PREFIX = "provider:"


def provider_switch(provider: str) -> str:
    """The switch that pauses calls to one provider (its audit target too)."""
    return PROVIDER_SWITCH_PREFIX + provider


class ControlStore(Protocol):
    async def paused(self) -> frozenset[Switch]: ...

    async def paused_providers(self) -> frozenset[str]:
        """Providers no worker may call now (a 401/403 paused them, or an operator)."""
        ...

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        """Pause or resume calls to one provider, and audit it, atomically."""
        ...

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, now: float, reason: str | None = None
    ) -> None:
        """Flip the switch and record it (PAUSE or RESUME) in the audit log, atomically."""
        ...

    async def record_audit(self, record: AuditRecord) -> None: ...

    async def audit_log(self, *, limit: int, before: int | None = None) -> list[AuditRecord]:
        """Newest first; ``before`` a record_id to page back from."""
        ...
