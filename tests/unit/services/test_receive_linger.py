"""Receives linger under a steady stream (services/worker.py, docs/design-notes.md).

After a receive that took some work but less than it could, with nothing left
visible, the worker's next receive starts ``receive_linger_seconds`` later, so jobs
that arrive one at a time meanwhile are taken together. Work already waiting is never
held back: a full receive goes on at once, and so does one that left a message
visible (a tenant at its share, a tenant beyond the receive's window); a slot freed by
a tenant at its share and a stop end the wait. Both receive paths are covered: the
plain one (memory engine) and the one that claims in its own transaction (SQLite)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time

import pytest

from ferryman.config import WorkerSettings
from ferryman.core.job import JobStatus
from ferryman.ports.queue import QueueMessage
from ferryman.services.worker_parts import WorkerOptions

pytestmark = pytest.mark.timeout(60)


def _record_receives(world) -> list[int]:
    """How many deliveries each receive that found work returned, in order."""
    taken: list[int] = []
    queue = world.queue
    for name in ("receive", "receive_claiming"):
        inner = getattr(queue, name, None)
        if inner is None:
            continue

        async def spy(*args, _inner=inner, **kwargs):
            got = await _inner(*args, **kwargs)
            if got:
                taken.append(len(got))
            return got

        setattr(queue, name, spy)
    return taken


@contextlib.asynccontextmanager
async def _running(worker):
    """The worker running until the block ends, then stopped and awaited."""
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        yield
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


async def _all_succeeded(world, jobs) -> bool:
    statuses = [(await world.job(j.job_id)).status for j in jobs]
    return all(status is JobStatus.SUCCEEDED for status in statuses)


async def _steady_stream(world, worker, eventually) -> list[int]:
    """One job, then two more 50 ms apart once the first has been received."""
    taken = _record_receives(world)
    async with _running(worker):
        first = await world.submit("first")
        await eventually(lambda: _received(taken, 1))
        second = await world.submit("second")
        await asyncio.sleep(0.05)
        third = await world.submit("third")
        await eventually(lambda: _all_succeeded(world, [first, second, third]))
    assert world.provider.invocations == 3
    return taken


async def _received(taken: list[int], n: int) -> bool:
    return sum(taken) >= n


@pytest.fixture(params=["memory", "sqlite"])
def any_world(request, make_world):
    if request.param == "memory":
        return make_world()
    return request.getfixturevalue("sqlite_world")


async def test_jobs_arriving_during_the_linger_share_one_receive(any_world, eventually):
    worker = any_world.worker(receive_linger_seconds=3.0)

    taken = await _steady_stream(any_world, worker, eventually)

    assert taken == [1, 2]


async def test_without_a_linger_each_job_arriving_alone_is_its_own_receive(any_world, eventually):
    worker = any_world.worker(receive_linger_seconds=0.0)

    taken = await _steady_stream(any_world, worker, eventually)

    assert taken == [1, 1, 1]


async def test_a_full_receive_goes_on_at_once(any_world, eventually):
    """Two slots, two jobs waiting: the receive is full, so it does not linger, and the
    two jobs submitted while its calls run are taken as soon as slots free (a linger of
    30 s would outlast the test's timeout)."""
    world = any_world
    release = asyncio.Event()
    world.provider.block = release
    jobs = [await world.submit(f"job {n}", tenant=f"t{n}") for n in range(2)]
    taken = _record_receives(world)
    worker = world.worker(concurrency=2, receive_linger_seconds=30.0)
    async with _running(worker):
        await eventually(lambda: _in_flight(worker, 2))
        jobs += [await world.submit(f"job {n}", tenant=f"t{n % 2}") for n in range(2, 4)]
        release.set()
        await eventually(lambda: _all_succeeded(world, jobs), within_seconds=20)
    assert taken[0] == 2
    assert sum(taken) == 4


async def test_a_stop_ends_the_linger(any_world, eventually):
    world = any_world
    worker = world.worker(receive_linger_seconds=30.0)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    job = await world.submit("alone")
    await eventually(lambda: _all_succeeded(world, [job]))

    stop.set()
    began = time.monotonic()
    await asyncio.wait_for(running, 10)

    assert time.monotonic() - began < 10


def test_a_negative_linger_is_refused(make_world):
    with pytest.raises(ValueError, match="receive_linger_seconds"):
        make_world().worker(receive_linger_seconds=-0.001)


async def test_a_receive_a_tenants_share_cut_short_does_not_linger(any_world, eventually):
    """Two of four slots per tenant: the first receive takes two of three jobs because
    the tenant holds its share, not because nothing more waits. The third starts as
    soon as a slot of that tenant frees, not a 30 s linger later."""
    world = any_world
    release = asyncio.Event()
    world.provider.block = release
    jobs = [await world.submit(f"job {n}") for n in range(3)]
    taken = _record_receives(world)
    worker = world.worker(concurrency=4, tenant_max_share=0.5, receive_linger_seconds=30.0)
    async with _running(worker):
        await eventually(lambda: _in_flight(worker, 2))
        release.set()
        await eventually(lambda: _all_succeeded(world, jobs), within_seconds=20)
    assert taken[0] == 2
    assert sum(taken) == 3


async def _in_flight(worker, n: int) -> bool:
    return worker.in_flight == n


async def test_a_receive_whose_tenant_window_left_a_job_waiting_does_not_linger(
    sqlite_world, eventually
):
    """A receive looks at 64 tenants with messages at most (hidden ones count). With 70
    such tenants before it, tenant zzz's visible job is beyond the first receive's
    window: the receive takes tenant a's job alone, and the worker must go on to the
    next window rather than linger 30 s."""
    world = sqlite_world
    for n in range(70):
        await world.queue.send(
            QueueMessage(job_id=f"never-{n}", tenant_id=f"t{n:02d}"), delay_seconds=10_000
        )
    first = await world.submit("a's", tenant="a")
    last = await world.submit("zzz's", tenant="zzz")
    taken = _record_receives(world)
    worker = world.worker(receive_linger_seconds=30.0)
    async with _running(worker):
        await eventually(lambda: _all_succeeded(world, [first, last]), within_seconds=20)
    assert taken == [1, 1]


async def test_a_tenant_at_its_share_freeing_a_slot_during_the_receive_is_not_held_back(
    any_world, eventually
):
    """Tenant a holds its two slots with a third job waiting; a receive takes tenant b's
    job while a's calls end. a's third job, waiting all along, is taken next: not a
    30 s linger later, nor (SQLite) after a poll of 30 s because the receive after a
    short one took the queue for drained."""
    world = any_world
    if hasattr(world.queue, "_poll_interval_seconds"):
        world.queue._poll_interval_seconds = 30.0
    release = asyncio.Event()
    world.provider.block = release
    a_jobs = [await world.submit(f"a {n}", tenant="a") for n in range(3)]
    worker = world.worker(
        concurrency=4,
        tenant_max_share=0.5,
        receive_linger_seconds=30.0,
        receive_wait_seconds=30.0,
    )
    name = "receive_claiming" if hasattr(world.queue, "receive_claiming") else "receive"
    inner = getattr(world.queue, name)

    async def receive_then_free_a(*args, **kwargs):
        got = await inner(*args, **kwargs)
        tenants = [getattr(r, "delivery", r).message.tenant_id for r in got]
        if tenants == ["b"]:
            release.set()
            await eventually(lambda: _in_flight(worker, 0))
        return got

    setattr(world.queue, name, receive_then_free_a)
    async with _running(worker):
        await eventually(lambda: _in_flight(worker, 2))
        b_job = await world.submit("b's", tenant="b")
        await eventually(lambda: _all_succeeded(world, [*a_jobs, b_job]), within_seconds=20)


async def test_a_slot_freed_by_a_tenant_at_its_share_ends_the_linger(make_world, eventually):
    """Tenant a's two jobs (its share of four slots) and tenant b's one are taken in one
    receive, which lingers (nothing else visible). a's third job arrives, which only a
    freed slot of a's may take: when a's calls end, the linger ends, not 30 s later."""
    world = make_world()
    release = asyncio.Event()
    world.provider.block = release
    jobs = [await world.submit(f"a {n}", tenant="a") for n in range(2)]
    jobs.append(await world.submit("b's", tenant="b"))
    worker = world.worker(concurrency=4, tenant_max_share=0.5, receive_linger_seconds=30.0)
    async with _running(worker):
        await eventually(lambda: _in_flight(worker, 3))
        jobs.append(await world.submit("a 2", tenant="a"))
        release.set()
        await eventually(lambda: _all_succeeded(world, jobs), within_seconds=20)


def test_a_worker_lingers_as_the_setting_does_by_default():
    default = inspect.signature(WorkerOptions).parameters["receive_linger_seconds"].default
    assert default == WorkerSettings().receive_linger_seconds
