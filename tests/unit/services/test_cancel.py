"""Cancel cancels: at once (within about a second when the hint is lost), over any retry or
late success, once (items 7, 21)."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import AlreadyTerminalError, FailureClass, ThrottledError
from ferryman.core.job import AttemptOutcome, EventKind, JobStatus
from ferryman.core.lease import LeasePolicy
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.verdicts import Verdict

# A heartbeat far beyond the test: whatever stops the call, it is not the heartbeat.
NO_HEARTBEAT = LeasePolicy(lease_seconds=3600, visibility_timeout_seconds=3600)


class HeldProvider:
    """The sim behind a gate: each call waits for ``release``, then answers or raises."""

    def __init__(self, *, then: Exception | None = None) -> None:
        self._inner = SimulatedProvider()
        self.release = asyncio.Event()
        self.started = asyncio.Event()
        self.cancelled = False
        self.then = then

    @property
    def name(self) -> str:
        return "sim"

    def serves(self, model: str) -> bool:
        return model == "sim"

    async def invoke(self, request, *, timeout_seconds):
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        if self.then is not None:
            raise self.then
        return await self._inner.invoke(request, timeout_seconds=timeout_seconds)


async def test_a_cancelled_call_stops_within_the_check_interval_not_at_the_heartbeat(
    make_world, eventually
):
    world = make_world(lease=NO_HEARTBEAT)
    provider = HeldProvider()
    job = await world.submit("x")
    worker = world.worker(providers=[provider], cancel_check_seconds=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(provider.started.wait(), 5)
        await world.jobs.cancel("t1", job.job_id)
        await eventually(
            lambda: _status_is(world, job.job_id, JobStatus.CANCELLED), within_seconds=5
        )
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert provider.cancelled  # the call itself was stopped, not left to finish
    stored = await world.job(job.job_id)
    assert stored.result_ref is None
    assert [a.outcome for a in await world.store.attempts(job.job_id)] == [AttemptOutcome.CANCELLED]


async def test_a_cancel_in_the_same_process_stops_the_call_at_once_not_at_the_check(
    make_world, eventually
):
    world = make_world(lease=NO_HEARTBEAT)
    provider = HeldProvider()
    job = await world.submit("x")
    # No periodic check within the test: only the store's cancel hint can stop the call.
    worker = world.worker(providers=[provider], cancel_check_seconds=3600)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await asyncio.wait_for(provider.started.wait(), 5)
        await world.jobs.cancel("t1", job.job_id)
        await eventually(
            lambda: _status_is(world, job.job_id, JobStatus.CANCELLED), within_seconds=5
        )
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert provider.cancelled


async def _status_is(world, job_id, status):
    return (await world.job(job_id)).status is status


async def _cancel_mid_call(world, provider):
    """Start the job's attempt, ask for a cancel while it runs, then let the call end."""
    job = await world.submit("x")
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
    handling = asyncio.create_task(world.worker(providers=[provider]).handle(delivery))
    await asyncio.wait_for(provider.started.wait(), 5)
    await world.jobs.cancel("t1", job.job_id)
    provider.release.set()
    return job, await asyncio.wait_for(handling, 5)


async def test_a_cancel_during_an_attempt_that_fails_retryably_wins_over_the_retry(make_world):
    world = make_world(lease=NO_HEARTBEAT)
    provider = HeldProvider(then=ThrottledError("busy", retry_after_seconds=1))

    job, verdict = await _cancel_mid_call(world, provider)

    assert verdict is Verdict.CANCELLED
    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.CANCELLED
    [attempt] = await world.store.attempts(job.job_id)
    # The attempt says what happened to its call, and that it ended the job cancelled.
    assert (attempt.outcome, attempt.failure_class) == (
        AttemptOutcome.CANCELLED,
        FailureClass.THROTTLED,
    )
    assert (await world.queue.stats()).in_flight == 0  # acked: no retry will come
    assert EventKind.RETRY_SCHEDULED not in [e.kind for e in await world.store.events(job.job_id)]


async def test_a_cancel_answered_while_the_call_ran_wins_over_its_success(make_world):
    world = make_world(lease=NO_HEARTBEAT)

    job, verdict = await _cancel_mid_call(world, HeldProvider())

    assert verdict is Verdict.CANCELLED
    stored = await world.job(job.job_id)
    assert (stored.status, stored.result_ref) == (JobStatus.CANCELLED, None)


async def test_a_cancel_after_the_result_is_published_is_refused(make_world):
    world = make_world()
    job = await world.submit("x")
    await world.worker().run_until_idle()
    events_before = await world.store.events(job.job_id)

    with pytest.raises(AlreadyTerminalError):
        await world.jobs.cancel("t1", job.job_id)

    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert await world.store.events(job.job_id) == events_before


async def test_a_repeated_cancel_changes_nothing_and_records_nothing(make_world):
    world = make_world(lease=NO_HEARTBEAT)
    provider = HeldProvider()
    job = await world.submit("x")
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
    handling = asyncio.create_task(world.worker(providers=[provider]).handle(delivery))
    await asyncio.wait_for(provider.started.wait(), 5)
    first = await world.jobs.cancel("t1", job.job_id)
    events = await world.store.events(job.job_id)

    again = [await world.jobs.cancel("t1", job.job_id) for _ in range(3)]

    assert all(j == first for j in again)
    assert await world.store.events(job.job_id) == events
    assert [e.kind for e in events].count(EventKind.CANCEL_REQUESTED) == 1
    provider.release.set()
    assert await asyncio.wait_for(handling, 5) is Verdict.CANCELLED
