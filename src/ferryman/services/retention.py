"""Retention: finished jobs older than a cut-off go, with everything that belongs to them.

A purge removes finished jobs (SUCCEEDED, FAILED, CANCELLED) completed before the
cut-off, with their events, attempts and idempotency entries, in batches of
``batch_size`` jobs per transaction, so a large purge never holds the database for
long; then expired idempotency entries; then the results no remaining job refers to
(how that space comes back depends on the result store). Unfinished jobs are never
touched, whatever their age.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

if TYPE_CHECKING:
    from collections.abc import Collection

    from ferryman.core.clock import Clock
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobUpkeep

log = structlog.get_logger("ferryman.retention")

DEFAULT_BATCH_SIZE = 500


@dataclass(frozen=True, slots=True)
class PurgeReport:
    jobs: int = 0
    keys: int = 0
    batches: int = 0
    result_bytes: int = 0
    # True when max_batches stopped it with more to purge.
    more: bool = False


class Retention:
    def __init__(
        self,
        *,
        store: JobUpkeep,
        clock: Clock,
        results: ResultStore | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
    ) -> None:
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self._store = store
        self._clock = clock
        self._results = results
        self._batch_size = batch_size

    async def purge(
        self,
        *,
        older_than_seconds: float,
        max_batches: int | None = None,
        reclaim: bool | None = None,
    ) -> PurgeReport:
        """``reclaim``: give back result space (default: when this purge removed jobs;
        an operator's purge asks every time, to finish what an earlier one left)."""
        if older_than_seconds < 0:
            raise ValueError("older_than_seconds cannot be negative")
        now = self._clock.now()
        cutoff = now - older_than_seconds
        jobs = batches = 0
        more = False
        while True:
            if max_batches is not None and batches >= max_batches:
                more = True
                break
            purged = await self._store.purge_finished(
                completed_before=cutoff, limit=self._batch_size
            )
            batches += 1
            jobs += len(purged)
            if len(purged) < self._batch_size:
                break
            await asyncio.sleep(0)  # let other writers in between batches
        keys = await self._purge_keys(now)
        result_bytes = (
            await self._reclaim_results() if (reclaim or (reclaim is None and jobs)) else 0
        )
        if jobs or keys or result_bytes:
            log.info(
                "retention.purged",
                jobs=jobs,
                keys=keys,
                batches=batches,
                result_bytes=result_bytes,
            )
        return PurgeReport(
            jobs=jobs, keys=keys, batches=batches, result_bytes=result_bytes, more=more
        )

    async def _reclaim_results(self) -> int:
        if self._results is None:
            return 0

        async def any_job_exists(job_ids: Collection[str]) -> bool:
            return bool(await self._store.existing(job_ids))

        return await self._results.reclaim(any_job_exists=any_job_exists)

    async def _purge_keys(self, now: float) -> int:
        total = 0
        while True:
            removed = await self._store.purge_expired_keys(now=now, limit=self._batch_size)
            total += removed
            if removed < self._batch_size:
                return total
