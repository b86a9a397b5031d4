"""A broken result store never burns paid calls (issue 5, item 20).

The output of a call is kept and its write retried while the attempt holds its
lease; while writes fail, the worker starts no new call.
"""

from __future__ import annotations

import asyncio

from ferryman.core.errors import ResultsUnavailableError
from ferryman.core.job import AttemptOutcome, JobStatus
from ferryman.services.results import ResultWriter
from ferryman.services.verdicts import Verdict


class BrokenResults:
    """The in-memory store, refusing writes (a full or read-only disk) until mended."""

    def __init__(self, inner) -> None:
        self._inner = inner
        self.broken = True
        self.refused = 0

    async def put(self, key, data):
        if self.broken:
            self.refused += 1
            raise ResultsUnavailableError("results: No space left on device")
        return await self._inner.put(key, data)

    async def get(self, ref, *, key):
        return await self._inner.get(ref, key=key)

    async def probe(self):
        if self.broken:
            raise ResultsUnavailableError("results: No space left on device")

    async def reclaim(self, *, any_job_exists):
        return 0


async def _no_sleep(seconds):
    await asyncio.sleep(0)


async def test_a_paid_output_is_kept_and_written_once_the_store_mends(make_world):
    world = make_world()
    store = BrokenResults(world.results)
    writer = ResultWriter(store, sleep=_no_sleep)
    job = await world.submit("x")
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
    handling = asyncio.create_task(world.worker(results=writer).handle(delivery))

    for _ in range(1000):
        if store.refused >= 5:
            break
        await asyncio.sleep(0)
    assert not writer.healthy
    store.broken = False

    assert await asyncio.wait_for(handling, 5) is Verdict.SUCCEEDED
    assert world.provider.invocations == 1  # the call was paid for once
    [attempt] = await world.store.attempts(job.job_id)
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert writer.healthy


async def test_an_output_whose_lease_is_lost_while_the_store_is_down_is_not_published(make_world):
    world = make_world()
    store = BrokenResults(world.results)
    writer = ResultWriter(store, sleep=_no_sleep)
    job = await world.submit("x")
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
    worker = world.worker(results=writer)
    handling = asyncio.create_task(worker.handle(delivery))
    for _ in range(1000):
        if store.refused >= 3:
            break
        await asyncio.sleep(0)

    worker._runner.release_all()  # shutting down: the attempt stops holding its job

    assert await asyncio.wait_for(handling, 5) is Verdict.RELEASED
    assert (await world.job(job.job_id)).status is JobStatus.QUEUED


async def test_while_results_cannot_be_written_no_new_call_is_started(make_world):
    world = make_world()
    store = BrokenResults(world.results)
    writer = ResultWriter(store, sleep=_no_sleep, probe_interval_seconds=0.01)
    jobs = [await world.submit(f"job {i}") for i in range(10)]
    assert not await writer.probe()  # the process has seen the store fail
    worker = world.worker(results=writer)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.sleep(0.2)
        assert world.provider.invocations == 0
        assert (await world.queue.stats()).visible == 10

        store.broken = False
        for _ in range(500):
            statuses = {(await world.job(job.job_id)).status for job in jobs}
            if statuses == {JobStatus.SUCCEEDED}:
                break
            await asyncio.sleep(0.01)
        assert statuses == {JobStatus.SUCCEEDED}
        assert world.provider.invocations == 10
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
