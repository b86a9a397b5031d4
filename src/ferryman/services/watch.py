"""The status watcher: clients' waits on jobs, answered as soon as a job moves.

An API process holds one watcher for every wait (``GET /v1/generations/{id}?wait=`` and
the event stream). A wait is an asyncio future filed under its job id, with the
condition it waits for: it holds no database connection and no thread, so thousands
of them cost a few hundred bytes each.

One task reads the watched jobs, all of them in one ``get_many`` (in chunks of
``read_chunk``, so a large read never holds the event loop for long), and settles
every wait whose job now meets its condition. Where the store reads statuses alone
(ports/store.py's ``ReadsStatuses``: SQLite, PostgreSQL, memory), it reads the
watched jobs' statuses and only the jobs whose status moved whole: 3,000 waits then
cost a few milliseconds a read instead of about 70. It reads when the store's status hint
is nudged (``JobReads.status_hints``: a change of a job's status was stored, by this
process or by another one the engine hears from), when a new wait may have missed a
nudge, and every ``fallback_seconds`` whatever happens. A hint is never the news:
only the read decides, so a lost nudge costs the time to the next fallback read, and
an engine that carries no nudges between processes (AWS) is served by that read.

Reads are coalesced: nudges that come while the task waits or reads lead to one more
read, not one each, and two reads start at least ``min_gap_seconds`` apart, or as long
apart as the last read took, whichever is longer. A storm of status changes (a worker
finishing hundreds of jobs a second) therefore costs at most one read of the watched
jobs per gap, and the event loop spends at most about half its time on them.

The task runs only while someone waits: the first wait starts it, and it ends when the
last one is gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import structlog

from ferryman.ports.store import ReadsStatuses

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Collection, Iterator

    from ferryman.core.job import Job, JobStatus
    from ferryman.ports.store import Hint

log = structlog.get_logger("ferryman.watch")

# Every wait is checked at least this often, nudged or not (lost nudges; an engine
# whose other processes' changes nudge nobody here).
DEFAULT_FALLBACK_SECONDS = 1.0
# The shortest time between the starts of two reads: a burst of nudges shares one.
DEFAULT_MIN_GAP_SECONDS = 0.01
# Jobs read in one get_many: bounds how long one read's rows hold the event loop.
DEFAULT_READ_CHUNK = 500
# Not read yet: unlike any status, and unlike None (gone).
_UNREAD = object()


class StatusReads(Protocol):
    """What the watcher reads (ports/store.py's JobReads)."""

    @property
    def status_hints(self) -> Hint: ...

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]: ...


@dataclass(frozen=True, slots=True)
class Seen:
    """What a read found for a wait: the job (None: it is gone), and the hint's
    generation taken before that read (``since`` for a next wait on the job)."""

    job: Job | None
    generation: int


@dataclass(eq=False, slots=True)
class _Wait:
    until: Callable[[Job], bool]
    future: asyncio.Future[Seen] = field(repr=False)


class JobWatcher:
    def __init__(
        self,
        *,
        store: StatusReads,
        fallback_seconds: float = DEFAULT_FALLBACK_SECONDS,
        min_gap_seconds: float = DEFAULT_MIN_GAP_SECONDS,
        read_chunk: int = DEFAULT_READ_CHUNK,
    ) -> None:
        if fallback_seconds <= 0 or min_gap_seconds < 0 or read_chunk < 1:
            raise ValueError("fallback_seconds > 0, min_gap_seconds >= 0, read_chunk >= 1")
        self._store = store
        self._fallback_seconds = fallback_seconds
        self._min_gap_seconds = min_gap_seconds
        self._read_chunk = read_chunk
        self._waits: dict[str, set[_Wait]] = {}
        # Each watched job's status at the last read (None: it was gone), and the jobs
        # with a wait that may have missed a nudge: read whole at the next read.
        self._known: dict[str, JobStatus | None] = {}
        self._fresh: set[str] = set()
        self._task: asyncio.Task[None] | None = None
        # Set when the task should read without a nudge (a new wait may have missed
        # one) or look again (the last wait left).
        self._kick: asyncio.Event | None = None
        self.reads = 0  # reads made, each of every watched job (tests and benchmarks)
        self.read_seconds = 0.0  # how long the last read took

    @property
    def generation(self) -> int:
        """The status hint's generation: take it before reading a job, and pass it to
        ``watching``, so a nudge between that read and the wait is not lost."""
        return self._store.status_hints.generation

    @property
    def waiting(self) -> int:
        """Waits held now."""
        return sum(len(waits) for waits in self._waits.values())

    async def wait(
        self, job_id: str, *, until: Callable[[Job], bool], since: int, timeout_seconds: float
    ) -> Job | None:
        """The job as read once it meets ``until``; None when the time is up first, or
        when the job is gone."""
        with self.watching(job_id, until=until, since=since) as changed:
            done, _ = await asyncio.wait({changed}, timeout=max(0.0, timeout_seconds))
            return changed.result().job if done else None

    @contextlib.contextmanager
    def watching(
        self, job_id: str, *, until: Callable[[Job], bool], since: int
    ) -> Iterator[asyncio.Future[Seen]]:
        """A future settled once a read finds the job meeting ``until`` or gone. ``since``: the hint's generation taken before the caller's own
        read of the job. Leaving the block ends the wait."""
        loop = asyncio.get_running_loop()
        wait = _Wait(until=until, future=loop.create_future())
        self._waits.setdefault(job_id, set()).add(wait)
        self._ensure_running(loop)
        if since != self.generation:
            self._fresh.add(job_id)
            self._wake()  # a nudge came after the caller's read: read for it
        try:
            yield wait.future
        finally:
            waits = self._waits.get(job_id)
            if waits is not None:
                waits.discard(wait)
                if not waits:
                    del self._waits[job_id]
                    self._known.pop(job_id, None)
                    self._fresh.discard(job_id)
            if not wait.future.done():
                wait.future.cancel()
            if not self._waits:
                self._wake()  # the task sees nobody waits, and ends

    def _ensure_running(self, loop: asyncio.AbstractEventLoop) -> None:
        task = self._task
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._kick = asyncio.Event()
        self._task = loop.create_task(self._run(), name="ferryman-job-watcher")

    def _wake(self) -> None:
        if self._kick is not None:
            self._kick.set()

    async def _run(self) -> None:
        kick = self._kick
        assert kick is not None
        hints = self._store.status_hints
        loop = asyncio.get_running_loop()
        last_start = -math.inf
        # The first read happens at once: the first waits may have missed a nudge.
        seen = hints.generation - 1
        while self._waits:
            if hints.generation == seen and not kick.is_set():
                await _first_of(
                    hints.wait(since=seen, timeout_seconds=self._fallback_seconds), kick
                )
                if not self._waits:
                    return
            gap = max(self._min_gap_seconds, self.read_seconds)
            delay = last_start + gap - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            kick.clear()
            seen = hints.generation
            last_start = loop.time()
            await self._read(seen)
            self.read_seconds = loop.time() - last_start

    async def _read(self, generation: int) -> None:
        """Read every watched job, a chunk at a time, and settle the waits met."""
        self.reads += 1
        ids = list(self._waits)
        for start in range(0, len(ids), self._read_chunk):
            chunk = ids[start : start + self._read_chunk]
            try:
                jobs = await self._read_chunk_of(chunk)
            except Exception as exc:  # noqa: BLE001 - the next read tries again
                log.warning("watch.read_failed", error_type=type(exc).__name__)
                return
            for job_id, job in jobs.items():
                self._settle(job_id, job, generation)

    async def _read_chunk_of(self, chunk: list[str]) -> dict[str, Job | None]:
        """The jobs of the chunk that may settle a wait (None: gone). Where the store
        reads statuses alone (ReadsStatuses), only the jobs whose status moved since
        the last read, and those with a wait that may have missed a nudge, are read
        whole."""
        store = self._store
        if not isinstance(store, ReadsStatuses):
            jobs = await store.get_many(chunk)
            return {job_id: jobs.get(job_id) for job_id in chunk}
        statuses = await store.statuses(chunk)
        known, fresh = self._known, self._fresh
        moved = [
            job_id
            for job_id in chunk
            if job_id in fresh or statuses.get(job_id) is not known.get(job_id, _UNREAD)
        ]
        jobs = await store.get_many(moved) if moved else {}
        for job_id in chunk:
            known[job_id] = statuses.get(job_id)
        fresh.difference_update(chunk)
        return {job_id: jobs.get(job_id) for job_id in moved}

    def _settle(self, job_id: str, job: Job | None, generation: int) -> None:
        for wait in list(self._waits.get(job_id, ())):
            if wait.future.done():
                continue
            if job is None or wait.until(job):
                wait.future.set_result(Seen(job=job, generation=generation))


async def _first_of(hinted: Awaitable[None], kick: asyncio.Event) -> None:
    """Until the hint's wait returns or ``kick`` is set."""
    waits = {asyncio.ensure_future(hinted), asyncio.ensure_future(kick.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for each in waits:
            each.cancel()
