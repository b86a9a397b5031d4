"""Claims asked for together are written together (services/claims.py, JobLedger.claim_many),
each still decided by core's rule and conditional on its own job's revision."""

from __future__ import annotations

import asyncio
from typing import Any

from ferryman.core import changes
from ferryman.core.changes import Change
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import EventKind, Job, JobStatus
from ferryman.ports.store import JobStore
from ferryman.services.claims import ClaimBatcher
from ferryman.services.ledger import ClaimRequest, ClaimResult, JobLedger

T0 = 1_700_000_000.0


class CountingStore:
    """The world's JobStore, counting single and batched applies."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.applies = 0
        self.batches: list[int] = []

    async def apply(self, change: Change) -> bool:
        self.applies += 1
        return bool(await self.inner.apply(change))

    async def apply_many(self, batch: list[Change]) -> list[bool]:
        self.batches.append(len(batch))
        return list(await self.inner.apply_many(batch))

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def _request(job: Job, n: int) -> ClaimRequest:
    return ClaimRequest(
        known=job,
        attempt_id=f"att_{n}",
        worker_id="w1",
        now=T0,
        lease_until=T0 + 60,
        max_deliveries_without_outcome=10,
    )


async def test_claims_asked_in_one_turn_are_written_in_one_batch(make_world) -> None:
    world = make_world()
    store = CountingStore(world.store.store)
    batcher = ClaimBatcher(JobLedger(store))  # type: ignore[arg-type]
    jobs = [await world.submit(f"job {i}") for i in range(5)]

    results = await asyncio.gather(*(batcher.claim(_request(j, i)) for i, j in enumerate(jobs)))

    assert store.batches == [5]
    assert store.applies == 0
    for i, (job, result) in enumerate(zip(jobs, results, strict=True)):
        assert result.claimed
        assert result.job.attempt_id == f"att_{i}"
        stored = await world.job(job.job_id)
        assert (stored.status, stored.attempt_id, stored.fence) == (
            JobStatus.PROCESSING,
            f"att_{i}",
            1,
        )
        assert [a.attempt_id for a in await world.store.attempts(job.job_id)] == [f"att_{i}"]


async def test_a_claim_asked_alone_is_an_ordinary_claim(make_world) -> None:
    world = make_world()
    store = CountingStore(world.store.store)
    batcher = ClaimBatcher(JobLedger(store))  # type: ignore[arg-type]
    job = await world.submit("alone")

    result = await batcher.claim(_request(job, 1))

    assert result.claimed
    assert (store.batches, store.applies) == ([], 1)


async def test_a_job_that_moved_is_read_again_and_the_others_are_unaffected(make_world) -> None:
    world = make_world()
    ledger = JobLedger(world.store.store)
    moved, steady = await world.submit("moved"), await world.submit("steady")
    # Another writer changes the first job after the worker read it.
    port: JobStore = world.store.store
    assert await port.apply(changes.note(moved, EventKind.DUPLICATE_DELIVERY, now=T0, detail={}))

    first, second = await ledger.claim_many([_request(moved, 1), _request(steady, 2)])

    assert first.claimed and second.claimed
    assert first.job.revision == moved.revision + 2  # the note, then the claim
    kinds = [e.kind for e in await world.store.events(moved.job_id)]
    assert kinds.count(EventKind.CLAIMED) == 1


async def test_a_job_already_owned_is_not_claimed_again(make_world) -> None:
    world = make_world()
    ledger = JobLedger(world.store.store)
    job = await world.submit("owned")
    [taken] = await ledger.claim_many([_request(job, 1)])
    owned = await world.job(job.job_id)

    again, fresh = await ledger.claim_many([_request(owned, 2), _request(owned, 3)])

    assert taken.claimed
    assert not again.claimed and not fresh.claimed
    assert (await world.job(job.job_id)).attempt_id == "att_1"
    assert len(await world.store.attempts(job.job_id)) == 1


async def test_two_deliveries_of_one_job_in_a_batch_make_one_attempt(make_world) -> None:
    world = make_world()
    batcher = ClaimBatcher(world.store)
    job = await world.submit("sent twice")

    first, second = await asyncio.gather(
        batcher.claim(_request(job, 1)), batcher.claim(_request(job, 2))
    )

    assert [first.claimed, second.claimed] == [True, False]
    assert second.job.attempt_id == "att_1"  # found owned by the first: not invoked
    assert [a.attempt_id for a in await world.store.attempts(job.job_id)] == ["att_1"]


class OneByOneStore:
    """A JobStore without apply_many (the PostgreSQL shape) whose apply fails for one job."""

    def __init__(self, inner: Any, failing: str) -> None:
        self.inner = inner
        self.failing = failing

    async def apply(self, change: Change) -> bool:
        if change.job_id == self.failing:
            raise StoreUnavailableError("that row's write failed")
        return bool(await self.inner.apply(change))

    def __getattr__(self, name: str) -> Any:
        if name == "apply_many":
            raise AttributeError(name)
        return getattr(self.inner, name)


async def test_one_claim_failing_leaves_the_others_claimed_and_told(make_world) -> None:
    world = make_world()
    bad, good = await world.submit("bad"), await world.submit("good")
    batcher = ClaimBatcher(JobLedger(OneByOneStore(world.store.store, bad.job_id)))  # type: ignore[arg-type]

    failed, claimed = await asyncio.gather(
        batcher.claim(_request(bad, 1)), batcher.claim(_request(good, 2)), return_exceptions=True
    )

    assert isinstance(failed, StoreUnavailableError)
    assert isinstance(claimed, ClaimResult) and claimed.claimed
    assert (await world.job(good.job_id)).attempt_id == "att_2"
    assert (await world.job(bad.job_id)).status is JobStatus.QUEUED


async def test_a_claim_whose_caller_was_cancelled_while_it_waited_is_not_written(
    make_world,
) -> None:
    # A worker stopping cancels its deliveries: a job claimed for nobody would wait for
    # its lease to end and count a delivery without an outcome.
    world = make_world()
    store = CountingStore(world.store.store)
    batcher = ClaimBatcher(JobLedger(store))  # type: ignore[arg-type]
    kept, dropped = await world.submit("kept"), await world.submit("dropped")

    kept_claim = asyncio.ensure_future(batcher.claim(_request(kept, 1)))
    dropped_claim = asyncio.ensure_future(batcher.claim(_request(dropped, 2)))
    await asyncio.sleep(0)  # both asked, the batch not yet written
    dropped_claim.cancel()

    assert (await kept_claim).claimed
    assert dropped_claim.cancelled()
    assert (await world.job(dropped.job_id)).status is JobStatus.QUEUED
    assert await world.store.attempts(dropped.job_id) == []
