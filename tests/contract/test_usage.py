"""JobStore usage reports: sums over attempts, by day, model or task, per tenant."""

from __future__ import annotations

import dataclasses

import pytest

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, AttemptReport, JobError
from ferryman.ports.store import UsageGroup

pytestmark = pytest.mark.timeout(30)

DAY = 86_400.0
THROTTLED = JobError(code="throttled", failure_class=FailureClass.THROTTLED, message="429")


def _report(outcome, *, cost, tokens=(100, 50), model="fast", failure=None):
    return AttemptReport(
        outcome=outcome,
        failure_class=failure,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        model=model,
        provider="openai",
        cost_nano_usd=cost,
    )


async def _retried_then_succeeded(engine, job_factory, **overrides):
    job = job_factory(**overrides)
    await engine.accept(job)
    first = await engine.claim(job.job_id)
    await engine.store.schedule_retry(
        job.job_id,
        attempt_id=first.job.attempt_id,
        now=engine.now(),
        not_before=engine.now(),
        error=THROTTLED,
        report=_report(AttemptOutcome.RETRY, cost=300, failure=FailureClass.THROTTLED),
    )
    second = await engine.claim(job.job_id)
    await engine.store.succeed(
        job.job_id,
        attempt_id=second.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=_report(AttemptOutcome.SUCCEEDED, cost=1000, model="backup"),
    )
    return job.job_id


async def test_a_report_sums_calls_tokens_cost_and_what_was_wasted(engine, job_factory):
    start = engine.now()
    await _retried_then_succeeded(engine, job_factory)
    await _retried_then_succeeded(engine, job_factory, task="classify_ticket")
    await _retried_then_succeeded(engine, job_factory, tenant_id="t2")

    by_model = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + DAY, group_by=UsageGroup.MODEL
    )

    assert [(r.key, r.calls, r.failed_calls) for r in by_model] == [
        ("backup", 2, 0),
        ("fast", 2, 2),
    ]
    backup, fast = by_model
    assert (backup.input_tokens, backup.output_tokens) == (200, 100)
    assert (backup.cost_nano_usd, backup.wasted_nano_usd) == (2000, 0)
    assert (fast.cost_nano_usd, fast.wasted_nano_usd) == (600, 600)


async def test_reports_group_by_task_and_day_and_keep_to_the_period(engine, job_factory):
    start = engine.now()
    await _retried_then_succeeded(engine, job_factory)
    engine.advance(DAY)
    await _retried_then_succeeded(engine, job_factory, task="classify_ticket")

    by_task = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + 2 * DAY, group_by=UsageGroup.TASK
    )
    by_day = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + 2 * DAY, group_by=UsageGroup.DAY
    )
    first_day = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + DAY, group_by=UsageGroup.TASK
    )

    assert [(r.key, r.calls) for r in by_task] == [("classify_ticket", 2), ("generate", 2)]
    assert [r.calls for r in by_day] == [2, 2]
    assert by_day[0].key < by_day[1].key  # ISO days, in order
    assert [r.key for r in first_day] == ["generate"]


async def test_a_tenant_sees_only_its_own_usage_and_operators_see_all(engine, job_factory):
    start = engine.now()
    await _retried_then_succeeded(engine, job_factory, tenant_id="t1")
    await _retried_then_succeeded(engine, job_factory, tenant_id="t2")

    def calls(rows):
        return sum(r.calls for r in rows)

    mine = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + DAY, group_by=UsageGroup.TASK
    )
    everyone = await engine.store.usage_report(
        tenant_id=None, start=start, end=start + DAY, group_by=UsageGroup.TASK
    )
    nobody = await engine.store.usage_report(
        tenant_id="t3", start=start, end=start + DAY, group_by=UsageGroup.TASK
    )
    assert (calls(mine), calls(everyone), nobody) == (2, 4, [])


async def test_calls_answered_without_usage_are_counted_apart_never_as_zero(engine, job_factory):
    """An answer that reported no usage (a finish reason, no tokens, no cost) is unknown:
    left out of the sums and counted in unknown_usage_calls. An attempt that never got
    an answer (abandoned, a refused call) is not an unknown-usage call."""
    start = engine.now()
    job = job_factory()
    await engine.accept(job)
    first = await engine.claim(job.job_id)
    unknown = AttemptReport(
        outcome=AttemptOutcome.RETRY,
        failure_class=FailureClass.INVALID_OUTPUT,
        model="fast",
        provider="openai",
        finish_reason="stop",
    )
    await engine.store.schedule_retry(
        job.job_id,
        attempt_id=first.job.attempt_id,
        now=engine.now(),
        not_before=engine.now(),
        error=JobError("invalid_output", FailureClass.INVALID_OUTPUT, "m"),
        report=unknown,
    )
    second = await engine.claim(job.job_id)
    refused = AttemptReport(
        outcome=AttemptOutcome.RETRY,
        failure_class=FailureClass.THROTTLED,
        model="fast",
        provider="openai",
    )
    await engine.store.schedule_retry(
        job.job_id,
        attempt_id=second.job.attempt_id,
        now=engine.now(),
        not_before=engine.now(),
        error=THROTTLED,
        report=refused,
    )
    third = await engine.claim(job.job_id)
    known = _report(AttemptOutcome.SUCCEEDED, cost=1000)
    await engine.store.succeed(
        job.job_id,
        attempt_id=third.job.attempt_id,
        now=engine.now(),
        result_ref="r",
        report=dataclasses.replace(known, finish_reason="stop"),
    )

    (row,) = await engine.store.usage_report(
        tenant_id="t1", start=start, end=start + DAY, group_by=UsageGroup.MODEL
    )
    assert (row.calls, row.failed_calls, row.unknown_usage_calls) == (3, 2, 1)
    assert (row.input_tokens, row.output_tokens, row.cost_nano_usd) == (100, 50, 1000)
