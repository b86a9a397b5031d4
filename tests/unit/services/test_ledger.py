"""services.ledger: read, ask core, apply if unchanged; on a conflict, read and decide again."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ferryman.core import changes
from ferryman.core.changes import Change
from ferryman.core.errors import FailureClass, StateConflictError
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, Job, JobError, JobStatus
from ferryman.ports.store import JobStore
from ferryman.services.intake import SubmitRequest
from ferryman.services.ledger import MAX_CONFLICTS, JobLedger

T0 = 1_700_000_000.0
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, latency_ms=5)


class RacedStore:
    """A JobStore where another writer changes the job just before each of the next
    ``races`` applies of the ledger, and that counts the ledger's reads."""

    def __init__(self, inner: JobStore) -> None:
        self.inner = inner
        self.races = 0
        self.rival: Callable[[Job], Change | None] = lambda job: changes.note(
            job, EventKind.DUPLICATE_DELIVERY, now=T0, detail={}
        )
        self.applies = 0
        self.gets = 0

    async def apply(self, change: Change) -> bool:
        self.applies += 1
        if self.races > 0:
            self.races -= 1
            current = await self.inner.get(change.job_id)
            assert current is not None
            rival = self.rival(current)
            if rival is not None:
                assert await self.inner.apply(rival)
        return await self.inner.apply(change)

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        self.gets += 1
        return await self.inner.get(job_id, tenant_id=tenant_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def world(make_world):
    return make_world()


@pytest.fixture
def store(world) -> RacedStore:
    return RacedStore(world.store.store)


async def _queued(world) -> Job:
    return await world.submit("hello")


async def _owned(ledger: JobLedger, world) -> Job:
    job = await _queued(world)
    claimed = await ledger.claim(
        job.job_id,
        attempt_id="att_1",
        worker_id="w1",
        now=T0,
        lease_until=T0 + 60,
        max_deliveries_without_outcome=10,
    )
    assert claimed.claimed
    return claimed.job


async def test_a_change_that_lost_a_race_is_decided_again_on_the_job_as_it_now_is(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    # A client's cancel lands between the worker's read and its publish: the publish
    # is recomputed from the job as it now is, and the cancel wins.
    store.races = 1
    store.rival = lambda current: changes.request_cancel(current, now=T0 + 1)

    after = await ledger.succeed(
        job.job_id, attempt_id="att_1", now=T0 + 2, result_ref="ref", report=SUCCEEDED, known=job
    )

    assert after is not None
    assert after.status is JobStatus.CANCELLED
    assert await ledger.get(job.job_id) == after
    kinds = [e.kind for e in await store.events(job.job_id)]
    assert kinds[-2:] == [EventKind.CANCEL_REQUESTED, EventKind.CANCELLED]
    assert EventKind.SUCCEEDED not in kinds


async def test_a_job_that_keeps_changing_is_given_up_on_after_a_bounded_number_of_tries(
    store, world
):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    store.races = MAX_CONFLICTS
    store.applies = 0

    with pytest.raises(StateConflictError):
        await ledger.renew_lease(job.job_id, attempt_id="att_1", now=T0 + 1, lease_until=T0 + 90)

    assert store.applies == MAX_CONFLICTS
    assert (await ledger.get(job.job_id)).lease_until == T0 + 60


async def test_one_conflict_short_of_the_bound_still_lands(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    store.races = MAX_CONFLICTS - 1

    status = await ledger.renew_lease(
        job.job_id, attempt_id="att_1", now=T0 + 1, lease_until=T0 + 90
    )

    assert status.held is True
    assert (await ledger.get(job.job_id)).lease_until == T0 + 90


async def test_a_change_to_a_job_the_caller_holds_costs_no_read(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    store.gets = 0

    await ledger.renew_lease(
        job.job_id, attempt_id="att_1", now=T0 + 1, lease_until=T0 + 90, known=job
    )
    assert store.gets == 0
    await ledger.renew_lease(job.job_id, attempt_id="att_1", now=T0 + 2, lease_until=T0 + 91)
    assert store.gets == 1


@pytest.mark.parametrize("verb", ["succeed", "schedule_retry", "fail", "release", "claim"])
async def test_every_verb_of_the_owner_uses_the_job_the_caller_holds(store, world, verb):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    if verb == "claim":
        job = await _queued(world)
    store.gets = 0
    error = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="m")
    calls = {
        "succeed": lambda: ledger.succeed(
            job.job_id, attempt_id="att_1", now=T0, result_ref="r", report=SUCCEEDED, known=job
        ),
        "schedule_retry": lambda: ledger.schedule_retry(
            job.job_id,
            attempt_id="att_1",
            now=T0,
            not_before=T0 + 1,
            error=error,
            report=SUCCEEDED,
            known=job,
        ),
        "fail": lambda: ledger.fail(
            job.job_id, attempt_id="att_1", now=T0, error=error, report=SUCCEEDED, known=job
        ),
        "release": lambda: ledger.release(
            job.job_id, attempt_id="att_1", now=T0, report=SUCCEEDED, known=job
        ),
        "claim": lambda: ledger.claim(
            job.job_id,
            attempt_id="att_2",
            worker_id="w2",
            now=T0,
            lease_until=T0 + 60,
            max_deliveries_without_outcome=10,
            known=job,
        ),
    }

    assert await calls[verb]() is not None
    assert store.gets == 0


async def test_a_lost_lease_reports_the_job_as_found_and_its_cancel_request(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)
    await ledger.request_cancel(job.job_id, tenant_id=job.tenant_id, now=T0 + 1)
    taken = await ledger.claim(
        job.job_id,
        attempt_id="att_2",
        worker_id="w2",
        now=T0 + 61,
        lease_until=T0 + 121,
        max_deliveries_without_outcome=10,
    )

    status = await ledger.renew_lease(
        job.job_id, attempt_id="att_1", now=T0 + 62, lease_until=T0 + 122
    )

    assert (status.held, status.cancel_requested) == (False, True)
    assert status.job == taken.job


async def test_a_renewal_reports_the_job_it_left(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)

    status = await ledger.renew_lease(
        job.job_id, attempt_id="att_1", now=T0 + 1, lease_until=T0 + 90
    )

    assert (status.held, status.cancel_requested) == (True, False)
    assert status.job == await ledger.get(job.job_id)


async def test_a_renewal_for_a_job_that_is_gone_holds_nothing(store):
    status = await JobLedger(store).renew_lease(
        "gen_gone", attempt_id="att_1", now=T0, lease_until=T0 + 60
    )
    assert (status.held, status.cancel_requested, status.job) == (False, False, None)


async def test_a_claim_that_dead_letters_says_so_and_names_the_abandoned_attempt(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)

    result = await ledger.claim(
        job.job_id,
        attempt_id="att_2",
        worker_id="w2",
        now=T0 + 61,
        lease_until=T0 + 121,
        max_deliveries_without_outcome=1,
    )

    assert (result.claimed, result.dead_lettered) == (False, True)
    assert result.abandoned_attempt_id == "att_1"
    assert result.job.status is JobStatus.FAILED
    assert result.job == await ledger.get(job.job_id)


async def test_a_claim_of_a_busy_job_changes_nothing_and_says_so(store, world):
    ledger = JobLedger(store)
    job = await _owned(ledger, world)

    result = await ledger.claim(
        job.job_id,
        attempt_id="att_2",
        worker_id="w2",
        now=T0 + 1,
        lease_until=T0 + 61,
        max_deliveries_without_outcome=10,
    )

    assert (result.claimed, result.dead_lettered, result.abandoned_attempt_id) == (
        False,
        False,
        None,
    )
    assert result.job == job == await ledger.get(job.job_id)


def _counted_reads(port: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    get = port.get

    async def counted(job_id: str, **kwargs: Any) -> Job | None:
        reads.append(job_id)
        return await get(job_id, **kwargs)

    monkeypatch.setattr(port, "get", counted)
    return reads


async def _submit(world) -> Job:
    submission = await world.intake.submit(
        tenant_id="t1", request=SubmitRequest(task="generate", input={"prompt": "hello"})
    )
    return submission.job


async def test_intake_marks_a_job_dispatched_as_it_created_it_without_reading_it(
    make_world, monkeypatch
):
    world = make_world(outbox=True)  # an engine that cannot enqueue with the job
    reads = _counted_reads(world.store.store, monkeypatch)

    job = await _submit(world)

    assert reads == []
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds == [EventKind.ACCEPTED, EventKind.DISPATCHED]


async def test_a_job_that_moved_before_its_mark_is_read_again_and_marked(make_world, monkeypatch):
    world = make_world(outbox=True)
    port = world.store.store
    reads = _counted_reads(port, monkeypatch)
    apply = port.apply

    async def rival_first(change: Change) -> bool:
        if any(e.kind is EventKind.DISPATCHED for e in change.events) and not reads:
            current = await port.get(change.job_id)  # counted: leave room for it below
            assert current is not None
            note = changes.note(current, EventKind.DUPLICATE_DELIVERY, now=T0, detail={})
            assert note is not None and await apply(note)
        return await apply(change)

    monkeypatch.setattr(port, "apply", rival_first)

    job = await _submit(world)

    assert reads == [job.job_id, job.job_id]  # the rival's read, then the ledger's
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds == [EventKind.ACCEPTED, EventKind.DUPLICATE_DELIVERY, EventKind.DISPATCHED]
