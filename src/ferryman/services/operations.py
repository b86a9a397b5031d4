"""Operator actions: the dead-letter list and replay, pause/resume, the audit log, readiness.

Operations act across tenants, so only admin credentials reach them (the HTTP
layer checks); every replay, pause and resume records who asked and why.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.core.errors import (
    DeadLetterNotFoundError,
    FerrymanError,
    IllegalTransitionError,
    InvalidRequestError,
    JobNotFoundError,
    ResultsUnavailableError,
)
from ferryman.core.job import DEAD_LETTERED_CODE, JobStatus
from ferryman.ports.control import AuditAction, AuditRecord, provider_switch
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.control import ControlStore, ProviderPause, Switch
    from ferryman.ports.queue import JobQueue, QueueStats, UndecodableLetter
    from ferryman.ports.store import JobPage, JobReads
    from ferryman.services.ledger import JobLedger
    from ferryman.services.results import ResultWriter


@dataclass(frozen=True, slots=True)
class ReplayReport:
    replayed: list[str] = field(default_factory=list)
    # (job_id, why it was not replayed)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class UndecodablePage:
    letters: list[UndecodableLetter]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class PurgeOfLetters:
    purged: list[str] = field(default_factory=list)
    not_found: list[str] = field(default_factory=list)


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
        store: JobReads,
        ledger: JobLedger,
        queue: JobQueue,
        control: ControlStore,
        clock: Clock,
        results: ResultWriter | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
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

    async def undecodable_letters(
        self, limit: int = 50, cursor: str | None = None
    ) -> UndecodablePage:
        """Dead letters whose body names no job (no worker can read them, so no job was
        failed for them), oldest first: for an operator to read and purge."""
        after = None if cursor is None else _letter_position(cursor)
        letters = await self._queue.undecodable_letters(limit=limit, after=after)
        last = letters[-1] if len(letters) == limit else None
        next_cursor = (
            None if last is None else _letter_cursor(last.dead_lettered_at, last.dead_letter_id)
        )
        return UndecodablePage(letters=letters, next_cursor=next_cursor)

    async def undecodable_letter(self, dead_letter_id: str) -> UndecodableLetter:
        """Raises DeadLetterNotFoundError (also for a job's letter: the sweeper's)."""
        letter = await self._queue.undecodable_letter(dead_letter_id)
        if letter is None:
            raise DeadLetterNotFoundError()
        return letter

    async def purge_undecodable(
        self, dead_letter_ids: list[str], *, actor: str, reason: str
    ) -> PurgeOfLetters:
        """Delete these undecodable letters, each recorded in the audit log; an id that
        names none (or a job's letter) is listed as not found and left alone."""
        report = PurgeOfLetters()
        for dead_letter_id in dict.fromkeys(dead_letter_ids):
            if not await self._queue.delete_undecodable_letter(dead_letter_id):
                report.not_found.append(dead_letter_id)
                continue
            report.purged.append(dead_letter_id)
            await self._control.record_audit(
                AuditRecord(
                    at=self._clock.now(),
                    actor=actor,
                    action=AuditAction.PURGE_DEAD_LETTER,
                    target=dead_letter_id,
                    reason=reason,
                )
            )
        return report

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
            job = await self._ledger.replay(
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
        if not self._ledger.enqueues_with_job:
            await self._queue.send(QueueMessage.for_job(job))
            await self._ledger.mark_dispatched(job.job_id, now=self._clock.now())
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


def _letter_cursor(dead_lettered_at: float, dead_letter_id: str) -> str:
    """A page cursor: where the page ended, exactly (``repr`` of a float is the shortest
    text that reads back as the same float, so a letter dead-lettered at the same
    instant is neither lost nor repeated). LETTER_CURSOR_PATTERN describes it."""
    return f"{dead_lettered_at!r}~{dead_letter_id}"


# What ``_letter_cursor`` writes for a time after 1970 and a ``dl_`` id, and all the
# HTTP layer lets through: any text it matches reads back as a position.
LETTER_CURSOR_PATTERN = r"^[0-9]{1,12}\.[0-9]{1,17}~dl_[0-9a-f]{1,64}$"


def _letter_position(cursor: str) -> tuple[float, str]:
    """Raises InvalidRequestError for a cursor this list did not give."""
    at, tilde, dead_letter_id = cursor.partition("~")
    if re.fullmatch(LETTER_CURSOR_PATTERN, cursor) is None or not tilde:
        raise InvalidRequestError("the cursor is not a next_cursor this list gave")
    return float(at), dead_letter_id
