"""A delivery whose visibility cannot outlast an attempt is let go, not started.

SQS hides a received message for at most 12 hours from the receive: a queue with such
a ceiling says where it lies (``Delivery.extendable_until``). An attempt that might run
past it would see its message reappear under it and a second worker call the model
again; so the worker starts none that could, and lets the message go at once, so its
next receive (whose window starts again) runs it.
"""

from __future__ import annotations

import dataclasses

from ferryman.core.job import JobStatus
from ferryman.services.verdicts import Verdict


async def _receive_one(world):
    deliveries = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    assert len(deliveries) == 1
    return deliveries[0]


async def test_too_little_visibility_left_starts_no_attempt_and_lets_the_message_go(
    make_world,
) -> None:
    world = make_world()
    job = await world.submit("hi")
    worker = world.worker()
    received = await _receive_one(world)
    # 5 s provider timeout: the attempt timeout is 7.5 s, plus a lease for its writes.
    short = dataclasses.replace(received, extendable_until=world.clock.now() + 10)
    assert await worker.handle(short) is Verdict.DEFERRED
    assert world.provider.invocations == 0
    assert await world.store.attempts(job.job_id) == []
    assert (await world.job(job.job_id)).status is JobStatus.QUEUED
    again = await _receive_one(world)  # visible again at once, no clock moved
    assert again.message.job_id == job.job_id
    assert await worker.handle(again) is Verdict.SUCCEEDED


async def test_enough_visibility_left_runs_the_attempt(make_world) -> None:
    world = make_world()
    await world.submit("hi")
    worker = world.worker()
    received = await _receive_one(world)
    roomy = dataclasses.replace(received, extendable_until=world.clock.now() + 43_140)
    assert await worker.handle(roomy) is Verdict.SUCCEEDED
    assert world.provider.invocations == 1
