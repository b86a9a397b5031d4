"""ControlStore: operator switches (pause/resume) shared by every process, and the audit log.

Every operator action that changes how the system behaves for others (pausing,
resuming, replaying) leaves an audit record: who, when, what and why. So does every
pause and resume a worker makes by itself: a provider is paused automatically when it
is shown to refuse our credentials, probed again on a backoff by one process at a time
(a conditional write takes each probe), and resumed automatically when a probe passes.
An operator's own pause is never lifted automatically.
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


@dataclass(frozen=True, slots=True)
class ProviderPause:
    """Why calls to one provider are held, since when, and how the pause ends."""

    provider: str
    since: float
    actor: str
    reason: str | None = None
    # Made by a worker (the provider refused our credentials), not by an operator.
    automatic: bool = False
    # When an automatic pause's next probe is due; None: it is never probed (an
    # operator's pause, or an account refusal that a probe cannot see mended).
    next_probe_at: float | None = None
    # How long the probe after the next one waits (it grows up to a maximum).
    probe_interval_seconds: float | None = None

    @property
    def resumes_by_itself(self) -> bool:
        """Lifted automatically once a probe passes."""
        return self.automatic and self.next_probe_at is not None


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
        """An operator pauses (never lifted automatically, whatever paused it before) or
        resumes (whatever paused it) calls to one provider, and audits it, atomically."""
        ...

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        """Every provider paused now, by name: why, since when, how it ends."""
        ...

    async def pause_provider_automatically(self, pause: ProviderPause) -> bool:
        """Pause ``pause.provider`` as a worker found it, with its reason and probe
        schedule, and audit it (PAUSE by ``pause.actor``), atomically; unless it is
        paused already: False, nothing written (an operator's pause stays the
        operator's, an automatic one keeps its schedule)."""
        ...

    async def take_provider_probe(
        self, provider: str, *, now: float, next_probe_at: float, probe_interval_seconds: float
    ) -> ProviderPause | None:
        """One conditional write: while ``provider`` is paused automatically with a probe
        due at or before ``now``, move its next probe to ``next_probe_at`` and return the
        pause as it now is, for the caller to probe. None, nothing written, when no probe
        is due: another process took it, the pause is an operator's, or there is none."""
        ...

    async def resume_provider_automatically(
        self, provider: str, *, since: float, actor: str, now: float, reason: str
    ) -> bool:
        """Lift the automatic pause of ``provider`` that began at ``since`` and audit it
        (RESUME by ``actor``), atomically. False, nothing written, when that pause no
        longer holds: resumed already, or paused by an operator since (never lifted
        here)."""
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
