"""An owner's terminal write may carry its message's ack (ports/store.py, AcksWithOutcome).

Where the engine can (its queue is in the jobs' database), the message is deleted in the
transaction that ends the job, and only then; elsewhere the ``ack`` is ignored and the
message stays for the worker to delete, as before. A retry keeps its message either way.
"""

from __future__ import annotations

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, JobError, JobStatus

pytestmark = pytest.mark.timeout(30)

SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
RETRY = AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT)
TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")


async def _received(engine, job_factory):
    """A queued job, its message received and the job claimed: (claim, delivery)."""
    job = job_factory()
    await engine.accept(job)
    [delivery] = await engine.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    claim = await engine.claim(job.job_id)
    return claim, delivery


async def _messages(engine) -> int:
    stats = await engine.queue.stats()
    return stats.visible + stats.in_flight


async def test_a_publish_with_its_ack_deletes_the_message_where_the_engine_can(engine, job_factory):
    claim, delivery = await _received(engine, job_factory)

    published = await engine.store.succeed(
        claim.job.job_id,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
        known=claim.job,
        ack=delivery.receipt,
    )

    assert published is not None
    assert published.status is JobStatus.SUCCEEDED
    assert await _messages(engine) == (0 if engine.store.acks_with_outcome else 1)


async def test_a_publish_that_does_not_own_the_job_leaves_the_message(engine, job_factory):
    claim, delivery = await _received(engine, job_factory)
    engine.advance(61)
    await engine.claim(claim.job.job_id, worker_id="w2")  # takes the job over

    published = await engine.store.succeed(
        claim.job.job_id,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=SUCCEEDED,
        known=claim.job,
        ack=delivery.receipt,
    )

    assert published is None
    assert await _messages(engine) == 1


async def test_a_scheduled_retry_keeps_its_message_even_when_given_the_ack(engine, job_factory):
    claim, delivery = await _received(engine, job_factory)

    after = await engine.store.schedule_retry(
        claim.job.job_id,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        not_before=engine.now() + 5,
        error=TRANSIENT,
        report=RETRY,
        known=claim.job,
        ack=delivery.receipt,
    )

    assert after is not None
    assert after.status is JobStatus.RETRY_SCHEDULED
    assert await _messages(engine) == 1


async def test_a_failure_with_its_ack_deletes_the_message_where_the_engine_can(engine, job_factory):
    claim, delivery = await _received(engine, job_factory)

    failed = await engine.store.fail(
        claim.job.job_id,
        attempt_id=claim.job.attempt_id,
        now=engine.now(),
        error=TRANSIENT,
        report=RETRY,
        known=claim.job,
        ack=delivery.receipt,
    )

    assert failed is not None
    assert failed.status is JobStatus.FAILED
    assert await _messages(engine) == (0 if engine.store.acks_with_outcome else 1)


async def test_the_engines_that_keep_queue_and_jobs_together_ack_with_the_outcome(engine):
    assert engine.store.acks_with_outcome is (engine.name in ("memory", "sqlite", "postgres"))
