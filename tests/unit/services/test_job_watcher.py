"""services.watch: a wait is settled by the read a nudge causes, reads are shared and
coalesced, the fallback read serves an engine that nudges nobody, and nothing is left
behind when waits end. On the memory engine; every test waits on conditions."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import pytest

from ferryman.adapters.wakeup import Wakeup
from ferryman.core.job import Job, JobStatus
from ferryman.services.watch import JobWatcher

if TYPE_CHECKING:
    from tests.unit.services.conftest import World

# Far beyond every test: a read that happens was caused by a nudge or a new wait.
NO_FALLBACK = 3600.0


@dataclass
class Reads:
    """The world's store as the watcher reads it, with a hint the test nudges by hand
    and a gate that (when set) holds each read."""

    world: World
    status_hints: Wakeup = field(default_factory=Wakeup)
    reads: list[list[str]] = field(default_factory=list)
    gate: asyncio.Event | None = None
    fail_next: bool = False

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        self.reads.append(sorted(job_ids))
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise OSError("database unreachable")
        return await self.world.store.get_many(job_ids)


def finished(job: Job) -> bool:
    return job.status.terminal


async def until(condition: Callable[[], bool]) -> None:
    while not condition():  # noqa: ASYNC110 - a condition other tasks make true
        await asyncio.sleep(0)


@pytest.fixture
def world(make_world: Callable[..., World]) -> World:
    return make_world()


async def cancel(world: World, job: Job) -> None:
    await world.jobs.cancel(job.tenant_id, job.job_id)


async def test_a_nudge_reads_and_settles_the_waits_met(world: World) -> None:
    reads = Reads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    job, other = await world.submit(), await world.submit()
    since = watcher.generation
    waiting = asyncio.create_task(
        watcher.wait(job.job_id, until=finished, since=since, timeout_seconds=NO_FALLBACK)
    )
    still = asyncio.create_task(
        watcher.wait(other.job_id, until=finished, since=since, timeout_seconds=NO_FALLBACK)
    )
    await until(lambda: len(reads.reads) == 1)  # the first read, as the task starts
    await cancel(world, job)
    reads.status_hints.notify()

    seen = await waiting
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED
    # One read of every watched job, not one per wait.
    assert sorted(reads.reads[-1]) == sorted([job.job_id, other.job_id])
    assert not still.done()
    still.cancel()
    await until(lambda: watcher.waiting == 0)


async def test_the_memory_engine_nudges_its_status_hint_on_every_status_change(
    world: World,
) -> None:
    watcher = JobWatcher(store=world.store, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    job = await world.submit()
    waiting = asyncio.create_task(
        watcher.wait(
            job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
        )
    )
    await until(lambda: watcher.reads == 1)
    await cancel(world, job)
    seen = await waiting
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED


async def test_nudges_during_a_read_cost_one_more_read_not_one_each(world: World) -> None:
    reads = Reads(world, gate=asyncio.Event())
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    job = await world.submit()
    waiting = asyncio.create_task(
        watcher.wait(
            job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
        )
    )
    await until(lambda: len(reads.reads) == 1)  # held in its first read
    await cancel(world, job)
    for _ in range(50):
        reads.status_hints.notify()
    assert reads.gate is not None
    reads.gate.set()
    seen = await waiting
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED
    assert len(reads.reads) == 2


async def test_a_new_wait_that_missed_a_nudge_is_read_for(world: World) -> None:
    reads = Reads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    first, second = await world.submit(), await world.submit()
    holding = asyncio.create_task(
        watcher.wait(
            first.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
        )
    )
    await until(lambda: len(reads.reads) == 1)
    # A caller read ``second`` (taking the generation first), then it finished and the
    # nudge came, all before it began to wait.
    since = watcher.generation
    await cancel(world, second)
    reads.status_hints.notify()
    await until(lambda: len(reads.reads) == 2)
    seen = await watcher.wait(
        second.job_id, until=finished, since=since, timeout_seconds=NO_FALLBACK
    )
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED
    holding.cancel()


async def test_without_nudges_the_fallback_read_finds_the_change(world: World) -> None:
    reads = Reads(world)  # nobody nudges it: an engine that hears no other process
    watcher = JobWatcher(store=reads, fallback_seconds=0.001, min_gap_seconds=0)
    job = await world.submit()
    waiting = asyncio.create_task(
        watcher.wait(
            job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
        )
    )
    await until(lambda: len(reads.reads) >= 2)
    await cancel(world, job)
    seen = await waiting
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED


async def test_a_wait_ends_with_none_when_its_time_is_up_or_the_job_is_gone(
    world: World,
) -> None:
    reads = Reads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    job = await world.submit()
    assert (
        await watcher.wait(job.job_id, until=finished, since=watcher.generation, timeout_seconds=0)
        is None
    )
    gone = await watcher.wait(
        "gen_nothing", until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
    )
    assert gone is None


async def test_a_failed_read_is_tried_again_and_never_ends_the_waits(world: World) -> None:
    reads = Reads(world, fail_next=True)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    job = await world.submit()
    waiting = asyncio.create_task(
        watcher.wait(
            job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
        )
    )
    await until(lambda: len(reads.reads) == 1 and not reads.fail_next)
    await cancel(world, job)
    reads.status_hints.notify()
    seen = await waiting
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED


async def test_the_task_ends_with_the_last_wait_and_leaves_nothing_behind(
    world: World,
) -> None:
    reads = Reads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    jobs = [await world.submit() for _ in range(20)]
    waits = [
        asyncio.create_task(
            watcher.wait(
                job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
            )
        )
        for job in jobs
        for _ in range(3)  # several waits on one job too
    ]
    await until(lambda: watcher.waiting == 60)
    for each in waits:
        each.cancel()  # the clients went away
    await asyncio.gather(*waits, return_exceptions=True)
    assert watcher.waiting == 0
    task = watcher._task
    assert task is not None
    await until(task.done)
    assert task.exception() is None


async def test_reads_are_chunked(world: World) -> None:
    reads = Reads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0, read_chunk=3)
    jobs = [await world.submit() for _ in range(7)]
    waits = [
        asyncio.create_task(
            watcher.wait(
                job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
            )
        )
        for job in jobs
    ]
    await until(lambda: len(reads.reads) >= 3)
    assert [len(chunk) for chunk in reads.reads[:3]] == [3, 3, 1]
    for each in waits:
        each.cancel()
    await asyncio.gather(*waits, return_exceptions=True)


@dataclass
class StatusReads(Reads):
    """A store that reads statuses alone (ReadsStatuses): jobs are read whole only
    when their status moved."""

    whole: list[list[str]] = field(default_factory=list)

    async def statuses(self, job_ids: Collection[str]) -> dict[str, JobStatus]:
        jobs = await super().get_many(job_ids)
        return {job_id: job.status for job_id, job in jobs.items()}

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        self.whole.append(sorted(job_ids))
        return await self.world.store.get_many(job_ids)


async def test_where_statuses_read_alone_only_the_jobs_that_moved_are_read_whole(
    world: World,
) -> None:
    reads = StatusReads(world)
    watcher = JobWatcher(store=reads, fallback_seconds=NO_FALLBACK, min_gap_seconds=0)
    jobs = [await world.submit() for _ in range(5)]
    waits = [
        asyncio.create_task(
            watcher.wait(
                job.job_id, until=finished, since=watcher.generation, timeout_seconds=NO_FALLBACK
            )
        )
        for job in jobs
    ]
    await until(lambda: watcher.waiting == 5 and len(reads.reads) >= 1)
    # Every job read once (its status, and whole: it had not been read before).
    await until(lambda: all(job.job_id in watcher._known for job in jobs))
    await cancel(world, jobs[2])
    before = len(reads.whole)
    reads.status_hints.notify()

    seen = await waits[2]
    assert seen is not None
    assert seen.status is JobStatus.CANCELLED
    assert reads.whole[before:] == [[jobs[2].job_id]]
    for each in waits:
        each.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
