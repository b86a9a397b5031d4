"""What every engine stores for completion webhooks (ports/store.py, ports/webhooks.py).

The outbox is four fields of the job, written by the change that finishes it
(core/changes.py), so the notification is owed exactly when the outcome is stored:
each way a job can finish is tried here, through the write each engine uses for it.
A finished job then takes the dispatcher's changes (a claim of its notification, the
attempts' outcomes and their WEBHOOK_* events) under the usual revision check, without
moving its tenant's usage; ``webhooks_due`` finds what is due, earliest first; purge
keeps a job while its notification is owed; each tenant's signing secrets are kept.
"""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core import changes
from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus
from ferryman.core.results import result_key
from ferryman.ports.results import StagesResults
from ferryman.ports.store import AppliesMany, TenantUsage
from ferryman.ports.webhooks import StoredSecret

pytestmark = pytest.mark.timeout(30)

URL = "https://hooks.example.com/ferryman"
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
DEAD = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="redriven")


def _outbox(job):
    return (job.webhook_url, job.webhook_due_at, job.webhook_attempts, job.webhook_event_seq)


async def _apply_many(engine, batch):
    if isinstance(engine.port, AppliesMany):
        return await engine.port.apply_many(batch)
    return list(await asyncio.gather(*(engine.port.apply(change) for change in batch)))


async def _assert_owed_since_its_terminal_event(engine, job_id, *, status, kind=None):
    """The job is finished and owes one notification, due when it finished, about its
    terminal event (the last one it has)."""
    job = await engine.store.get(job_id)
    assert job.status is status
    terminal = (await engine.store.events(job_id))[-1]
    assert terminal.kind == (kind or str(status))
    assert _outbox(job) == (URL, job.completed_at, 0, terminal.seq)
    assert job.webhook_event_seq == job.event_seq
    return job


async def _succeeded(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    claimed = await engine.claim(job.job_id)
    done = await engine.store.succeed(
        job.job_id,
        attempt_id=claimed.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
    )
    assert done is not None
    return done


# --- the fields -------------------------------------------------------------------------


async def test_the_webhook_fields_round_trip_through_create_and_reads(engine, job_factory):
    one = job_factory(webhook_url=URL, idempotency_key="k-one")  # the keyed insert
    plain = job_factory()
    await engine.accept(one)
    await engine.accept(plain)
    outcomes = await engine.store.create_many(
        [job_factory(webhook_url=URL + "/batch"), job_factory()],
        idempotency_expires_at=engine.now() + 60,
        now=engine.now(),
    )
    batch = [outcome.job for outcome in outcomes]

    stored = await engine.store.get_many([one.job_id, plain.job_id] + [j.job_id for j in batch])
    assert _outbox(stored[one.job_id]) == (URL, None, 0, 0)
    assert _outbox(stored[plain.job_id]) == (None, None, 0, 0)
    assert _outbox(stored[batch[0].job_id]) == (URL + "/batch", None, 0, 0)
    assert _outbox(stored[batch[1].job_id]) == (None, None, 0, 0)
    for job in stored.values():
        assert await engine.store.get(job.job_id) == job


async def test_a_job_without_a_url_owes_nothing_when_it_finishes(engine, job_factory):
    done = await _succeeded(engine, job_factory)
    assert _outbox(await engine.store.get(done.job_id)) == (None, None, 0, 0)


# --- the change that finishes a job writes the outbox -------------------------------------


@pytest.mark.parametrize("path", ["apply", "apply_and_ack", "apply_with_result"])
async def test_a_publish_owes_its_notification_in_the_same_write(engine, job_factory, path):
    job = job_factory(webhook_url=URL)
    await engine.accept(job)
    [delivery] = await engine.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    claimed = (await engine.claim(job.job_id)).job
    ack, result, ref = None, None, "r"
    # An engine without the path has nothing to test here; which engines have each is
    # pinned elsewhere (test_ack_with_outcome.py, test_harness.py's CAPABILITIES), so
    # a skip here cannot stand in for a capability an engine lost.
    if path == "apply_and_ack":
        if not engine.store.acks_with_outcome:
            pytest.skip(f"{engine.name}: a publish does not carry its ack")
        ack = delivery.receipt
    if path == "apply_with_result":
        if not isinstance(engine.results, StagesResults):
            pytest.skip(f"{engine.name}: results are put before the publish")
        key = result_key(job.tenant_id, job.job_id, claimed.attempt_id)
        result = engine.results.staged(key, b'{"text":"hi"}')
        # A small result is always taken where results are staged: not a skip.
        assert engine.store.takes_result(result)
        ref = result.ref
    engine.advance(3)

    published = await engine.store.succeed(
        job.job_id,
        attempt_id=claimed.attempt_id,
        now=engine.now(),
        result_ref=ref,
        report=SUCCEEDED,
        known=claimed,
        ack=ack,
        result=result,
    )

    assert published is not None
    stored = await _assert_owed_since_its_terminal_event(
        engine, job.job_id, status=JobStatus.SUCCEEDED
    )
    assert stored == published
    assert stored.webhook_due_at == engine.now()


async def test_a_cancel_of_a_queued_job_owes_its_notification(engine, job_factory):
    job = job_factory(webhook_url=URL)
    await engine.accept(job)

    await engine.store.request_cancel(job.job_id, tenant_id=job.tenant_id, now=engine.now())

    await _assert_owed_since_its_terminal_event(engine, job.job_id, status=JobStatus.CANCELLED)


async def test_an_unowned_failure_owes_its_notification(engine, job_factory):
    job = job_factory(webhook_url=URL)
    await engine.accept(job)

    failed = await engine.store.fail_unowned(
        job.job_id, now=engine.now(), error=DEAD, kind=EventKind.DEAD_LETTERED, detail={}
    )

    assert failed is not None
    await _assert_owed_since_its_terminal_event(
        engine, job.job_id, status=JobStatus.FAILED, kind=EventKind.DEAD_LETTERED
    )


async def test_a_claim_that_dead_letters_a_crash_loop_owes_its_notification(engine, job_factory):
    """Through ``claim`` alone and through a batch of claims (AppliesMany where the
    engine has it): both write the outbox with the failure."""
    crashing = []
    for _ in range(3):
        job = job_factory(webhook_url=URL)
        await engine.accept(job)
        await engine.claim(job.job_id)
        crashing.append(job.job_id)
    engine.advance(61)  # every lease ran out: the next claim is a delivery without outcome

    alone = await engine.store.claim(
        crashing[0],
        attempt_id="att_never",
        worker_id="w2",
        now=engine.now(),
        lease_until=engine.now() + 60,
        max_deliveries_without_outcome=1,
    )
    batch = [
        changes.claim(
            await engine.store.get(job_id),
            attempt_id=f"att_never_{i}",
            worker_id="w2",
            now=engine.now(),
            lease_until=engine.now() + 60,
            max_deliveries_without_outcome=1,
        )
        for i, job_id in enumerate(crashing[1:])
    ]
    assert await _apply_many(engine, batch) == [True, True]

    assert not alone.claimed
    for job_id in crashing:
        await _assert_owed_since_its_terminal_event(
            engine, job_id, status=JobStatus.FAILED, kind=EventKind.DEAD_LETTERED
        )


# --- the dispatcher's changes to a finished job --------------------------------------------


async def test_webhook_claims_and_attempts_apply_under_the_revision_check(engine, job_factory):
    done = await _succeeded(engine, job_factory, webhook_url=URL)
    other = await _succeeded(engine, job_factory, webhook_url=URL)
    usage = await engine.store.usage("t1")
    engine.advance(1)

    claim = changes.claim_webhook(done, now=engine.now(), lease_until=engine.now() + 30)
    assert await engine.port.apply(claim)
    stored = await engine.store.get(done.job_id)
    assert stored == claim.after
    assert _outbox(stored) == (URL, engine.now() + 30, 1, done.webhook_event_seq)
    assert (stored.status, stored.completed_at) == (JobStatus.SUCCEEDED, done.completed_at)
    # Computed from the job as it was before that claim: another dispatcher's, too late.
    late = changes.claim_webhook(done, now=engine.now(), lease_until=engine.now() + 60)
    assert not await engine.port.apply(late)
    assert await engine.store.get(done.job_id) == claim.after

    failed = changes.webhook_attempted(
        claim.after,
        now=engine.now(),
        event_seq=done.webhook_event_seq,
        attempt_no=1,
        delivered=False,
        next_due_at=engine.now() + 5,
        detail={"status_code": 500, "duration_ms": 12},
    )
    assert failed is not None
    assert await engine.port.apply(failed)
    stored = await engine.store.get(done.job_id)
    assert stored == failed.after
    assert _outbox(stored) == (URL, engine.now() + 5, 1, done.webhook_event_seq)
    event = (await engine.store.events(done.job_id))[-1]
    assert (event.kind, event.detail) == (
        EventKind.WEBHOOK_FAILED,
        {"status_code": 500, "duration_ms": 12},
    )
    assert event.seq == stored.event_seq == done.event_seq + 1
    # The same report again, from the job before it was written: refused, not doubled.
    assert not await engine.port.apply(
        changes.webhook_attempted(
            claim.after,
            now=engine.now(),
            event_seq=done.webhook_event_seq,
            attempt_no=1,
            delivered=True,
            next_due_at=None,
            detail={},
        )
    )
    assert len(await engine.store.events(done.job_id)) == event.seq

    # The next attempt, with another job's claim in one batch where the engine has it.
    engine.advance(5)
    again = changes.claim_webhook(stored, now=engine.now(), lease_until=engine.now() + 30)
    other_claim = changes.claim_webhook(other, now=engine.now(), lease_until=engine.now() + 30)
    assert await _apply_many(engine, [again, other_claim]) == [True, True]
    assert await engine.store.get(other.job_id) == other_claim.after
    delivered = changes.webhook_attempted(
        again.after,
        now=engine.now(),
        event_seq=done.webhook_event_seq,
        attempt_no=2,
        delivered=True,
        next_due_at=None,
        detail={"status_code": 204, "duration_ms": 3},
    )
    assert delivered is not None
    assert await engine.port.apply(delivered)
    stored = await engine.store.get(done.job_id)
    assert _outbox(stored) == (URL, None, 2, done.webhook_event_seq)
    kinds = [e.kind for e in await engine.store.events(done.job_id)][-3:]
    assert kinds == [EventKind.SUCCEEDED, EventKind.WEBHOOK_FAILED, EventKind.WEBHOOK_DELIVERED]
    # Finished jobs stay finished: the tenant's counts never moved.
    assert await engine.store.usage("t1") == usage


# --- the dispatcher's scan ----------------------------------------------------------------


async def test_webhooks_due_finds_the_due_ones_earliest_first_within_the_limit(engine, job_factory):
    first = await _succeeded(engine, job_factory, webhook_url=URL)
    engine.advance(1)
    second = await _succeeded(engine, job_factory, webhook_url=URL)
    engine.advance(1)
    await _succeeded(engine, job_factory)  # no url: owes nothing
    taken = await _succeeded(engine, job_factory, webhook_url=URL)
    claim = changes.claim_webhook(taken, now=engine.now(), lease_until=engine.now() + 100)
    assert await engine.port.apply(claim)  # being delivered: due again only after its lease
    unfinished = job_factory(webhook_url=URL)
    await engine.accept(unfinished)

    due = await engine.store.webhooks_due(now=engine.now(), limit=10)

    assert [job.job_id for job in due] == [first.job_id, second.job_id]
    assert due == [await engine.store.get(first.job_id), await engine.store.get(second.job_id)]
    assert [j.job_id for j in await engine.store.webhooks_due(now=engine.now(), limit=1)] == [
        first.job_id
    ]
    assert await engine.store.webhooks_due(now=engine.now(), limit=0) == []
    earlier = await engine.store.webhooks_due(now=first.webhook_due_at, limit=10)
    assert [j.job_id for j in earlier] == [first.job_id]
    later = await engine.store.webhooks_due(now=engine.now() + 100, limit=10)
    assert [j.job_id for j in later] == [first.job_id, second.job_id, taken.job_id]


async def test_webhooks_due_leaves_out_the_tenants_it_is_told_to_skip(engine, job_factory):
    busy = await _succeeded(engine, job_factory, webhook_url=URL, tenant_id="busy")
    engine.advance(1)
    other = await _succeeded(engine, job_factory, webhook_url=URL, tenant_id="other")

    due = await engine.store.webhooks_due(now=engine.now(), limit=1, skip_tenants=["busy"])

    # The busy tenant's earlier notification does not take the one place.
    assert [job.job_id for job in due] == [other.job_id]
    both = await engine.store.webhooks_due(now=engine.now(), limit=10, skip_tenants=[])
    assert [job.job_id for job in both] == [busy.job_id, other.job_id]
    assert (
        await engine.store.webhooks_due(now=engine.now(), limit=10, skip_tenants=["busy", "other"])
        == []
    )


# --- retention ------------------------------------------------------------------------------


async def test_purge_keeps_a_job_while_its_notification_is_owed(engine, job_factory):
    owed = await _succeeded(engine, job_factory, webhook_url=URL)
    given_up = await _succeeded(engine, job_factory, webhook_url=URL)
    plain = await _succeeded(engine, job_factory)
    claim = changes.claim_webhook(given_up, now=engine.now(), lease_until=engine.now() + 30)
    assert await engine.port.apply(claim)
    last = changes.webhook_attempted(
        claim.after,
        now=engine.now(),
        event_seq=given_up.webhook_event_seq,
        attempt_no=1,
        delivered=False,
        next_due_at=None,
        detail={"status_code": 410, "duration_ms": 4},
    )
    assert last is not None
    assert await engine.port.apply(last)
    engine.advance(100)

    purged = await engine.store.purge_finished(completed_before=engine.now(), limit=10)

    assert sorted(purged) == sorted([given_up.job_id, plain.job_id])
    assert await engine.store.get(owed.job_id) == owed
    assert (await engine.store.usage("t1")).stored == 1

    claim = changes.claim_webhook(owed, now=engine.now(), lease_until=engine.now() + 30)
    assert await engine.port.apply(claim)
    delivered = changes.webhook_attempted(
        claim.after,
        now=engine.now(),
        event_seq=owed.webhook_event_seq,
        attempt_no=1,
        delivered=True,
        next_due_at=None,
        detail={"status_code": 200, "duration_ms": 4},
    )
    assert delivered is not None
    assert await engine.port.apply(delivered)
    assert await engine.store.purge_finished(completed_before=engine.now(), limit=10) == [
        owed.job_id
    ]
    assert await engine.store.get(owed.job_id) is None
    assert await engine.store.usage("t1") == TenantUsage(unfinished=0, stored=0)


# --- signing secrets ------------------------------------------------------------------------


async def test_signing_secrets_are_kept_per_tenant_and_replaced_on_put(engine):
    secrets = engine.webhook_secrets
    assert await secrets.get_secret("t1") is None

    first = StoredSecret(tenant_id="t1", current="sealed:one", created_at=100.5)
    await secrets.put_secret(first)
    assert await secrets.get_secret("t1") == first
    assert await secrets.get_secret("t2") is None

    rotated = StoredSecret(
        tenant_id="t1",
        current="sealed:two",
        created_at=200.25,
        previous="sealed:one",
        previous_until=200.25 + 86_400,
    )
    await secrets.put_secret(rotated)
    assert await secrets.get_secret("t1") == rotated

    # A rotation's previous secret is dropped by the next put that names none.
    third = StoredSecret(tenant_id="t1", current="sealed:three", created_at=300.0)
    await secrets.put_secret(third)
    assert await secrets.get_secret("t1") == third

    other = StoredSecret(tenant_id="t2", current="sealed:x", created_at=1.0)
    await secrets.put_secret(other)
    assert await secrets.get_secret("t2") == other
    assert await secrets.get_secret("t1") == third
