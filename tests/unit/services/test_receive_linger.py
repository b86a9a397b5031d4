"""Receives linger under a steady stream (services/worker.py, docs/design-notes.md).

After a receive that took some work but less than it could, the worker's next receive
starts ``receive_linger_seconds`` later, so jobs that arrive one at a time meanwhile are
taken together. A full receive goes on at once, and a stop ends the wait. Both receive
paths are covered: the plain one (memory engine) and the one that claims in its own
transaction (SQLite)."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferryman.core.job import JobStatus

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


async def _all_succeeded(world, jobs) -> bool:
    statuses = [(await world.job(j.job_id)).status for j in jobs]
    return all(status is JobStatus.SUCCEEDED for status in statuses)


async def _steady_stream(world, worker, eventually) -> list[int]:
    """One job, then two more 50 ms apart once the first has been taken."""
    taken = _record_receives(world)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        first = await world.submit("first")
        await eventually(lambda: _all_succeeded(world, [first]))
        second = await world.submit("second")
        await asyncio.sleep(0.05)
        third = await world.submit("third")
        await eventually(lambda: _all_succeeded(world, [first, second, third]))
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert world.provider.invocations == 3
    return taken


@pytest.fixture(params=["memory", "sqlite"])
def any_world(request, make_world):
    if request.param == "memory":
        return make_world()
    return request.getfixturevalue("sqlite_world")


async def test_jobs_arriving_during_the_linger_share_one_receive(any_world, eventually):
    worker = any_world.worker(receive_linger_seconds=1.0)

    taken = await _steady_stream(any_world, worker, eventually)

    assert taken == [1, 2]


async def test_without_a_linger_each_job_arriving_alone_is_its_own_receive(any_world, eventually):
    worker = any_world.worker(receive_linger_seconds=0.0)

    taken = await _steady_stream(any_world, worker, eventually)

    assert taken == [1, 1, 1]


async def test_a_full_receive_goes_on_at_once(any_world, eventually):
    """Two slots, four jobs waiting: each receive is full, so none lingers (a linger of
    30 s after either would outlast the test's timeout)."""
    world = any_world
    jobs = [await world.submit(f"job {n}") for n in range(4)]
    taken = _record_receives(world)
    worker = world.worker(concurrency=2, receive_linger_seconds=30.0)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await eventually(lambda: _all_succeeded(world, jobs), within_seconds=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert sum(taken) == 4
    assert all(n == 2 for n in taken)


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
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await eventually(lambda: _in_flight(worker, 2))
        release.set()
        await eventually(lambda: _all_succeeded(world, jobs), within_seconds=20)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert taken[0] == 2
    assert sum(taken) == 3


async def _in_flight(worker, n: int) -> bool:
    return worker.in_flight == n
