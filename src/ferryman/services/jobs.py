"""What a tenant may ask about its own jobs: read, list, history, cancel (I6); and what
an operator may inspect about any job.

Every tenant lookup is scoped by the caller's tenant; another tenant's job is
indistinguishable from a job that does not exist.

Results are served as their stored JSON bytes, checked on read against the job and
attempt they belong to (the result key) and their checksum: never another job's
output. A result that fails the check is an error on that job alone: ``get``
raises it, a list page carries it on that item and serves the rest. A list page
also stops adding jobs once their results add up to ``list_max_bytes`` (always at
least one job), so one request can never make a response of many megabytes.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ferryman.core.clock import SystemClock
from ferryman.core.errors import JobNotFoundError, ResultsUnavailableError, ResultUnreadableError
from ferryman.core.job import JobStatus
from ferryman.core.results import result_key

if TYPE_CHECKING:
    import builtins

    from ferryman.core.clock import Clock
    from ferryman.core.errors import FerrymanError
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.control import ProviderPause
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobPage
    from ferryman.services.ledger import JobLedger
    from ferryman.services.pauses import WaitReasons

DEFAULT_LIST_MAX_BYTES = 1_048_576
# Results read at once while filling a page: enough to hide a disk's latency, few
# enough that a page which stops early has not read much it will not serve.
_READS_AT_ONCE = 8
# Checking larger results for valid JSON happens off the event loop.
_CHECK_ON_LOOP_MAX_BYTES = 256 * 1024
# What may keep one result from being served without failing a whole list.
_RESULT_ERRORS = (ResultUnreadableError, ResultsUnavailableError)


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    # The result's JSON exactly as stored (verified); None when there is none to show.
    result_json: bytes | None = None
    # Why a SUCCEEDED job's result is not shown (list items only; get raises it).
    result_error: FerrymanError | None = None
    # The pause of its provider, while it holds the waiting job (``get`` only).
    waiting: ProviderPause | None = None

    @property
    def result(self) -> Any:
        """The result, decoded (for callers that want the value, not the bytes)."""
        return None if self.result_json is None else json.loads(self.result_json)


@dataclass(frozen=True, slots=True)
class JobViewPage:
    views: list[JobView]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class _Read:
    data: bytes | None = None
    error: FerrymanError | None = None

    @property
    def size(self) -> int:
        return 0 if self.data is None else len(self.data)


class JobQueries:
    def __init__(
        self,
        *,
        store: JobLedger,
        results: ResultStore,
        clock: Clock | None = None,
        list_max_bytes: int = DEFAULT_LIST_MAX_BYTES,
        waits: WaitReasons | None = None,
    ) -> None:
        if list_max_bytes < 1:
            raise ValueError("list_max_bytes must be positive")
        self._store = store
        self._results = results
        # Cancellation is the only write here; its time comes from this clock.
        self._clock: Clock = clock or SystemClock()
        self._list_max_bytes = list_max_bytes
        self._waits = waits

    async def get(self, tenant_id: str, job_id: str) -> JobView:
        """Raises JobNotFoundError, and ResultUnreadableError or ResultsUnavailableError
        when the job's result cannot be served."""
        job = await self._owned(tenant_id, job_id)
        waiting = None if self._waits is None else await self._waits.of(job)
        return JobView(job=job, result_json=await self._result_of(job), waiting=waiting)

    async def list(
        self,
        tenant_id: str,
        *,
        status: JobStatus | None = None,
        task: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobViewPage:
        async def page_of(size: int) -> JobPage:
            return await self._store.list_jobs(
                tenant_id=tenant_id, status=status, task=task, limit=size, cursor=cursor
            )

        page = await page_of(limit)
        reads, fitting = await self._read_within_budget(page.jobs)
        if fitting < len(page.jobs):
            # The store alone knows how to continue after a given job: ask it for
            # exactly the jobs that fit, and serve that page with its own cursor.
            page = await page_of(fitting)
        views: builtins.list[JobView] = []
        for job in page.jobs:
            read = reads.get((job.job_id, job.result_ref))
            if read is None:  # changed between the two questions
                read = await self._read(job)
            views.append(JobView(job=job, result_json=read.data, result_error=read.error))
        return JobViewPage(views=views, next_cursor=page.next_cursor)

    async def history(
        self, tenant_id: str, job_id: str
    ) -> tuple[builtins.list[Event], builtins.list[Attempt]]:
        await self._owned(tenant_id, job_id)
        return await self._store.events(job_id), await self._store.attempts(job_id)

    async def inspect(self, job_id: str) -> Job:
        """Any tenant's job, for operators (never its input or output)."""
        job = await self._store.get(job_id)
        if job is None:
            raise JobNotFoundError()
        return job

    async def inspect_history(
        self, job_id: str
    ) -> tuple[Job, builtins.list[Event], builtins.list[Attempt]]:
        """Any tenant's job with its events and attempts, for operators."""
        job = await self.inspect(job_id)
        return job, await self._store.events(job_id), await self._store.attempts(job_id)

    async def cancel(self, tenant_id: str, job_id: str) -> Job:
        return await self._store.request_cancel(job_id, tenant_id=tenant_id, now=self._clock.now())

    async def _owned(self, tenant_id: str, job_id: str) -> Job:
        job = await self._store.get(job_id, tenant_id=tenant_id)
        if job is None:
            raise JobNotFoundError()
        return job

    async def _read_within_budget(
        self, jobs: builtins.list[Job]
    ) -> tuple[dict[tuple[str, str | None], _Read], int]:
        """Read results in page order until they fill the byte budget; return what was
        read and how many jobs fit (at least one)."""
        reads: dict[tuple[str, str | None], _Read] = {}
        total = fitting = 0
        for start in range(0, len(jobs), _READS_AT_ONCE):
            chunk = jobs[start : start + _READS_AT_ONCE]
            for job, read in zip(chunk, await asyncio.gather(*map(self._read, chunk)), strict=True):
                if fitting > 0 and total + read.size > self._list_max_bytes:
                    return reads, fitting
                reads[(job.job_id, job.result_ref)] = read
                total += read.size
                fitting += 1
        return reads, fitting

    async def _read(self, job: Job) -> _Read:
        try:
            return _Read(data=await self._result_of(job))
        except _RESULT_ERRORS as exc:
            return _Read(error=exc)

    async def _result_of(self, job: Job) -> bytes | None:
        if job.status is not JobStatus.SUCCEEDED:
            return None
        if job.result_ref is None or job.attempt_id is None:
            raise ResultUnreadableError("the job succeeded but names no stored result")
        key = result_key(job.tenant_id, job.job_id, job.attempt_id)
        data = await self._results.get(job.result_ref, key=key)
        # Served as stored, spliced into the response: it must be one JSON value.
        try:
            if len(data) > _CHECK_ON_LOOP_MAX_BYTES:
                await asyncio.to_thread(orjson.loads, data)
            else:
                orjson.loads(data)
        except orjson.JSONDecodeError:
            raise ResultUnreadableError("the stored result is not valid JSON") from None
        return data
