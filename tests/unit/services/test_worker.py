"""The worker's ten steps on in-memory adapters: one publication, every attempt explained."""

from __future__ import annotations

import asyncio
import json

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.observability import metrics
from ferryman.ports.control import Switch
from ferryman.ports.queue import QueueMessage
from ferryman.services.verdicts import Verdict


async def _receive_one(world):
    deliveries = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    assert len(deliveries) == 1
    return deliveries[0]


async def test_happy_path_publishes_one_result_and_acks(make_world) -> None:
    world = make_world()
    job = await world.submit("hi there")
    worker = world.worker()
    assert await worker.handle(await _receive_one(world)) is Verdict.SUCCEEDED
    view = await world.jobs.get("t1", job.job_id)
    assert view.job.status is JobStatus.SUCCEEDED
    assert view.result == {"text": json.loads(json.dumps(view.result))["text"]}
    assert "hi there" in view.result["text"]
    attempts = await world.store.attempts(job.job_id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.SUCCEEDED]
    assert attempts[0].input_tokens == 2
    assert view.job.result_ref is not None and attempts[0].attempt_id in view.job.result_ref
    stats = await world.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 0)
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds[-2:] == [EventKind.CLAIMED, EventKind.SUCCEEDED]


async def test_throttle_schedules_a_retry_on_the_same_message(make_world) -> None:
    world = make_world()
    job = await world.submit("x", simulate={"script": ["throttle", "ok"], "retry_after_seconds": 7})
    worker = world.worker()
    assert await worker.handle(await _receive_one(world)) is Verdict.RETRY_SCHEDULED
    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.RETRY_SCHEDULED
    assert stored.error is not None and stored.error.failure_class is FailureClass.THROTTLED
    assert stored.not_before is not None and stored.not_before - world.clock.now() >= 7
    stats = await world.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 1)  # hidden, not deleted (I5)
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=60) == []
    world.clock.advance(stored.not_before - world.clock.now() + 0.01)
    assert await worker.handle(await _receive_one(world)) is Verdict.SUCCEEDED
    attempts = await world.store.attempts(job.job_id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.RETRY, AttemptOutcome.SUCCEEDED]
    assert attempts[0].failure_class is FailureClass.THROTTLED


async def _drive(world, worker, *, rounds: int = 20) -> None:
    """Deliver until the job is done, moving the fake clock over each backoff."""
    for _ in range(rounds):
        deliveries = await world.queue.receive(max_messages=10, visibility_timeout_seconds=60)
        if not deliveries:
            world.clock.advance(400)
            deliveries = await world.queue.receive(max_messages=10, visibility_timeout_seconds=60)
            if not deliveries:
                return
        for delivery in deliveries:
            await worker.handle(delivery)


async def test_retryable_failures_are_bounded_by_max_attempts(make_world) -> None:
    world = make_world(retry=RetryPolicy(max_attempts=3, initial_interval_seconds=1))
    job = await world.submit("x", simulate={"script": ["server_error"]})
    await _drive(world, world.worker())
    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.FAILED
    assert stored.error is not None
    assert (stored.error.code, stored.error.failure_class) == (
        "attempts_exhausted",
        FailureClass.TRANSIENT,
    )
    assert world.provider.invocations == 3
    outcomes = [a.outcome for a in await world.store.attempts(job.job_id)]
    assert outcomes == [AttemptOutcome.RETRY, AttemptOutcome.RETRY, AttemptOutcome.FAILED]
    assert (await world.queue.stats()).in_flight == 0


async def test_invalid_output_has_its_own_smaller_budget(make_world) -> None:
    world = make_world(retry=RetryPolicy(max_attempts=5, max_invalid_output_attempts=2))
    job = await world.submit("x", simulate={"script": ["invalid_schema"]}, task="classify_ticket")
    await _drive(world, world.worker())
    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.FAILED
    assert stored.error is not None and stored.error.code == "invalid_output_exhausted"
    assert world.provider.invocations == 2


async def test_malformed_then_ok_succeeds_with_a_valid_classification(make_world) -> None:
    world = make_world()
    job = await world.submit(
        "refund my invoice", simulate={"script": ["malformed", "ok"]}, task="classify_ticket"
    )
    await _drive(world, world.worker())
    view = await world.jobs.get("t1", job.job_id)
    assert view.job.status is JobStatus.SUCCEEDED
    assert view.result is not None
    assert view.result["category"] in {"billing", "technical", "account"}
    assert view.result["priority"] in {"low", "medium", "high"}


@pytest.mark.parametrize(
    ("entry", "code", "klass"),
    [
        ("refuse", "safety_rejected", FailureClass.SAFETY_REJECTED),
        ("bad_request", "bad_request", FailureClass.INVALID_REQUEST),
    ],
)
async def test_non_retryable_failures_fail_at_once(make_world, entry, code, klass) -> None:
    world = make_world()
    job = await world.submit("x", simulate={"script": [entry, "ok"]})
    assert await world.worker().handle(await _receive_one(world)) is Verdict.FAILED
    stored = await world.job(job.job_id)
    assert stored.error is not None
    assert (stored.status, stored.error.code, stored.error.failure_class) == (
        JobStatus.FAILED,
        code,
        klass,
    )
    assert world.provider.invocations == 1
    assert (await world.queue.stats()).in_flight == 0


async def test_timeout_is_transient_and_retried(make_world) -> None:
    world = make_world()
    job = await world.submit("x", simulate={"script": ["timeout", "ok"]})
    await _drive(world, world.worker())
    attempts = await world.store.attempts(job.job_id)
    assert [(a.outcome, a.failure_class) for a in attempts] == [
        (AttemptOutcome.RETRY, FailureClass.TRANSIENT),
        (AttemptOutcome.SUCCEEDED, None),
    ]


async def test_duplicate_delivery_of_a_finished_job_is_acked_without_invoking(make_world) -> None:
    world = make_world()
    job = await world.submit("x")
    worker = world.worker()
    await worker.handle(await _receive_one(world))
    await world.queue.send(QueueMessage.for_job(job))
    assert await worker.handle(await _receive_one(world)) is Verdict.DUPLICATE
    assert world.provider.invocations == 1
    assert len(await world.store.attempts(job.job_id)) == 1
    assert (await world.queue.stats()).visible == 0


async def test_a_crashed_attempt_is_taken_over_and_recorded_abandoned(make_world) -> None:
    world = make_world()
    job = await world.submit("x")
    crashed = new_attempt_id()
    now = world.clock.now()
    await world.store.claim(
        job.job_id,
        attempt_id=crashed,
        worker_id="dead",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=world.max_receives,
    )
    world.clock.advance(61)
    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED
    attempts = await world.store.attempts(job.job_id)
    assert [(a.attempt_id == crashed, a.outcome) for a in attempts] == [
        (True, AttemptOutcome.ABANDONED),
        (False, AttemptOutcome.SUCCEEDED),
    ]
    assert (await world.job(job.job_id)).attempt_count == 2


async def test_a_live_owner_is_never_invoked_twice(make_world) -> None:
    world = make_world()
    job = await world.submit("x")
    now = world.clock.now()
    await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="other",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=world.max_receives,
    )
    assert await world.worker().handle(await _receive_one(world)) is Verdict.DEFERRED
    assert world.provider.invocations == 0
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=60) == []
    world.clock.advance(62)  # the message reappears just after the owner's lease would end
    assert len(await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)) == 1


async def test_unknown_payload_version_is_left_for_another_worker(make_world) -> None:
    world = make_world()
    job = await world.submit("x")
    delivery = await _receive_one(world)
    await world.queue.delete(delivery.receipt)
    await world.queue.send(QueueMessage(job_id=job.job_id, tenant_id="t1", payload_version=99))
    before = await world.job(job.job_id)
    events = await world.store.events(job.job_id)
    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=5)
    assert await world.worker().handle(delivery) is Verdict.DEFERRED
    # Rollback safety: nothing is claimed, invoked or recorded; the job is as it was.
    assert await world.job(job.job_id) == before
    assert await world.store.events(job.job_id) == events
    assert await world.store.attempts(job.job_id) == []
    assert world.provider.invocations == 0
    # The message is neither deleted nor failed: hidden for the worker's visibility
    # timeout (60 s here, not the 5 s it was received with), it comes back for a
    # worker that knows its layout.
    assert (await world.queue.stats()).in_flight == 1
    world.clock.advance(59)
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=60) == []
    world.clock.advance(2)
    again = await _receive_one(world)
    assert again.message.payload_version == 99


async def test_exhausted_job_fails_at_claim_without_invoking(make_world) -> None:
    world = make_world(retry=RetryPolicy(max_attempts=1))
    job = await world.submit("x", simulate={"script": ["server_error"]})
    assert await world.worker().handle(await _receive_one(world)) is Verdict.FAILED
    # A stray second message for the same job must not buy another invocation.
    assert world.provider.invocations == 1
    assert (await world.job(job.job_id)).error.code == "attempts_exhausted"


async def test_losing_the_lease_mid_call_discards_the_result(make_world) -> None:
    block = asyncio.Event()
    world = make_world(
        block=block,
        lease=LeasePolicy(
            lease_seconds=60, visibility_timeout_seconds=60, heartbeat_interval_seconds=0.01
        ),
    )
    job = await world.submit("x")
    worker = world.worker()
    handling = asyncio.create_task(worker.handle(await _receive_one(world)))
    await asyncio.wait_for(world.provider.started.wait(), 5)
    world.clock.advance(61)  # our lease expires while the call hangs; another worker claims
    now = world.clock.now()
    taken = await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="w9",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=world.max_receives,
    )
    assert taken.claimed
    assert await asyncio.wait_for(handling, 5) is Verdict.LEASE_LOST
    attempts = await world.store.attempts(job.job_id)
    assert attempts[0].outcome is AttemptOutcome.LEASE_LOST
    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.PROCESSING and stored.attempt_id == taken.job.attempt_id
    block.set()


async def test_cancel_while_processing_stops_the_call(make_world) -> None:
    block = asyncio.Event()
    world = make_world(
        block=block,
        lease=LeasePolicy(
            lease_seconds=60, visibility_timeout_seconds=60, heartbeat_interval_seconds=0.01
        ),
    )
    job = await world.submit("x")
    handling = asyncio.create_task(world.worker().handle(await _receive_one(world)))
    await asyncio.wait_for(world.provider.started.wait(), 5)
    requested = await world.jobs.cancel("t1", job.job_id)
    assert requested.status is JobStatus.PROCESSING and requested.cancel_requested
    assert await asyncio.wait_for(handling, 5) is Verdict.CANCELLED
    assert (await world.job(job.job_id)).status is JobStatus.CANCELLED
    assert [a.outcome for a in await world.store.attempts(job.job_id)] == [AttemptOutcome.CANCELLED]
    assert (await world.queue.stats()).in_flight == 0


async def test_shutdown_gives_unfinished_jobs_back_at_once(make_world) -> None:
    block = asyncio.Event()
    world = make_world(block=block)
    job = await world.submit("x")
    worker = world.worker(shutdown_grace_seconds=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    await asyncio.wait_for(world.provider.started.wait(), 5)
    stop.set()
    await asyncio.wait_for(running, 10)
    stored = await world.job(job.job_id)
    # It waits again, owned by nobody, its attempt closed once with a RELEASED event.
    assert (stored.status, stored.attempt_id, stored.lease_until) == (JobStatus.QUEUED, None, None)
    assert [a.outcome for a in await world.store.attempts(job.job_id)] == [AttemptOutcome.ABANDONED]
    block.set()
    # Visible now, claimable now: the next worker finishes it without waiting for a lease.
    world.provider.block = None
    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED


async def test_run_processes_work_and_stops(make_world) -> None:
    world = make_world()
    jobs = [await world.submit(f"p{i}") for i in range(20)]
    worker = world.worker(concurrency=4)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    for _ in range(500):
        done = [await world.job(j.job_id) for j in jobs]
        if all(j.status is JobStatus.SUCCEEDED for j in done):
            break
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(running, 10)
    finished = [await world.job(j.job_id) for j in jobs]
    assert all(j.status is JobStatus.SUCCEEDED for j in finished)
    assert world.provider.invocations == 20


async def test_paused_workers_receive_nothing(make_world) -> None:
    world = make_world()
    await world.operations.set_paused(Switch.WORKERS, True, actor="ops")
    job = await world.submit("x")
    stop = asyncio.Event()
    running = asyncio.create_task(world.worker().run(stop))
    await asyncio.sleep(0.1)
    stop.set()
    await asyncio.wait_for(running, 10)
    assert (await world.job(job.job_id)).status is JobStatus.QUEUED
    assert world.provider.invocations == 0


async def test_a_heartbeat_the_store_misses_does_not_kill_the_call(make_world) -> None:
    from ferryman.core.errors import StoreUnavailableError

    block = asyncio.Event()
    world = make_world(
        block=block,
        lease=LeasePolicy(
            lease_seconds=60, visibility_timeout_seconds=60, heartbeat_interval_seconds=0.01
        ),
    )
    job = await world.submit("x")
    real_renew = world.store.renew_lease
    beats: list[str] = []
    recovered = asyncio.Event()

    async def flaky_renew(*args, **kwargs):
        beats.append("beat")
        if len(beats) >= 4:
            recovered.set()
        if len(beats) <= 2:
            raise StoreUnavailableError("database is locked")
        return await real_renew(*args, **kwargs)

    world.store.renew_lease = flaky_renew  # type: ignore[method-assign]
    handling = asyncio.create_task(world.worker().handle(await _receive_one(world)))
    await asyncio.wait_for(world.provider.started.wait(), 5)
    await asyncio.wait_for(recovered.wait(), 5)  # two failed beats, then good ones
    block.set()
    assert await asyncio.wait_for(handling, 5) is Verdict.SUCCEEDED
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


async def test_a_briefly_unavailable_store_does_not_throw_a_paid_result_away(
    make_world, monkeypatch
) -> None:
    from ferryman.core.errors import ResultsUnavailableError, StoreUnavailableError
    from ferryman.services import delivery

    monkeypatch.setattr(delivery, "PERSIST_RETRY_DELAYS_SECONDS", (0, 0, 0))
    world = make_world()
    job = await world.submit("x")
    real_put, real_succeed = world.results.put, world.store.succeed
    failures = {"put": 2, "succeed": 1}

    async def flaky_put(key, data):
        if failures["put"]:
            failures["put"] -= 1
            raise ResultsUnavailableError("results: cannot write a segment: No space left")
        return await real_put(key, data)

    async def flaky_succeed(*args, **kwargs):
        if failures["succeed"]:
            failures["succeed"] -= 1
            raise StoreUnavailableError("database is locked")
        return await real_succeed(*args, **kwargs)

    world.results.put = flaky_put  # type: ignore[method-assign]
    world.store.succeed = flaky_succeed  # type: ignore[method-assign]
    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED
    assert world.provider.invocations == 1
    assert failures == {"put": 0, "succeed": 0}
    assert [a.outcome for a in await world.store.attempts(job.job_id)] == [AttemptOutcome.SUCCEEDED]


async def test_a_store_that_stays_down_leaves_the_job_to_be_taken_over(
    make_world, monkeypatch
) -> None:
    from ferryman.core.errors import StoreUnavailableError
    from ferryman.services import delivery

    monkeypatch.setattr(delivery, "PERSIST_RETRY_DELAYS_SECONDS", (0, 0, 0))
    world = make_world()
    job = await world.submit("x")

    async def down(*args, **kwargs):
        raise StoreUnavailableError("disk I/O error")

    world.store.succeed = down  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        await world.worker().handle(await _receive_one(world))
    # Nothing was acked: the message comes back and the next claim takes over.
    world.clock.advance(61)
    del world.store.succeed
    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED
    outcomes = [a.outcome for a in await world.store.attempts(job.job_id)]
    assert outcomes == [AttemptOutcome.ABANDONED, AttemptOutcome.SUCCEEDED]


# --- delivery decisions ---------------------------------------------------------------


async def _retry_scheduled(world, *, failures: int, delay: float):
    """A job whose attempt ``failures`` failed with a throttle; due in ``delay`` s."""
    job = await world.submit("x")
    now = world.clock.now()
    claim = await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="other",
        now=now,
        lease_until=now + 60,
        max_deliveries_without_outcome=world.max_receives,
    )
    for _ in range(failures):
        retried = await world.store.schedule_retry(
            job.job_id,
            attempt_id=claim.job.attempt_id,
            now=now,
            not_before=now + delay,
            error=JobError(code="throttled", failure_class=FailureClass.THROTTLED, message="m"),
            report=AttemptReport(outcome=AttemptOutcome.RETRY),
        )
        assert retried is not None
        if retried.failure_count < failures:
            world.clock.set(now + delay)
            now = world.clock.now()
            claim = await world.store.claim(
                job.job_id,
                attempt_id=new_attempt_id(),
                worker_id="other",
                now=now,
                lease_until=now + 60,
                max_deliveries_without_outcome=world.max_receives,
            )
    return await world.job(job.job_id)


async def test_a_delivery_before_the_retry_is_due_is_hidden_until_then(make_world) -> None:
    world = make_world()
    job = await _retry_scheduled(world, failures=1, delay=7)
    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=1)

    assert await world.worker().handle(delivery) is Verdict.DEFERRED

    assert world.provider.invocations == 0
    assert await world.job(job.job_id) == job
    world.clock.set(job.not_before - 0.01)
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=60) == []
    world.clock.set(job.not_before)
    # Due from not_before itself: the delivery then claims and runs.
    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED


async def test_a_job_whose_budget_is_already_spent_fails_at_claim_without_invoking(
    make_world,
) -> None:
    # Two model failures spent under a larger budget; this worker allows two attempts.
    world = make_world(retry=RetryPolicy(max_attempts=2))
    job = await _retry_scheduled(world, failures=2, delay=5)
    world.clock.set(job.not_before)

    assert await world.worker().handle(await _receive_one(world)) is Verdict.FAILED

    assert world.provider.invocations == 0
    failed = await world.job(job.job_id)
    assert failed.status is JobStatus.FAILED
    assert failed.error is not None
    # Named for the budget, classed as the last failure was.
    assert (failed.error.code, failed.error.failure_class) == (
        "attempts_exhausted",
        FailureClass.THROTTLED,
    )
    assert failed.error.message == "2 attempts failed"
    assert (await world.queue.stats()).in_flight == 0  # acked


async def test_a_budget_one_short_of_spent_still_runs(make_world) -> None:
    world = make_world(retry=RetryPolicy(max_attempts=3))
    job = await _retry_scheduled(world, failures=2, delay=5)
    world.clock.set(job.not_before)

    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED
    assert world.provider.invocations == 1


async def test_a_message_for_a_job_that_does_not_exist_is_acked(make_world) -> None:
    world = make_world()
    await world.queue.send(QueueMessage(job_id="gen_01NOSUCHJOB", tenant_id="t1"))

    assert await world.worker().handle(await _receive_one(world)) is Verdict.DUPLICATE

    assert world.provider.invocations == 0
    assert (await world.queue.stats()).visible == 0
    assert (await world.queue.stats()).in_flight == 0


async def test_a_duplicate_delivery_of_a_finished_job_leaves_its_history_ending_there(
    make_world, capsys
) -> None:
    world = make_world()
    job = await world.submit("x")
    worker = world.worker()
    await worker.handle(await _receive_one(world))
    history = await world.store.events(job.job_id)
    duplicates = metrics.DUPLICATE_DELIVERIES._value.get()
    await world.queue.send(QueueMessage.for_job(job))

    await worker.handle(await _receive_one(world))

    assert await world.store.events(job.job_id) == history
    assert history[-1].kind is EventKind.SUCCEEDED
    assert metrics.DUPLICATE_DELIVERIES._value.get() == duplicates + 1
    # The operator still sees it: a log line names the job and what the delivery found.
    line = next(x for x in capsys.readouterr().out.splitlines() if "delivery.duplicate" in x)
    assert job.job_id in line and "status=SUCCEEDED" in line and "receive_count=1" in line


async def test_a_delivery_for_a_live_owner_is_hidden_until_just_after_its_lease(
    make_world,
) -> None:
    world = make_world()
    job = await world.submit("x")
    now = world.clock.now()
    claim = await world.store.claim(
        job.job_id,
        attempt_id=new_attempt_id(),
        worker_id="other",
        now=now,
        lease_until=now + 30,
        max_deliveries_without_outcome=world.max_receives,
    )
    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=1)

    assert await world.worker().handle(delivery) is Verdict.DEFERRED

    last = (await world.store.events(job.job_id))[-1]
    assert (last.kind, last.detail) == (
        EventKind.DUPLICATE_DELIVERY,
        {"owner": claim.job.attempt_id},
    )
    world.clock.set(now + 30.9)
    assert await world.queue.receive(max_messages=1, visibility_timeout_seconds=60) == []
    world.clock.set(now + 31)
    assert len(await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)) == 1


async def test_a_result_is_stored_as_compact_utf8_json(make_world) -> None:
    world = make_world()
    job = await world.submit("héllo wörld")

    assert await world.worker().handle(await _receive_one(world)) is Verdict.SUCCEEDED

    [stored] = world.results._data.values()
    assert json.loads(stored) == (await world.jobs.get("t1", job.job_id)).result
    assert "héllo wörld".encode() in stored
    assert b'", "' not in stored and b'": ' not in stored


async def test_a_receive_batch_reads_its_jobs_once_and_a_missing_job_is_a_duplicate(
    make_world,
) -> None:
    world = make_world()
    jobs = [await world.submit(f"job {i}") for i in range(3)]
    ghost = QueueMessage(job_id="job_gone", tenant_id="t1")
    await world.queue.send(ghost)
    reads: list[int] = []
    single_reads: list[str] = []
    get_many, get = world.store.get_many, world.store.get

    async def counted_get_many(job_ids):
        reads.append(len(job_ids))
        return await get_many(job_ids)

    async def counted_get(job_id, **kwargs):
        single_reads.append(job_id)
        return await get(job_id, **kwargs)

    world.store.get_many = counted_get_many
    world.store.get = counted_get

    assert await world.worker().run_until_idle() == 4

    assert reads == [4]
    assert single_reads == []  # no delivery read its own job before claiming it
    for job in jobs:
        assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    stats = await world.queue.stats()
    assert (stats.visible, stats.in_flight) == (0, 0)  # the ghost's message was acked


async def test_a_pause_switch_the_store_cannot_read_makes_the_worker_wait_not_stop(
    make_world, monkeypatch
) -> None:
    from ferryman.core.errors import StoreUnavailableError

    world = make_world()
    job = await world.submit("x")
    real = world.control.paused
    failures = 2

    async def flaky():
        nonlocal failures
        if failures:
            failures -= 1
            raise StoreUnavailableError("postgresql: server closed the connection")
        return await real()

    monkeypatch.setattr(world.control, "paused", flaky)
    stop = asyncio.Event()
    running = asyncio.create_task(world.worker().run(stop))
    for _ in range(500):
        if (await world.job(job.job_id)).status is JobStatus.SUCCEEDED:
            break
        assert not running.done(), running.exception()
        await asyncio.sleep(0.01)
    stop.set()
    await asyncio.wait_for(running, 10)
    assert failures == 0
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED


@pytest.mark.parametrize(
    ("level", "lines"),
    [
        ("debug", ["attempt.started", "attempt.ended"]),
        ("info", ["attempt.ended"]),
        ("warning", []),
    ],
)
async def test_an_attempt_logs_the_lines_its_level_lets_through(make_world, level, lines) -> None:
    from structlog.testing import capture_logs

    from ferryman.observability.logging import configure_logging, reset_logging

    world = make_world()
    job = await world.submit("hi there")
    worker = world.worker()
    configure_logging(level)
    try:
        with capture_logs() as logs:
            assert await worker.handle(await _receive_one(world)) is Verdict.SUCCEEDED
    finally:
        reset_logging()
    attempt_lines = [line for line in logs if line["event"].startswith("attempt.")]
    assert [line["event"] for line in attempt_lines] == lines
    assert all(line["job_id"] == job.job_id for line in attempt_lines)


async def test_an_interrupted_call_leaves_its_delivery_uncancelled(make_world) -> None:
    """An interrupt stops the call, not the delivery: the rest of it (its writes, their
    timeouts) runs in a task nobody is cancelling, and a cancel from outside still
    cancels the delivery mid-call."""
    block = asyncio.Event()
    world = make_world(block=block)
    job = await world.submit("x")
    worker = world.worker()
    delivery = await _receive_one(world)

    async def deliver():
        verdict = await worker.handle(delivery)
        return verdict, asyncio.current_task().cancelling()

    delivering = asyncio.create_task(deliver())
    await asyncio.wait_for(world.provider.started.wait(), 5)
    worker._runner.release_all()
    worker._runner.release_all()  # a second interrupt cancels nothing more
    assert await asyncio.wait_for(delivering, 5) == (Verdict.RELEASED, 0)
    assert (await world.job(job.job_id)).status is JobStatus.QUEUED

    world.provider.started.clear()
    again = await _receive_one(world)
    outside = asyncio.create_task(world.worker().handle(again))
    await asyncio.wait_for(world.provider.started.wait(), 5)
    outside.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outside
    # Cancelled from outside mid-call: nothing written, the new attempt still owns it.
    assert (await world.job(again.message.job_id)).status is JobStatus.PROCESSING
