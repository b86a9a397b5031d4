"""An observer sees every transition of a job, on every engine (services/observers.py).

"Every" is checked against what the engine stored: the changes an observer saw for a
job number its revisions 1, 2, 3... up to the stored job's revision (none missed,
none seen twice, none seen that did not land), and the events they carried are the
job's stored history. Completion is seen once per terminal outcome.
"""

from __future__ import annotations

import asyncio
import collections
from typing import TYPE_CHECKING

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, JobError, JobStatus
from ferryman.core.lease import LeasePolicy
from ferryman.core.retry import RetryPolicy
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.attempt import attempt_timeouts
from ferryman.services.catalog import ModelCatalog
from ferryman.services.ledger import JobLedger
from ferryman.services.observers import JobObserver, Observers
from ferryman.services.results import ResultWriter
from ferryman.services.verdicts import Verdict
from ferryman.services.worker import compose_worker
from ferryman.services.worker_parts import WorkerOptions, WorkerParts
from ferryman.tasks import builtin_tasks

if TYPE_CHECKING:
    from ferryman.core.changes import Change

pytestmark = pytest.mark.timeout(60)

TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
DEAD = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="redriven")
RETRY = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
FAILED = AttemptReport(outcome=AttemptOutcome.FAILED, failure_class=FailureClass.TRANSIENT)


class Recorder(JobObserver):
    """Everything it was told, in order."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self.completions: list[Change] = []
        self.hooks: collections.Counter[str] = collections.Counter()
        self.verdicts: list[Verdict] = []
        self.points: list[str] = []

    def changed(self, change: Change) -> None:
        self.changes.append(change)

    def completed(self, change: Change) -> None:
        self.completions.append(change)

    def delivery_started(self, delivery):
        self.hooks["delivery_started"] += 1

    def delivery_ended(self, delivery, verdict):
        self.hooks["delivery_ended"] += 1
        self.verdicts.append(verdict)

    def attempt_started(self, attempt):
        self.hooks["attempt_started"] += 1

    def attempt_ended(self, attempt, result, verdict):
        self.hooks["attempt_ended"] += 1

    def call_started(self, attempt, result):
        self.hooks["call_started"] += 1
        assert result.model == "sim"

    def call_ended(self, attempt, result, elapsed_seconds):
        self.hooks["call_ended"] += 1
        assert elapsed_seconds >= 0

    def reached(self, point):
        self.points.append(point)


@pytest.fixture
def recorder(engine) -> Recorder:
    """The engine's ledger, with a recorder as its only observer."""
    seen = Recorder()
    engine.store = JobLedger(engine.port, observers=Observers([seen]))
    return seen


async def _saw_every_transition(engine, recorder: Recorder, job_id: str) -> list[Change]:
    seen = [change for change in recorder.changes if change.job_id == job_id]
    stored = await engine.port.get(job_id)
    assert stored is not None
    assert [change.after.revision for change in seen] == list(range(1, stored.revision + 1))
    assert seen[-1].after.status is stored.status
    history = [(event.seq, event.kind) for event in await engine.port.events(job_id)]
    assert [(event.seq, event.kind) for change in seen for event in change.events] == history
    return seen


async def test_an_observer_sees_a_retry_then_a_success(engine, recorder, job_factory):
    job = job_factory()
    await engine.accept(job)
    first = await engine.claim(job.job_id)
    lease = await engine.store.renew_lease(
        job.job_id,
        attempt_id=first.job.attempt_id,
        now=engine.now(),
        lease_until=engine.now() + 120,
    )
    assert lease.held
    await engine.store.schedule_retry(
        job.job_id,
        attempt_id=first.job.attempt_id,
        now=engine.now(),
        not_before=engine.now() + 5,
        error=TRANSIENT,
        report=RETRY,
    )
    engine.advance(6)
    second = await engine.claim(job.job_id)
    done = await engine.store.succeed(
        job.job_id,
        attempt_id=second.job.attempt_id,
        now=engine.now(),
        result_ref="ref",
        report=SUCCEEDED,
    )
    assert done is not None and done.status is JobStatus.SUCCEEDED
    seen = await _saw_every_transition(engine, recorder, job.job_id)
    assert seen[0].before is None  # the acceptance is a change like any other
    # Both attempts' endings, as written.
    endings = [ending.report.outcome for change in seen for ending in change.closed]
    assert endings == [AttemptOutcome.RETRY, AttemptOutcome.SUCCEEDED]
    assert [c.after.status for c in recorder.completions] == [JobStatus.SUCCEEDED]


async def test_completion_is_seen_once_whichever_service_ends_the_job(
    engine, recorder, job_factory
):
    cancelled = job_factory()
    await engine.accept(cancelled)
    await engine.store.request_cancel(cancelled.job_id, tenant_id="t1", now=engine.now())
    # A cancel asked again of a finished job changes nothing, and completes nothing again.
    await engine.store.record_event(
        cancelled.job_id, EventKind.DUPLICATE_DELIVERY, now=engine.now()
    )

    dead = job_factory()
    await engine.accept(dead)
    await engine.store.fail_unowned(
        dead.job_id, now=engine.now(), error=DEAD, kind=EventKind.DEAD_LETTERED, detail={}
    )
    # An operator replays it; it fails again: a second outcome, a second completion.
    await engine.store.replay(dead.job_id, now=engine.now(), actor="op", reason="fixed")
    if not engine.store.enqueues_with_job:
        await engine.store.mark_dispatched(dead.job_id, now=engine.now())
    again = await engine.claim(dead.job_id)
    await engine.store.fail(
        dead.job_id,
        attempt_id=again.job.attempt_id,
        now=engine.now(),
        error=TRANSIENT,
        report=FAILED,
    )
    for job_id in (cancelled.job_id, dead.job_id):
        await _saw_every_transition(engine, recorder, job_id)
    completions = [(c.job_id, c.after.status) for c in recorder.completions]
    assert completions == [
        (cancelled.job_id, JobStatus.CANCELLED),
        (dead.job_id, JobStatus.FAILED),
        (dead.job_id, JobStatus.FAILED),
    ]


async def test_an_observer_sees_every_step_of_a_worker(engine, recorder, job_factory):
    """Through the worker's own path on this engine (its receive's claims, where the
    engine writes them itself; batched claims elsewhere)."""
    jobs = [job_factory(input={"prompt": f"p{n}"}) for n in range(3)]
    for job in jobs:
        await engine.accept(job)
    parts = WorkerParts(
        store=engine.store,
        queue=engine.queue,
        results=ResultWriter(engine.results),
        control=engine.control,
        catalog=ModelCatalog.serving_own_names([SimulatedProvider(sleep=_no_sleep)]),
        tasks=builtin_tasks(),
        clock=engine.clock,
        observers=engine.store.observers,
    )
    settings = WorkerOptions(
        worker_id="observed",
        concurrency=4,
        lease=LeasePolicy(lease_seconds=60, visibility_timeout_seconds=60),
        retry=RetryPolicy(max_attempts=2),
        receive_wait_seconds=0.0,
    )
    worker = compose_worker(parts, settings, timeouts=attempt_timeouts(5.0))
    assert await worker.run_until_idle() == 3
    for job in jobs:
        await _saw_every_transition(engine, recorder, job.job_id)
    assert sorted(c.job_id for c in recorder.completions) == sorted(j.job_id for j in jobs)
    assert recorder.verdicts == [Verdict.SUCCEEDED] * 3
    assert recorder.hooks == dict.fromkeys(
        (
            "delivery_started",
            "delivery_ended",
            "attempt_started",
            "attempt_ended",
            "call_started",
            "call_ended",
        ),
        3,
    )
    # Every named step a failpoint may stop at, for each delivery: the result's own put
    # and the ack only where they are not part of the publish's transaction.
    points = collections.Counter(recorder.points)
    assert points.pop("after_result_put", 0) in (0, 3)
    assert points.pop("before_ack", 0) == (0 if engine.store.acks_with_outcome else 3)
    assert points == dict.fromkeys(
        ("after_receive", "after_claim", "after_invoke", "after_publish"), 3
    )


async def test_an_observer_that_raises_changes_nothing(engine, job_factory):
    class Broken(JobObserver):
        def changed(self, change):
            raise RuntimeError("a bug in an observer")

    after = Recorder()
    engine.store = JobLedger(engine.port, observers=Observers([Broken(), after]))
    job = job_factory()
    await engine.accept(job)
    claimed = await engine.claim(job.job_id)
    assert claimed.claimed
    await _saw_every_transition(engine, after, job.job_id)


async def _no_sleep(seconds: float) -> None:
    await asyncio.sleep(0)
