"""The sweeper: nothing accepted is ever stranded (I2), and nothing is kept forever.

Two sources of stranded jobs:
- dead-lettered messages (delivered max_receives times with no recorded outcome:
  crash loops, poison payloads): the job becomes FAILED (dead_lettered), so no
  caller polls a running job forever; an operator can replay it;
- stalled jobs whose message is gone or was never sent (outbox gap, expired
  lease with its message dead-lettered while a live owner still held the job):
  the sweeper sends a new message. A job whose message is still queued is not
  stalled, however long it waits for a free worker (JobUpkeep.stalled): its next
  delivery takes it over. Where the engine can, the message goes in the same
  transaction as the REDISPATCHED event, so a job that finished meanwhile gets
  neither. Duplicates are harmless, since a job id, not a message, is the identity,
  and a claim admits only one owner; and a crash loop stays bounded because
  deliveries without an outcome are counted on the job.
With a retention period set, it also purges finished jobs older than that.
Running several sweepers at once is safe: every change is a conditional write.

A dead letter whose body no worker can read names no job to fail; it stays in the
dead-letter queue for an operator. Each sweeper logs every such letter once
(``queue.undecodable_dead_letter``, without its body), the first round all it finds,
so one is never seen only as a dead-letter count that no job list explains.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from ferryman.core.errors import FailureClass
from ferryman.core.job import DEAD_LETTERED_CODE, EventKind, JobError
from ferryman.observability import metrics
from ferryman.observability.logging import describe_exception
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.queue import DeadLetter, JobQueue
    from ferryman.ports.store import JobUpkeep
    from ferryman.services.ledger import JobLedger
    from ferryman.services.retention import Retention

log = structlog.get_logger("ferryman.sweeper")

BATCH = 100
# Purging is housekeeping: a round does a little of it, so sweeping stays prompt.
PURGE_BATCHES_PER_ROUND = 4


@dataclass(frozen=True, slots=True)
class SweepReport:
    dead_lettered: int = 0
    redispatched: int = 0
    purged: int = 0
    # Undecodable dead letters this sweeper logged for the first time.
    undecodable: int = 0


class Sweeper:
    def __init__(
        self,
        *,
        store: JobUpkeep,
        ledger: JobLedger,
        queue: JobQueue,
        clock: Clock,
        interval_seconds: float = 5.0,
        stalled_after_seconds: float = 120.0,
        retention: Retention | None = None,
        retention_seconds: float | None = None,
    ) -> None:
        self._store = store
        self._ledger = ledger
        self._queue = queue
        self._clock = clock
        self._interval_seconds = interval_seconds
        self._stalled_after_seconds = stalled_after_seconds
        self._retention = retention
        self._retention_seconds = retention_seconds
        # The last undecodable letter logged (dead_lettered_at, id): each is logged once.
        self._undecodable_logged: tuple[float, str] | None = None

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                report = await self.sweep_once()
                if report.dead_lettered or report.redispatched or report.purged:
                    log.info(
                        "sweeper.swept",
                        dead_lettered=report.dead_lettered,
                        redispatched=report.redispatched,
                        purged=report.purged,
                    )
            except Exception as exc:  # noqa: BLE001 - retried next round; never stop sweeping
                log.warning("sweeper.failed", **describe_exception(exc))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self._interval_seconds):
                    await stop.wait()

    async def sweep_once(self) -> SweepReport:
        dead = await self._fail_dead_letters()
        undecodable = await self._log_undecodable_letters()
        redispatched = await self._redispatch_stalled()
        purged = await self._purge_old()
        return SweepReport(
            dead_lettered=dead, redispatched=redispatched, purged=purged, undecodable=undecodable
        )

    async def _log_undecodable_letters(self) -> int:
        letters = await self._queue.undecodable_letters(limit=BATCH, after=self._undecodable_logged)
        for letter in letters:
            log.warning(
                "queue.undecodable_dead_letter",
                dead_letter_id=letter.dead_letter_id,
                body_bytes=len(letter.body.encode("utf-8", "surrogatepass")),
                receive_count=letter.receive_count,
                hint="no worker can read it; see `ferryman dlq list`, remove it with "
                "`ferryman dlq purge`",
            )
        if letters:
            last = letters[-1]
            self._undecodable_logged = (last.dead_lettered_at, last.dead_letter_id)
        return len(letters)

    async def _purge_old(self) -> int:
        if self._retention is None or self._retention_seconds is None:
            return 0
        report = await self._retention.purge(
            older_than_seconds=self._retention_seconds, max_batches=PURGE_BATCHES_PER_ROUND
        )
        return report.jobs

    async def _fail_dead_letters(self) -> int:
        failed = 0
        for letter in await self._queue.receive_dead_letters(max_messages=BATCH):
            if await self._fail_dead_lettered_job(letter):
                failed += 1
            await self._queue.delete_dead_letter(letter.dead_letter_id)
        return failed

    async def _fail_dead_lettered_job(self, letter: DeadLetter) -> bool:
        job = await self._ledger.get(letter.message.job_id)
        if job is None or job.status.terminal:
            return False
        error = JobError(
            code=DEAD_LETTERED_CODE,
            failure_class=FailureClass.DELIVERY,
            message=f"the job's message was received {letter.receive_count} times "
            "without any attempt recording an outcome",
        )
        failed = await self._ledger.fail_unowned(
            job.job_id,
            now=self._clock.now(),
            error=error,
            kind=EventKind.DEAD_LETTERED,
            detail={"receive_count": letter.receive_count},
        )
        # None: a live attempt owns the job; if it dies, the stalled scan re-sends. A
        # failed job is counted and logged by the ledger's observers, as every completion.
        return failed is not None

    async def _redispatch_stalled(self) -> int:
        now = self._clock.now()
        stalled = await self._store.stalled(
            now=now, older_than_seconds=self._stalled_after_seconds, limit=BATCH
        )
        sent = 0
        for job in stalled:
            if self._ledger.enqueues_with_job:
                # The message goes with the change: none for a job finished meanwhile.
                if not await self._ledger.redispatch(job.job_id, now=now):
                    continue
            else:
                await self._queue.send(QueueMessage.for_job(job))
                await self._ledger.mark_dispatched(job.job_id, now=now, redispatch=True)
            metrics.REDISPATCHED.inc()
            sent += 1
        return sent
