"""Intake honours what the engine states (ports/store.py's StoreCapabilities): a batch
is written in chunks of at most ``max_atomic_batch`` jobs, one transaction each; a quota
refusal over counts that are an estimate (``usage_exact`` False) says so."""

from __future__ import annotations

import math

import pytest

from ferryman.adapters.memory import (
    InMemoryControlStore,
    InMemoryJobQueue,
    InMemoryJobStore,
)
from ferryman.core.clock import FakeClock
from ferryman.core.errors import BacklogQuotaExceededError, StoreUnavailableError
from ferryman.ports.store import StoreCapabilities
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import (
    BATCH_SLICE_JOBS,
    BatchItem,
    Intake,
    Submission,
    SubmitRequest,
    TenantQuotas,
)
from ferryman.services.ledger import JobLedger
from ferryman.tasks import builtin_tasks

MAX_ATOMIC_BATCH = 3


class CountingStore(InMemoryJobStore):
    """The memory engine held to a small transaction, recording each create_many; the
    call numbered ``fail_call`` fails whole, as an engine's outage would."""

    def __init__(self, *, queue: InMemoryJobQueue, fail_call: int | None = None) -> None:
        super().__init__(queue=queue, max_atomic_batch=MAX_ATOMIC_BATCH)
        self.transactions: list[list[str]] = []
        self._fail_call = fail_call

    async def create_many(self, changes, *, idempotency_expires_at):
        self.transactions.append([c.after.input["prompt"] for c in changes])
        if len(self.transactions) == self._fail_call:
            raise StoreUnavailableError("the table is away")
        return await super().create_many(changes, idempotency_expires_at=idempotency_expires_at)


def _intake(
    store: InMemoryJobStore,
    queue: InMemoryJobQueue,
    clock: FakeClock,
    quotas: TenantQuotas | None = None,
) -> Intake:
    return Intake(
        store=store,
        ledger=JobLedger(store),
        queue=queue,
        tasks=builtin_tasks(),
        control=InMemoryControlStore(),
        clock=clock,
        idempotency_retention_seconds=3600,
        catalog=ModelCatalog.serving_own_names([SimulatedProvider()]),
        quotas=quotas,
        sim_scripts=False,
    )


def _items(count: int) -> list[BatchItem]:
    return [
        BatchItem(SubmitRequest(task="generate", input={"prompt": f"p{i}"}), f"k{i}")
        for i in range(count)
    ]


async def _stored_prompts(store: InMemoryJobStore) -> list[str]:
    page = await store.list_jobs(tenant_id="t1", limit=100)
    jobs = await store.get_many([summary.job_id for summary in page.jobs])
    return sorted(job.input["prompt"] for job in jobs.values())


@pytest.mark.parametrize("count", [1, 3, 7, 9])
async def test_a_batch_takes_one_transaction_per_chunk_in_order(count: int) -> None:
    clock = FakeClock()
    queue = InMemoryJobQueue(clock=clock)
    store = CountingStore(queue=queue)
    intake = _intake(store, queue, clock)

    outcomes = await intake.submit_many(tenant_id="t1", items=_items(count))

    assert intake.atomic_chunk_size == MAX_ATOMIC_BATCH
    assert len(store.transactions) == math.ceil(count / MAX_ATOMIC_BATCH)
    assert all(len(t) <= MAX_ATOMIC_BATCH for t in store.transactions)
    prompts = [f"p{i}" for i in range(count)]
    assert [p for t in store.transactions for p in t] == prompts
    assert all(isinstance(o, Submission) and not o.replayed for o in outcomes)
    assert [o.job.input["prompt"] for o in outcomes] == prompts  # type: ignore[union-attr]


async def test_a_failed_chunk_stores_none_of_itself_and_the_earlier_chunks_stand() -> None:
    clock = FakeClock()
    queue = InMemoryJobQueue(clock=clock)
    store = CountingStore(queue=queue, fail_call=2)
    intake = _intake(store, queue, clock)

    outcomes = await intake.submit_many(tenant_id="t1", items=_items(7))

    assert [isinstance(o, Submission) for o in outcomes] == [True] * 3 + [False] * 4
    assert all(isinstance(o, StoreUnavailableError) for o in outcomes[3:])
    assert await _stored_prompts(store) == ["p0", "p1", "p2"]
    # Sent again, the stored chunk replays and the rest is written, chunk by chunk.
    again = await intake.submit_many(tenant_id="t1", items=_items(7))
    assert [o.replayed for o in again] == [True] * 3 + [False] * 4  # type: ignore[union-attr]
    assert await _stored_prompts(store) == [f"p{i}" for i in range(7)]


async def test_an_engine_without_a_limit_of_its_own_is_written_in_intake_slices() -> None:
    clock = FakeClock()
    queue = InMemoryJobQueue(clock=clock)
    store = InMemoryJobStore(queue=queue)

    assert store.capabilities.max_atomic_batch is None
    assert _intake(store, queue, clock).atomic_chunk_size == BATCH_SLICE_JOBS


class EstimatingStore(InMemoryJobStore):
    """The memory engine stating that its usage counts are an estimate."""

    @property
    def capabilities(self) -> StoreCapabilities:
        return StoreCapabilities(usage_exact=False)


@pytest.mark.parametrize(
    ("store_class", "says"), [(InMemoryJobStore, "has 1"), (EstimatingStore, "has about 1")]
)
async def test_a_quota_refusal_says_whether_the_count_is_exact(store_class, says) -> None:
    clock = FakeClock()
    queue = InMemoryJobQueue(clock=clock)
    intake = _intake(store_class(queue=queue), queue, clock, TenantQuotas(max_backlog=1))
    request = SubmitRequest(task="generate", input={"prompt": "one"})
    await intake.submit(tenant_id="t1", request=request)

    with pytest.raises(BacklogQuotaExceededError, match=f"this tenant {says} unfinished"):
        await intake.submit(tenant_id="t1", request=request)
