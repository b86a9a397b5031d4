"""What may differ between engines is stated by each engine, and each honours it.

ports/store.py's StoreCapabilities (the largest atomic batch, whether usage counts are
exact) and ports/queue.py's QueueCapabilities (whether a receive is fair by itself).
"""

from __future__ import annotations

import collections

import pytest

from ferryman.core.errors import StateConflictError
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import QueueCapabilities, QueueMessage, TenantBudget
from ferryman.ports.store import Accepted, StoreCapabilities

pytestmark = pytest.mark.timeout(120)

# The API's batch maximum (http/batch_bodies.py's MAX_BATCH_ITEMS): the largest batch an
# engine without a limit of its own is held to here.
API_BATCH_MAXIMUM = 1000

# What each engine states (docs/architecture.md, "What may differ between engines").
STATED = {
    "memory": (StoreCapabilities(max_atomic_batch=None, usage_exact=True), True),
    "memory-outbox": (StoreCapabilities(max_atomic_batch=None, usage_exact=True), True),
    "sqlite": (StoreCapabilities(max_atomic_batch=None, usage_exact=True), True),
    "postgres": (StoreCapabilities(max_atomic_batch=None, usage_exact=True), True),
    # A DynamoDB transaction holds 100 items (a keyed new job takes 3, a tenant's
    # counters 8); an item 400 KB; SQS delivers in its own order.
    "aws": (
        StoreCapabilities(max_atomic_batch=23, usage_exact=True, max_job_bytes=350_000),
        False,
    ),
}


def _largest_atomic_batch(engine) -> int:
    return engine.port.capabilities.max_atomic_batch or API_BATCH_MAXIMUM


async def _create_many(engine, jobs):
    return await engine.store.create_many(
        jobs, idempotency_expires_at=engine.now() + 3600, now=engine.now()
    )


async def _stored_count(engine) -> int:
    return (await engine.store.usage("t1")).stored


def test_every_engine_states_its_capabilities(engine):
    store, fair = STATED[engine.name]

    assert isinstance(engine.port.capabilities, StoreCapabilities)
    assert engine.port.capabilities == store
    assert isinstance(engine.queue.capabilities, QueueCapabilities)
    assert engine.queue.capabilities.fair_receive is fair


async def test_a_batch_of_the_largest_atomic_size_is_stored_whole(engine, job_factory):
    size = _largest_atomic_batch(engine)
    jobs = [job_factory(idempotency_key=f"k{i}") for i in range(size)]

    outcomes = await _create_many(engine, jobs)

    assert len(outcomes) == size
    assert all(isinstance(o, Accepted) and o.created for o in outcomes)
    assert [o.job.job_id for o in outcomes] == [j.job_id for j in jobs]  # type: ignore[union-attr]
    assert await _stored_count(engine) == size


async def test_a_batch_of_the_largest_atomic_size_that_fails_stores_nothing(engine, job_factory):
    """Its last item clashes with a stored job: the failure comes after every other
    item was written in the transaction, and none of them stays."""
    existing = await engine.accept(job_factory())
    size = _largest_atomic_batch(engine)
    fresh = [job_factory(idempotency_key=f"k{i}") for i in range(size - 1)]
    clash = job_factory(job_id=existing.job.job_id, input={"prompt": "clash"})

    with pytest.raises(StateConflictError):
        await _create_many(engine, [*fresh, clash])

    assert await _stored_count(engine) == 1
    page = await engine.store.list_jobs(tenant_id="t1", limit=10)
    assert [j.job_id for j in page.jobs] == [existing.job.job_id]


async def test_usage_counts_are_what_the_engine_says_they_are(engine, job_factory):
    """Exact: the counters equal what is stored, at once. An estimate may lag, so it is
    held only to what the quotas rely on: it never counts more than is stored."""
    jobs = [job_factory() for _ in range(5)]
    await _create_many(engine, jobs)
    claimed = await engine.claim(jobs[0].job_id)
    assert claimed.claimed

    usage = await engine.store.usage("t1")

    if engine.port.capabilities.usage_exact:
        assert (usage.stored, usage.unfinished) == (5, 5)
    else:
        assert 0 <= usage.unfinished <= usage.stored <= 5
    assert await engine.store.usage("t2") == type(usage)(unfinished=0, stored=0)


async def _send(engine, tenant_id: str, count: int) -> None:
    for _ in range(count):
        await engine.queue.send(QueueMessage(job_id=new_job_id(), tenant_id=tenant_id))
        engine.advance(0.001)


async def test_every_receive_keeps_within_the_receivers_cap(engine):
    """Fair by itself or not, no engine gives a tenant more than the budget allows."""
    await _send(engine, "flood", 20)
    await _send(engine, "quick", 2)
    budget = TenantBudget(max_per_tenant=2, in_flight={})

    deliveries = await engine.queue.receive(
        max_messages=10, visibility_timeout_seconds=60.0, budget=budget
    )

    held = collections.Counter(d.message.tenant_id for d in deliveries)
    assert held == {"flood": 2, "quick": 2}


async def test_a_fair_receive_serves_every_waiting_tenant_without_a_budget(engine):
    """A queue fair by itself serves the tenant with one job beside the flood; one fair
    only by the receiver's cap (the case above) still fills the receive."""
    await _send(engine, "flood", 30)
    await _send(engine, "quick", 1)

    deliveries = await engine.queue.receive(max_messages=2, visibility_timeout_seconds=60.0)

    tenants = sorted(d.message.tenant_id for d in deliveries)
    if engine.queue.capabilities.fair_receive:
        assert tenants == ["flood", "quick"]
    else:
        assert len(tenants) == 2


async def test_a_store_refuses_a_batch_over_its_stated_limit():
    """An engine with a limit refuses more, storing nothing (the memory engine, held
    to a limit as DynamoDB's transactions are), so intake must chunk."""
    from ferryman.adapters.memory import InMemoryJobStore
    from ferryman.core import changes
    from ferryman.core.clock import FakeClock
    from ferryman.core.job import Job

    store = InMemoryJobStore(max_atomic_batch=2)
    now = FakeClock().now()
    batch = [
        changes.accept(
            Job(
                tenant_id="t1",
                job_id=new_job_id(),
                task="generate",
                model="sim",
                input={"prompt": str(i)},
                request_hash=f"h{i}",
                correlation_id="c",
                created_at=now,
                updated_at=now,
            ),
            now=now,
            dispatched=False,
        )
        for i in range(3)
    ]

    assert store.capabilities.max_atomic_batch == 2
    with pytest.raises(ValueError, match="at most 2"):
        await store.create_many(batch, idempotency_expires_at=None)
    assert (await store.usage("t1")).stored == 0
    assert all(
        isinstance(o, Accepted)
        for o in await store.create_many(batch[:2], idempotency_expires_at=None)
    )
