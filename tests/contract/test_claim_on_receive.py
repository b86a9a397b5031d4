"""JobQueue's optional receive_claiming (ports/queue.py, ClaimsOnReceive): a receive that
reads each delivered message's job and writes the claim the caller decided for it in its
own transaction.

Engines without it (memory, PostgreSQL) are skipped: the worker keeps its receive, read
and claim steps for them. For one that has it, the receive must count, hide and
dead-letter as ``receive`` does, the claim must be core's change written only under its
revision check, and a delivery left unclaimed must come back with its job as read."""

from __future__ import annotations

import pytest

from ferryman.core import changes
from ferryman.core.job import EventKind, JobStatus
from ferryman.ports.queue import ClaimsOnReceive

pytestmark = pytest.mark.timeout(30)


def _claiming(engine) -> ClaimsOnReceive:
    queue = engine.queue
    if not isinstance(queue, ClaimsOnReceive) or not queue.claims_on_receive:
        pytest.skip(f"{engine.name} has no claim on receive")
    return queue


def _claim_of(engine, attempt_id: str = "att_1"):
    def decide(delivery, job):
        if job is None:
            return None
        return changes.claim(
            job,
            attempt_id=attempt_id,
            worker_id="w1",
            now=engine.now(),
            lease_until=engine.now() + 60,
            max_deliveries_without_outcome=10,
        )

    return decide


async def test_a_lone_delivery_is_received_and_claimed_in_one_call(engine, job_factory):
    queue = _claiming(engine)
    job = job_factory()
    await engine.accept(job)

    [received] = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=_claim_of(engine)
    )

    assert received.delivery.message.job_id == job.job_id
    assert received.delivery.receive_count == 1
    assert received.job is not None and received.job.status is JobStatus.QUEUED
    assert received.claim is not None
    stored = await engine.store.get(job.job_id)
    assert (stored.status, stored.attempt_id) == (JobStatus.PROCESSING, "att_1")
    assert stored.revision == received.claim.after.revision
    assert [a.attempt_id for a in await engine.store.attempts(job.job_id)] == ["att_1"]
    kinds = [e.kind for e in await engine.store.events(job.job_id)]
    assert EventKind.CLAIMED in kinds
    # Hidden for its visibility timeout, as any receive leaves it.
    assert await engine.queue.receive(max_messages=4, visibility_timeout_seconds=30) == []
    engine.advance(31)
    [again] = await engine.queue.receive(max_messages=4, visibility_timeout_seconds=30)
    assert again.receive_count == 2


async def test_a_delivery_decided_against_is_returned_with_its_job_unclaimed(engine, job_factory):
    queue = _claiming(engine)
    job = job_factory()
    await engine.accept(job)

    [received] = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=lambda delivery, job: None
    )

    assert received.claim is None
    assert received.job is not None and received.job.job_id == job.job_id
    assert received.job_after == received.job
    stored = await engine.store.get(job.job_id)
    assert stored.status is JobStatus.QUEUED and stored.revision == received.job.revision
    assert await engine.store.attempts(job.job_id) == []


async def test_a_claim_whose_revision_moved_is_not_written(engine, job_factory):
    queue = _claiming(engine)
    job = job_factory()
    await engine.accept(job)
    stale = await engine.store.get(job.job_id)
    claim = _claim_of(engine)

    def decide(delivery, read):
        # Decided from an older version of the job than the one stored now.
        return claim(delivery, stale)

    note = changes.note(stale, EventKind.DUPLICATE_DELIVERY, now=engine.now(), detail={})
    assert await engine.port.apply(note)

    [received] = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=decide
    )

    assert received.claim is None
    assert received.job is not None and received.job.revision == note.after.revision
    assert (await engine.store.get(job.job_id)).status is JobStatus.QUEUED
    assert await engine.store.attempts(job.job_id) == []


async def test_a_message_without_a_job_is_delivered_with_none(engine, job_factory):
    queue = _claiming(engine)
    seen = []

    def decide(delivery, job):
        seen.append(job)
        return None

    from ferryman.ports.queue import QueueMessage

    await engine.queue.send(QueueMessage(job_id="job_missing", tenant_id="t1"))
    [received] = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=decide
    )
    assert received.job is None and received.claim is None
    assert seen == [None]


async def test_redrive_still_dead_letters_instead_of_claiming(engine, job_factory):
    queue = _claiming(engine)
    job = job_factory()
    await engine.accept(job)
    for _ in range(10):  # MAX_RECEIVES deliveries, none acknowledged
        assert await engine.queue.receive(max_messages=1, visibility_timeout_seconds=0)

    received = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=_claim_of(engine)
    )

    assert received == []
    assert (await engine.store.get(job.job_id)).status is JobStatus.QUEUED
    letters = await engine.queue.receive_dead_letters(max_messages=5)
    assert [letter.message.job_id for letter in letters] == [job.job_id]


async def test_fairness_budget_holds_as_for_receive(engine, job_factory):
    from ferryman.ports.queue import TenantBudget

    queue = _claiming(engine)
    for _ in range(3):
        await engine.accept(job_factory(tenant_id="busy"))
    await engine.accept(job_factory(tenant_id="quiet"))
    budget = TenantBudget(max_per_tenant=1, in_flight={"busy": 1})

    received = await queue.receive_claiming(
        max_messages=4, visibility_timeout_seconds=30, decide=_claim_of(engine), budget=budget
    )

    assert [r.delivery.message.tenant_id for r in received] == ["quiet"]
    assert all(r.claim is not None for r in received)
