"""Operator actions: the dead-letter list and replay, pause/resume, the audit log, readiness.

Operations act across tenants, so only admin credentials reach them (the HTTP
layer checks); every replay, pause and resume records who asked and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.core.errors import (
    FerrymanError,
    IllegalTransitionError,
    JobNotFoundError,
    ResultsUnavailableError,
)
from ferryman.core.job import DEAD_LETTERED_CODE, JobStatus
from ferryman.ports.control import AuditAction, AuditRecord, provider_switch
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore, ProviderPause, Switch
    from ferryman.ports.queue import JobQueue, QueueStats
    from ferryman.ports.store import JobPage
    from ferryman.services.ledger import JobLedger
    from ferryman.services.results import ResultWriter


@dataclass(frozen=True, slots=True)
class ReplayReport:
    replayed: list[str] = field(default_factory=list)
    # (job_id, why it was not replayed)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class DependencyCheck:
    """One thing a process needs, and whether it works now (``/readyz``)."""

    name: str
    ok: bool
    detail: str = ""


class Operations:
    def __init__(
        self,
        *,
        store: JobLedger,
        queue: JobQueue,
        control: ControlStore,
        clock: Clock,
        results: ResultWriter | None = None,
    ) -> None:
        self._store = store
        self._queue = queue
        self._control = control
        self._clock = clock
        self._results = results

    async def dead_letters(self, limit: int = 50, cursor: str | None = None) -> JobPage:
        """Jobs failed because their message was dead-lettered, across tenants, newest first."""
        return await self._store.list_jobs(
            tenant_id=None,
            status=JobStatus.FAILED,
            error_code=DEAD_LETTERED_CODE,
            limit=limit,
            cursor=cursor,
        )

    async def replay(
        self, job_ids: list[str], *, actor: str, reason: str, include_failed: bool = False
    ) -> ReplayReport:
        """Start a new attempt series for each dead-lettered job (with ``include_failed``,
        each FAILED job); skip the rest, a job its client cancelled always."""
        report = ReplayReport()
        for job_id in dict.fromkeys(job_ids):  # once each, in the order given
            why = await self._replay_one(
                job_id, actor=actor, reason=reason, include_failed=include_failed
            )
            if why is None:
                report.replayed.append(job_id)
            else:
                report.skipped.append((job_id, why))
        return report

    async def _replay_one(
        self, job_id: str, *, actor: str, reason: str, include_failed: bool
    ) -> str | None:
        now = self._clock.now()
        try:
            job = await self._store.replay(
                job_id, now=now, actor=actor, reason=reason, include_failed=include_failed
            )
        except JobNotFoundError:
            return "not_found"
        except IllegalTransitionError:
            current = await self._store.get(job_id)
            if current is None:
                return "not_found"
            if current.status is JobStatus.FAILED:
                return "not_dead_lettered"
            return f"status_{current.status.lower()}"
        await self._control.record_audit(
            AuditRecord(
                at=now, actor=actor, action=AuditAction.REPLAY, target=job_id, reason=reason
            )
        )
        if not self._store.enqueues_with_job:
            await self._queue.send(QueueMessage.for_job(job))
            await self._store.mark_dispatched(job.job_id, now=self._clock.now())
        return None

    async def set_paused(
        self, switch: Switch, paused: bool, *, actor: str, reason: str | None = None
    ) -> None:
        await self._control.set_paused(
            switch, paused, actor=actor, now=self._clock.now(), reason=reason
        )

    async def paused(self) -> frozenset[Switch]:
        return await self._control.paused()

    async def set_provider_paused(
        self, provider: str, paused: bool, *, actor: str, reason: str | None = None
    ) -> None:
        await self._control.set_provider_paused(
            provider, paused, actor=actor, now=self._clock.now(), reason=reason
        )

    async def provider_pauses(self) -> dict[str, ProviderPause]:
        """Every paused provider: who paused it (an operator, or a worker automatically),
        since when, why, and when an automatic pause is probed next."""
        return await self._control.provider_pauses()

    async def paused_names(self) -> list[str]:
        """Everything paused now: ``intake``, ``workers``, ``provider:NAME``."""
        switches = [str(switch) for switch in await self._control.paused()]
        providers = [provider_switch(p) for p in await self._control.paused_providers()]
        return sorted(switches + providers)

    async def audit_log(self, *, limit: int = 50, before: int | None = None) -> list[AuditRecord]:
        return await self._control.audit_log(limit=limit, before=before)

    async def check_ready(self) -> None:
        """Raise StoreUnavailableError unless the store takes a write and the queue answers."""
        await self._store.ping(write=True)
        await self._queue.stats()

    async def readiness(self) -> list[DependencyCheck]:
        """Each dependency this process needs, checked now."""
        checks: list[DependencyCheck] = []
        probes = [("store", self._probe_store), ("queue", self._probe_queue)]
        if self._results is not None:
            probes.append(("results", self._probe_results))
        for name, probe in probes:
            try:
                await probe()
            except FerrymanError as exc:
                checks.append(DependencyCheck(name=name, ok=False, detail=exc.message))
            else:
                checks.append(DependencyCheck(name=name, ok=True))
        return checks

    async def _probe_store(self) -> None:
        await self._store.ping(write=True)

    async def _probe_queue(self) -> None:
        await self._queue.stats()

    async def _probe_results(self) -> None:
        assert self._results is not None
        if not await self._results.probe():
            raise ResultsUnavailableError(self._results.last_error or "results: not writable")

    async def queue_stats(self) -> QueueStats:
        return await self._queue.stats()
