"""A worker whose queue claims on receive (ports/queue.py's ClaimsOnReceive, SQLite):
a delivery it may claim at once is claimed in the receive's own transaction, and any
other is handled as a plain delivery, with every rule of ``DeliveryHandler.handle``.

The worker runs over the SQLite engine here (the in-memory queue has no such receive)."""

from __future__ import annotations

import dataclasses

import pytest

from ferryman.core.job import EventKind, JobStatus
from ferryman.observability import metrics
from ferryman.ports.queue import Delivery, QueueMessage
from ferryman.services.observers import JobObserver
from ferryman.services.verdicts import Verdict

pytestmark = pytest.mark.timeout(30)


def _db(world):
    return world.queue._db


async def test_a_lone_job_costs_the_writer_one_commit_less(sqlite_world):
    """Receive and claim in one transaction, the publish (with its ack) in another,
    then the receive that finds the queue empty: three commits, where receive, claim,
    publish and the empty receive were four."""
    world = sqlite_world
    worker = world.worker()
    job = await world.submit()
    before = _db(world).commit_count

    assert await worker.run_until_idle() == 1

    assert _db(world).commit_count - before == 3
    done = await world.job(job.job_id)
    assert done.status is JobStatus.SUCCEEDED
    attempts = await world.store.attempts(job.job_id)
    assert [a.worker_id for a in attempts] == [worker.worker_id]
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds.count(EventKind.CLAIMED) == 1
    assert world.provider.invocations == 1


async def test_a_running_worker_claims_on_receive_too(sqlite_world, eventually):
    import asyncio

    world = sqlite_world
    worker = world.worker()
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        jobs = [await world.submit(f"hello {n}") for n in range(5)]

        async def all_done() -> bool:
            statuses = [(await world.job(job.job_id)).status for job in jobs]
            return all(status is JobStatus.SUCCEEDED for status in statuses)

        await eventually(all_done)
    finally:
        stop.set()
        await running
    assert world.provider.invocations == 5


async def test_a_duplicate_delivery_of_a_finished_job_is_counted_not_added_to_its_history(
    sqlite_world,
):
    world = sqlite_world
    worker = world.worker()
    job = await world.submit()
    await worker.run_until_idle()
    history = await world.store.events(job.job_id)
    duplicates = metrics.DUPLICATE_DELIVERIES._value.get()
    await world.queue.send(QueueMessage(job_id=job.job_id, tenant_id=job.tenant_id))

    assert await worker.run_until_idle() == 1

    # Its history still ends with its terminal event.
    assert await world.store.events(job.job_id) == history
    assert history[-1].kind is EventKind.SUCCEEDED
    assert metrics.DUPLICATE_DELIVERIES._value.get() == duplicates + 1
    assert world.provider.invocations == 1
    assert (await world.queue.stats()).visible == 0


async def test_a_job_of_a_paused_provider_is_not_claimed(sqlite_world):
    world = sqlite_world
    worker = world.worker()
    job = await world.submit()
    await world.control.set_provider_paused(
        world.provider.name, True, actor="test", now=world.clock.now(), reason="test"
    )

    assert await worker.run_until_idle() == 1

    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.QUEUED
    assert await world.store.attempts(job.job_id) == []
    assert world.provider.invocations == 0


def _delivery(job, *, version=None) -> Delivery:
    message = QueueMessage.for_job(job)
    if version is not None:
        message = dataclasses.replace(message, payload_version=version)
    return Delivery(message=message, receipt="r", receive_count=1, sent_at=0.0)


async def test_only_a_delivery_handle_would_claim_at_once_gets_a_claim(sqlite_world):
    """What decide_claim leaves to ``handle``: a missing, finished, not yet due or
    exhausted job, an unknown payload, and a provider not known (now) to be unpaused."""
    world = sqlite_world
    handler = world.worker()._handler
    job = await world.store.get((await world.submit()).job_id)

    # The pauses were never read: handle looks first.
    assert handler.decide_claim(_delivery(job), job) is None
    assert not await handler._provider_paused(job)
    claim = handler.decide_claim(_delivery(job), job)
    assert claim is not None and claim.after.status is JobStatus.PROCESSING
    assert claim.expected_revision == job.revision

    assert handler.decide_claim(_delivery(job), None) is None
    assert handler.decide_claim(_delivery(job, version=999), job) is None
    later = dataclasses.replace(job, not_before=world.clock.now() + 10)
    assert handler.decide_claim(_delivery(job), later) is None
    exhausted = dataclasses.replace(job, failure_count=1000)
    assert handler.decide_claim(_delivery(job), exhausted) is None
    done = dataclasses.replace(job, status=JobStatus.SUCCEEDED)
    assert handler.decide_claim(_delivery(job), done) is None


async def test_an_unknown_payload_is_deferred_not_claimed(sqlite_world):
    world = sqlite_world
    worker = world.worker()
    job = await world.submit()
    await worker.run_until_idle()  # the real message is done
    message = dataclasses.replace(QueueMessage.for_job(job), payload_version=999)
    other = await world.submit("another")
    await world.queue.send(dataclasses.replace(message, job_id=other.job_id))
    verdicts = []

    class Verdicts(JobObserver):
        def delivery_ended(self, delivery, verdict):
            verdicts.append((delivery.message.payload_version, verdict))

    worker = world.worker(observers=world.store.observers.with_observer(Verdicts()))
    await worker.run_until_idle(max_rounds=2)
    assert (999, Verdict.DEFERRED) in verdicts


async def test_a_decision_that_raises_leaves_the_delivery_to_handle(sqlite_world):
    """A failure deciding one delivery's claim must not undo the whole receive (it would
    on every look): the delivery is handled as a plain one, which meets it alone."""
    world = sqlite_world
    worker = world.worker()
    job = await world.submit()
    handler = worker._handler

    def broken(delivery, job):
        raise RuntimeError("boom")

    handler._decide_claim = broken

    assert await worker.run_until_idle() == 1

    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


async def test_a_job_row_that_cannot_be_read_fails_its_own_delivery_only(sqlite_world, eventually):
    """A row this version cannot decode (a status from a newer release, say) must not
    undo the receive it came in: the job behind it still runs, and the bad delivery is
    counted, as on the plain path, on its way to the dead letters."""
    import asyncio

    world = sqlite_world
    worker = world.worker()
    bad = await world.submit("from a newer release")
    good = await world.submit("fine")

    def mark(conn):
        conn.execute("UPDATE jobs SET status = 'ARCHIVED' WHERE job_id = ?", (bad.job_id,))

    await _db(world).write(mark)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:

        async def good_done() -> bool:
            return (await world.job(good.job_id)).status is JobStatus.SUCCEEDED

        await eventually(good_done)
    finally:
        stop.set()
        await running

    def receive_counts(conn):
        return conn.execute(
            "SELECT receive_count FROM messages WHERE json_extract(body, '$.job_id') = ?",
            (bad.job_id,),
        ).fetchall()

    counts = await _db(world).read(receive_counts)
    assert counts and counts[0][0] >= 1  # received and counted, not rolled back
    assert world.provider.invocations == 1
