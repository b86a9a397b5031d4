"""A crash loop is bounded by FERRYMAN_MAX_RECEIVES under every configuration doctor accepts.

Deliveries that end without an outcome are counted on the job, across re-sent
messages, so neither the queue's own receive counts nor the sweeper's re-sends can
reset the budget (issue 5, item 5).
"""

from __future__ import annotations

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, EventKind, JobStatus
from ferryman.core.lease import LeasePolicy
from ferryman.services.verdicts import Verdict


class Crash(BaseException):
    """The worker process dies mid-call: nothing after it runs, no outcome is written."""


class CrashingProvider:
    def __init__(self) -> None:
        self.invocations = 0

    @property
    def name(self) -> str:
        return "sim"

    def serves(self, model: str) -> bool:
        return model == "sim"

    async def invoke(self, request, *, timeout_seconds):
        self.invocations += 1
        raise Crash()


async def _run_crash_loop(world, provider, *, seconds: float, step: float = 0.5):
    """Workers that die after every claim, a sweeper, and time passing."""
    verdicts = []
    sweeper = world.sweeper(stalled_after_seconds=world.lease.lease_seconds + 3.0)
    for _ in range(int(seconds / step)):
        for delivery in await world.queue.receive(
            max_messages=10, visibility_timeout_seconds=world.lease.visibility_timeout_seconds
        ):
            worker = world.worker(providers=[provider])
            try:
                verdicts.append(await worker.handle(delivery))
            except Crash:
                verdicts.append("crash")
        await sweeper.sweep_once()
        world.clock.advance(step)
    return verdicts


@pytest.mark.parametrize(
    ("visibility", "lease"),
    # The configuration the issue found (visibility shorter than the lease: the
    # message reached max receives while a crashed attempt's lease was still live),
    # and the default shape (visibility equal to the lease).
    [(3.0, 6.0), (6.0, 6.0)],
)
async def test_a_worker_that_crashes_after_every_claim_is_stopped_at_max_receives(
    make_world, visibility, lease
):
    world = make_world(
        lease=LeasePolicy(lease_seconds=lease, visibility_timeout_seconds=visibility),
        max_receives=5,
    )
    provider = CrashingProvider()
    job = await world.submit("boom")

    verdicts = await _run_crash_loop(world, provider, seconds=300)

    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.FAILED
    assert stored.error is not None
    assert (stored.error.code, stored.error.failure_class) == (
        "dead_lettered",
        FailureClass.DELIVERY,
    )
    # Never more paid calls than the budget, whatever the queue did with its messages.
    assert provider.invocations == 5
    attempts = await world.store.attempts(job.job_id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.ABANDONED] * 5
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds.count(EventKind.DEAD_LETTERED) == 1
    assert verdicts.count("crash") == 5


async def test_the_claim_that_would_exceed_the_budget_dead_letters_without_invoking(make_world):
    # The queue would deliver the message 10 times; the job's own count stops it at 2.
    world = make_world(max_receives=10)
    provider = CrashingProvider()
    job = await world.submit("boom")
    for _ in range(2):
        delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]
        with pytest.raises(Crash):
            await world.worker(providers=[provider], max_receives=2).handle(delivery)
        world.clock.advance(61)
    delivery = (await world.queue.receive(max_messages=1, visibility_timeout_seconds=60))[0]

    verdict = await world.worker(providers=[provider], max_receives=2).handle(delivery)

    assert verdict is Verdict.DEAD_LETTERED
    assert provider.invocations == 2
    assert (await world.job(job.job_id)).deliveries_without_outcome == 2
    assert (await world.queue.stats()).in_flight == 0  # its message was acknowledged


async def test_a_replayed_dead_letter_gets_a_fresh_budget(make_world):
    world = make_world(max_receives=2)
    crashing = CrashingProvider()
    job = await world.submit("boom")
    await _run_crash_loop(world, crashing, seconds=200)
    assert (await world.job(job.job_id)).status is JobStatus.FAILED

    await world.operations.replay([job.job_id], actor="ops", reason="fixed the crash")

    replayed = await world.job(job.job_id)
    assert replayed.deliveries_without_outcome == 0
    assert await world.worker().run_until_idle() == 1
    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
