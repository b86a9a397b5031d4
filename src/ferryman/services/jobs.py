"""What a tenant may ask about its own jobs: read, list, history, cancel (I6); and what
an operator may inspect about any job.

Every tenant lookup is scoped by the caller's tenant; another tenant's job is
indistinguishable from a job that does not exist.

Results are served as their stored JSON bytes, checked on read against the job and
attempt they belong to (the result key) and their checksum: never another job's
output. A result that fails the check is an error on that job alone: ``get``
raises it, a list page carries it on that item and serves the rest.

A list reads job summaries, never inputs (ports/store.py's JobSummary), and its page
is bounded by ``list_max_bytes`` as a whole: the store ends the page once its
summaries weigh that much, and the page stops adding jobs once their results fill
what is left (always at least one job). One request can never make a response, or
hold a list in memory, of many megabytes; and one tenant's lists are read
LISTS_AT_ONCE_PER_TENANT at a time, so a hundred at once neither hold a hundred pages
nor keep the store from other tenants' requests.

A read may wait (``wait``) until the job is finished, and a client may follow a job's
status changes (``follow``): both check the tenant first (another tenant's job is not
found at once) and then wait on the process's watcher (services/watch.py), holding no
connection and no thread.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from ferryman.core.clock import SystemClock
from ferryman.core.cursors import cursor_after
from ferryman.core.errors import (
    InvalidRequestError,
    JobNotFoundError,
    ResultsUnavailableError,
    ResultUnreadableError,
)
from ferryman.core.job import JobStatus
from ferryman.core.results import result_key
from ferryman.services.turns import TurnsPerKey

if TYPE_CHECKING:
    import builtins
    from collections.abc import AsyncIterator, Collection, Sequence

    from ferryman.core.clock import Clock
    from ferryman.core.errors import FerrymanError
    from ferryman.core.job import Attempt, Event, Job
    from ferryman.ports.control import ProviderPause
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobReads, JobSummary
    from ferryman.services.ledger import JobLedger
    from ferryman.services.pauses import WaitReasons
    from ferryman.services.watch import JobWatcher

DEFAULT_LIST_MAX_BYTES = 1_048_576
# The most jobs one list may name (``job_ids``): a client waiting for many asks in pages.
MAX_LIST_JOB_IDS = 100
# One tenant's lists read this many at once in a process; the rest wait their turn.
LISTS_AT_ONCE_PER_TENANT = 2
# Results read at once while filling a page: enough to hide a disk's latency, few
# enough that a page which stops early has not read much it will not serve.
_READS_AT_ONCE = 8
# Checking larger results for valid JSON happens off the event loop.
_CHECK_ON_LOOP_MAX_BYTES = 256 * 1024
# What may keep one result from being served without failing a whole list.
_RESULT_ERRORS = (ResultUnreadableError, ResultsUnavailableError)
# The longest one read may wait for its job to finish (GET ...?wait=).
MAX_WAIT_SECONDS = 60.0
# A followed job's stream: a heartbeat when nothing happened for this long, and the
# stream ends after this long in all (the client reconnects with Last-Event-ID).
FOLLOW_HEARTBEAT_SECONDS = 15.0
FOLLOW_MAX_SECONDS = 300.0


@dataclass(frozen=True, slots=True)
class JobView:
    job: Job
    # The result's JSON exactly as stored (verified); None when there is none to show.
    result_json: bytes | None = None
    # The pause of its provider, while it holds the waiting job.
    waiting: ProviderPause | None = None

    @property
    def result(self) -> Any:
        """The result, decoded (for callers that want the value, not the bytes)."""
        return None if self.result_json is None else json.loads(self.result_json)


@dataclass(frozen=True, slots=True)
class Position:
    """Where a follower is: the status it was last sent, at which revision."""

    status: JobStatus
    revision: int

    @classmethod
    def of(cls, job: Job) -> Position:
        return cls(status=job.status, revision=job.revision)

    def behind(self, job: Job) -> bool:
        """Whether ``job`` is news to a follower here: another status, or the same
        finished status reached again (an operator replayed the job and it ended
        again)."""
        if job.status is not self.status:
            return True
        return job.status.terminal and job.revision > self.revision


@dataclass(frozen=True, slots=True)
class ListedJob:
    """A job in a list: its summary and its result (verified JSON bytes, as stored)."""

    summary: JobSummary
    result_json: bytes | None = None
    # Why a SUCCEEDED job's result is not shown: an error on this item alone.
    result_error: FerrymanError | None = None
    # The pause of its provider, while it holds the waiting job.
    waiting: ProviderPause | None = None

    @property
    def result(self) -> Any:
        return None if self.result_json is None else json.loads(self.result_json)


@dataclass(frozen=True, slots=True)
class JobListPage:
    items: list[ListedJob]
    next_cursor: str | None


def _finished(job: Job) -> bool:
    return job.status.terminal


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
        store: JobReads,
        ledger: JobLedger,
        results: ResultStore,
        clock: Clock | None = None,
        list_max_bytes: int = DEFAULT_LIST_MAX_BYTES,
        lists_at_once_per_tenant: int = LISTS_AT_ONCE_PER_TENANT,
        waits: WaitReasons | None = None,
        watcher: JobWatcher | None = None,
    ) -> None:
        if list_max_bytes < 1:
            raise ValueError("list_max_bytes must be positive")
        self._store = store
        self._ledger = ledger
        self._results = results
        # Cancellation is the only write here; its time comes from this clock.
        self._clock: Clock = clock or SystemClock()
        self._list_max_bytes = list_max_bytes
        self._list_turns = TurnsPerKey(lists_at_once_per_tenant)
        self._waits = waits
        self._watcher = watcher

    async def get(self, tenant_id: str, job_id: str) -> JobView:
        """Raises JobNotFoundError, and ResultUnreadableError or ResultsUnavailableError
        when the job's result cannot be served."""
        return await self._view(await self._owned(tenant_id, job_id))

    async def wait(self, tenant_id: str, job_id: str, *, wait_seconds: float) -> JobView:
        """``get``, once the job is finished or after ``wait_seconds`` (at most
        MAX_WAIT_SECONDS), whichever comes first. Another tenant's job is not found at
        once. Without a watcher (a process that serves no API) it answers at once."""
        if not 0 < wait_seconds <= MAX_WAIT_SECONDS:
            raise InvalidRequestError(f"wait must be more than 0 and at most {MAX_WAIT_SECONDS:g}")
        since = 0 if self._watcher is None else self._watcher.generation
        job = await self._owned(tenant_id, job_id)
        if self._watcher is not None and not job.status.terminal:
            found = await self._watcher.wait(
                job_id, until=_finished, since=since, timeout_seconds=wait_seconds
            )
            # The time is up (or the job is gone): its current state, as GET has it.
            job = found if found is not None else await self._owned(tenant_id, job_id)
        return await self._view(job)

    async def follow(
        self,
        tenant_id: str,
        job_id: str,
        *,
        after: Position | None = None,
        heartbeat_seconds: float = FOLLOW_HEARTBEAT_SECONDS,
        max_seconds: float = FOLLOW_MAX_SECONDS,
    ) -> AsyncIterator[JobView | None]:
        """The job now, then again each time its status changes, ending after a
        finished status or after ``max_seconds``; None after ``heartbeat_seconds``
        without news (a keep-alive). ``after``: what the follower was last sent (a
        reconnection): a status it has is not sent again, and when that was the
        finished one nothing is. The first step raises JobNotFoundError for a job
        that is not the tenant's."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max_seconds
        since = 0 if self._watcher is None else self._watcher.generation
        job = await self._owned(tenant_id, job_id)
        known = after
        while True:
            if known is None or known.behind(job):
                known = Position.of(job)
                yield await self._view(job)
            if job.status.terminal or self._watcher is None:
                return
            with self._watcher.watching(job_id, until=known.behind, since=since) as changed:
                while not changed.done():
                    left = deadline - loop.time()
                    if left <= 0:
                        return
                    await asyncio.wait({changed}, timeout=min(left, heartbeat_seconds))
                    if not changed.done():
                        yield None
                seen = changed.result()
            if seen.job is None:
                return  # purged meanwhile
            since, job = seen.generation, seen.job

    async def _view(self, job: Job) -> JobView:
        waiting = None if self._waits is None else await self._waits.of(job)
        return JobView(job=job, result_json=await self._result_of(job), waiting=waiting)

    async def list(
        self,
        tenant_id: str,
        *,
        status: JobStatus | None = None,
        task: str | None = None,
        job_ids: Collection[str] | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> JobListPage:
        """The tenant's jobs, newest first; with ``job_ids`` only those of them (an id
        that is unknown or another tenant's is simply not there), at most
        MAX_LIST_JOB_IDS."""
        if job_ids is not None and len(job_ids) > MAX_LIST_JOB_IDS:
            raise InvalidRequestError(f"at most {MAX_LIST_JOB_IDS} job ids in one list")
        async with self._list_turns.turn(tenant_id):
            return await self._page(
                tenant_id, status=status, task=task, job_ids=job_ids, limit=limit, cursor=cursor
            )

    async def _page(
        self,
        tenant_id: str,
        *,
        status: JobStatus | None,
        task: str | None,
        job_ids: Collection[str] | None,
        limit: int,
        cursor: str | None,
    ) -> JobListPage:
        page = await self._store.list_jobs(
            tenant_id=tenant_id,
            status=status,
            task=task,
            job_ids=job_ids,
            limit=limit,
            cursor=cursor,
            max_bytes=self._list_max_bytes,
        )
        reads = await self._read_within_budget(
            page.jobs, budget=self._list_max_bytes - page.listed_bytes
        )
        served = page.jobs[: len(reads)]
        waits = [None] * len(served) if self._waits is None else await self._waits.of_each(served)
        items = [
            ListedJob(
                summary=summary, result_json=read.data, result_error=read.error, waiting=waiting
            )
            for summary, read, waiting in zip(served, reads, waits, strict=True)
        ]
        if len(items) < len(page.jobs):
            # The results filled the page first: the next one starts after the last served.
            return JobListPage(items=items, next_cursor=cursor_after(items[-1].summary.job_id))
        return JobListPage(items=items, next_cursor=page.next_cursor)

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
        return await self._ledger.request_cancel(job_id, tenant_id=tenant_id, now=self._clock.now())

    async def _owned(self, tenant_id: str, job_id: str) -> Job:
        job = await self._store.get(job_id, tenant_id=tenant_id)
        if job is None:
            raise JobNotFoundError()
        return job

    async def _read_within_budget(
        self, jobs: Sequence[JobSummary], *, budget: int
    ) -> builtins.list[_Read]:
        """The results of the first jobs, in page order, until they fill the budget
        (always the first job's)."""
        reads: builtins.list[_Read] = []
        total = 0
        for start in range(0, len(jobs), _READS_AT_ONCE):
            chunk = jobs[start : start + _READS_AT_ONCE]
            for read in await asyncio.gather(*map(self._read, chunk)):
                if reads and total + read.size > budget:
                    return reads
                reads.append(read)
                total += read.size
        return reads

    async def _read(self, job: JobSummary) -> _Read:
        try:
            return _Read(data=await self._result_of(job))
        except _RESULT_ERRORS as exc:
            return _Read(error=exc)

    async def _result_of(self, job: Job | JobSummary) -> bytes | None:
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
