"""Operator actions: the dead-letter list and replay, pause/resume, readiness.

Operations act across tenants, so only admin credentials reach them (the HTTP
layer checks); every replay records who asked and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.core.errors import IllegalTransitionError, JobNotFoundError
from ferryman.core.job import JobStatus
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore, Switch
    from ferryman.ports.queue import JobQueue, QueueStats
    from ferryman.ports.store import JobPage, JobStore

DEAD_LETTERED = "dead_lettered"


@dataclass(frozen=True, slots=True)
class ReplayReport:
    replayed: list[str] = field(default_factory=list)
    # (job_id, why it was not replayed)
    skipped: list[tuple[str, str]] = field(default_factory=list)


class Operations:
    def __init__(
        self, *, store: JobStore, queue: JobQueue, control: ControlStore, clock: Clock
    ) -> None:
        self._store = store
        self._queue = queue
        self._control = control
        self._clock = clock

    async def dead_letters(self, limit: int = 50, cursor: str | None = None) -> JobPage:
        """Jobs failed because their message was dead-lettered, across tenants, newest first."""
        return await self._store.list_jobs(
            tenant_id=None,
            status=JobStatus.FAILED,
            error_code=DEAD_LETTERED,
            limit=limit,
            cursor=cursor,
        )

    async def replay(self, job_ids: list[str], *, actor: str, reason: str) -> ReplayReport:
        """Start a new attempt series for each FAILED or CANCELLED job; skip the rest."""
        report = ReplayReport()
        for job_id in dict.fromkeys(job_ids):  # once each, in the order given
            why = await self._replay_one(job_id, actor=actor, reason=reason)
            if why is None:
                report.replayed.append(job_id)
            else:
                report.skipped.append((job_id, why))
        return report

    async def _replay_one(self, job_id: str, *, actor: str, reason: str) -> str | None:
        try:
            job = await self._store.replay(
                job_id, now=self._clock.now(), actor=actor, reason=reason
            )
        except JobNotFoundError:
            return "not_found"
        except IllegalTransitionError:
            current = await self._store.get(job_id)
            return f"status_{current.status.lower()}" if current else "not_found"
        if not self._store.enqueues_with_job:
            await self._queue.send(QueueMessage.for_job(job))
            await self._store.mark_dispatched(job.job_id, now=self._clock.now())
        return None

    async def set_paused(self, switch: Switch, paused: bool, *, actor: str) -> None:
        await self._control.set_paused(switch, paused, actor=actor, now=self._clock.now())

    async def paused(self) -> frozenset[Switch]:
        return await self._control.paused()

    async def check_ready(self) -> None:
        """Raise StoreUnavailableError unless the store and the queue answer."""
        await self._store.ping()
        await self._queue.stats()

    async def queue_stats(self) -> QueueStats:
        return await self._queue.stats()
