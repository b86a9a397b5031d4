"""A publish may write its own result (ports/store.py's PublishesWithResult).

Where the results live in the job store's database (PostgreSQL with results in the
database), the result is not put first: the publish's transaction writes it, so it is
durable exactly when the job that references it is, never without it, and under
its attempt-specific key (a late attempt never overwrites the published result).
Engines without the capability put the result first, as before; they skip here.
"""

from __future__ import annotations

import pytest

from ferryman.core.errors import ResultUnreadableError
from ferryman.core.job import AttemptOutcome, AttemptReport, JobStatus
from ferryman.core.results import result_key
from ferryman.ports.results import StagesResults

pytestmark = pytest.mark.timeout(30)

SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)


def _staged(engine, job, data: bytes = b'{"text":"hi"}'):
    """The claimed attempt's result, staged; skips an engine that cannot take it."""
    if not isinstance(engine.results, StagesResults):
        pytest.skip(f"{engine.name}: results are put before the publish")
    staged = engine.results.staged(result_key(job.tenant_id, job.job_id, job.attempt_id), data)
    if not engine.store.takes_result(staged):
        pytest.skip(f"{engine.name}: the job store cannot write this result")
    return staged


async def _received(engine, job_factory, *, worker_id: str = "w1"):
    job = job_factory()
    await engine.accept(job)
    [delivery] = await engine.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    claim = await engine.claim(job.job_id, worker_id=worker_id)
    assert claim.claimed
    return claim.job, delivery


async def _publish(engine, job, staged, *, ack=None):
    return await engine.store.succeed(
        job.job_id,
        attempt_id=job.attempt_id,
        now=engine.now(),
        result_ref=staged.ref,
        report=SUCCEEDED,
        known=job,
        ack=ack,
        result=staged,
    )


async def _messages(engine) -> int:
    stats = await engine.queue.stats()
    return stats.visible + stats.in_flight


async def test_the_publish_writes_its_result_and_its_ack_in_one_transaction(engine, job_factory):
    job, delivery = await _received(engine, job_factory)
    staged = _staged(engine, job)
    with pytest.raises(ResultUnreadableError):  # staging writes nothing
        await engine.results.get(staged.ref, key=staged.key)

    published = await _publish(engine, job, staged, ack=delivery.receipt)

    assert published is not None
    assert published.status is JobStatus.SUCCEEDED
    assert published.result_ref == staged.ref
    assert await engine.results.get(staged.ref, key=staged.key) == staged.data
    assert (await engine.store.get(job.job_id)).result_ref == staged.ref
    assert await _messages(engine) == 0


async def test_a_publish_whose_revision_check_fails_writes_no_result(engine, job_factory):
    job, delivery = await _received(engine, job_factory)
    staged = _staged(engine, job)
    engine.advance(61)
    taken = await engine.claim(job.job_id, worker_id="w2")  # its lease ran out: taken over
    assert taken.claimed

    published = await _publish(engine, job, staged, ack=delivery.receipt)

    assert published is None
    with pytest.raises(ResultUnreadableError):
        await engine.results.get(staged.ref, key=staged.key)
    assert (await engine.store.get(job.job_id)).result_ref is None
    assert await _messages(engine) == 1  # the ack went with nothing


async def test_a_late_attempt_never_overwrites_the_published_result(engine, job_factory):
    late, _ = await _received(engine, job_factory)
    late_result = _staged(engine, late, b'{"text":"late"}')
    engine.advance(61)
    winner = (await engine.claim(late.job_id, worker_id="w2")).job
    won = _staged(engine, winner, b'{"text":"winner"}')
    assert won.key != late_result.key  # attempt-specific keys

    assert (await _publish(engine, winner, won)) is not None
    assert (await _publish(engine, late, late_result)) is None

    stored = await engine.store.get(late.job_id)
    assert stored.result_ref == won.ref
    assert await engine.results.get(won.ref, key=won.key) == b'{"text":"winner"}'
    with pytest.raises(ResultUnreadableError):
        await engine.results.get(late_result.ref, key=late_result.key)


async def test_a_cancel_that_wins_over_the_publish_keeps_no_result(engine, job_factory):
    job, _ = await _received(engine, job_factory)
    staged = _staged(engine, job)
    await engine.store.request_cancel(job.job_id, tenant_id=job.tenant_id, now=engine.now())

    ended = await _publish(engine, job, staged)

    assert ended is not None
    assert ended.status is JobStatus.CANCELLED
    with pytest.raises(ResultUnreadableError):
        await engine.results.get(staged.ref, key=staged.key)


async def test_the_publish_writes_the_same_bytes_again_when_the_result_was_put(engine, job_factory):
    """A publish retried after its result was put on its own (delivery's fallback when
    the store stayed away) finds the row there already: same key, same bytes."""
    job, _ = await _received(engine, job_factory)
    staged = _staged(engine, job)
    assert await engine.results.put(staged.key, staged.data) == staged.ref

    assert (await _publish(engine, job, staged)) is not None
    assert await engine.results.get(staged.ref, key=staged.key) == staged.data


async def test_a_result_staged_for_another_database_is_not_taken(engine, job_factory):
    from ferryman.ports.results import StagedResult
    from ferryman.ports.store import PublishesWithResult

    if not isinstance(engine.port, PublishesWithResult):
        pytest.skip(f"{engine.name}: no publish with a result")
    job, _ = await _received(engine, job_factory)
    key = result_key(job.tenant_id, job.job_id, job.attempt_id)
    elsewhere = StagedResult(key=key, data=b"{}", ref=f"db:{key}", home=object())

    assert not engine.store.takes_result(elsewhere)
    with pytest.raises(ValueError, match="another database"):
        await engine.port.apply_with_result(_any_change(job), result=elsewhere, receipt=None)


def _any_change(job):
    from ferryman.core import changes

    return changes.succeed(
        job, attempt_id=job.attempt_id, now=job.updated_at, result_ref="r", report=SUCCEEDED
    )
