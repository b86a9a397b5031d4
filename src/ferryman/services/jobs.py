"""What a tenant may ask about its own jobs: read, list, history, cancel (I6).

Every lookup is scoped by the caller's tenant; another tenant's job is
indistinguishable from a job that does not exist.
"""

from __future__ import annotations

import asyncio
import builtins
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.core.clock import SystemClock
from ferryman.core.errors import JobNotFoundError
from ferryman.core.job import JobStatus

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.results import ResultStore
    from ferryman.services.ledger import JobLedger


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    result: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class JobViewPage:
    views: list[JobView]
    next_cursor: str | None


class JobQueries:
    def __init__(
        self, *, store: JobLedger, results: ResultStore, clock: Clock | None = None
    ) -> None:
        self._store = store
        self._results = results
        # Cancellation is the only write here; its time comes from this clock.
        self._clock: Clock = clock or SystemClock()

    async def get(self, tenant_id: str, job_id: str) -> JobView:
        return await self._view(await self._owned(tenant_id, job_id))

    async def list(
        self,
        tenant_id: str,
        *,
        status: JobStatus | None = None,
        task: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobViewPage:
        page = await self._store.list_jobs(
            tenant_id=tenant_id, status=status, task=task, limit=limit, cursor=cursor
        )
        views = await asyncio.gather(*(self._view(job) for job in page.jobs))
        return JobViewPage(views=builtins.list(views), next_cursor=page.next_cursor)

    async def _view(self, job: Job) -> JobView:
        result = None
        if job.status is JobStatus.SUCCEEDED and job.result_ref is not None:
            result = json.loads(await self._results.get(job.result_ref))
        return JobView(job=job, result=result)

    async def history(
        self, tenant_id: str, job_id: str
    ) -> tuple[builtins.list[Event], builtins.list[Attempt]]:
        await self._owned(tenant_id, job_id)
        return await self._store.events(job_id), await self._store.attempts(job_id)

    async def cancel(self, tenant_id: str, job_id: str) -> Job:
        return await self._store.request_cancel(job_id, tenant_id=tenant_id, now=self._clock.now())

    async def _owned(self, tenant_id: str, job_id: str) -> Job:
        job = await self._store.get(job_id, tenant_id=tenant_id)
        if job is None:
            raise JobNotFoundError()
        return job
