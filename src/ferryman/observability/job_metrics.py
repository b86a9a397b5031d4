"""The Prometheus series about jobs, kept by an observer (services/observers.py).

Every count comes from what happened, once: a job accepted, a retry scheduled, an
attempt ended and what it cost, from the changes the ledger applied (so a write that
did not land counts nothing, and a change made by any service counts the same way);
a job's outcome and its time from acceptance, from its completion; calls, latency,
tokens, throttles and broken outputs, from the worker's call hooks.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from ferryman.core.errors import InvalidOutputError, ThrottledError
from ferryman.core.job import DEAD_LETTERED_CODE, JobStatus
from ferryman.core.models import usd
from ferryman.observability import metrics
from ferryman.services.observers import JobObserver
from ferryman.services.verdicts import Skip

if TYPE_CHECKING:
    from prometheus_client import Counter, Histogram

    from ferryman.core.changes import Change
    from ferryman.core.job import Job
    from ferryman.ports.queue import Delivery
    from ferryman.services.attempt import CallResult, RunningAttempt
    from ferryman.services.verdicts import Verdict


class MetricsObserver(JobObserver):
    def changed(self, change: Change) -> None:
        after = change.after
        if change.before is None:
            _accepted(after.task, metrics.tenant_label(after.tenant_id)).inc()
        elif (
            after.status is JobStatus.RETRY_SCHEDULED
            and change.before.status is JobStatus.PROCESSING
            and after.error is not None
        ):
            _retries(after.error.failure_class).inc()
        for ending in change.closed:
            report = ending.report
            outcome = report.outcome
            _attempts_ended(outcome).inc()
            if report.provider is not None and report.model is not None:
                input_tokens, output_tokens, cost = _usage_series(
                    report.provider, report.model, outcome
                )
                input_tokens.inc(report.input_tokens or 0)
                output_tokens.inc(report.output_tokens or 0)
                cost.inc(usd(report.cost_nano_usd or 0))

    def completed(self, change: Change) -> None:
        job = change.after
        error = job.error
        failed = job.status is JobStatus.FAILED and error is not None
        failure_class = error.failure_class if failed and error is not None else ""
        outcomes, latency = _terminal_series(
            job.task, metrics.tenant_label(job.tenant_id), job.status, failure_class
        )
        outcomes.inc()
        latency.observe(max(0.0, change.at - job.created_at))
        if failed and error is not None and error.code == DEAD_LETTERED_CODE:
            metrics.DEAD_LETTERED.inc()

    def delivery_started(self, delivery: Delivery) -> None:
        metrics.IN_FLIGHT.inc()

    def delivery_ended(self, delivery: Delivery, verdict: Verdict) -> None:
        metrics.IN_FLIGHT.dec()

    def delivery_skipped(self, delivery: Delivery, job: Job | None, skip: Skip) -> None:
        if skip is Skip.DUPLICATE:
            metrics.DUPLICATE_DELIVERIES.inc()
        elif skip is Skip.UNKNOWN_PAYLOAD:
            metrics.UNKNOWN_PAYLOADS.inc()

    def call_started(self, attempt: RunningAttempt, result: CallResult) -> None:
        _invocations(attempt.job.task, result.model or "").inc()

    def call_ended(
        self, attempt: RunningAttempt, result: CallResult, elapsed_seconds: float
    ) -> None:
        model = result.model or ""
        series = _call_series(model)
        series[0].observe(elapsed_seconds)
        error = result.error
        if isinstance(error, ThrottledError):
            metrics.child(metrics.THROTTLES, model=model).inc()
        if result.finish_reason is None:  # no answer came back: no usage to count
            return
        if result.input_tokens is not None:
            series[1].inc(result.input_tokens)
        if result.output_tokens is not None:
            series[2].inc(result.output_tokens)
        if result.input_tokens is None or result.output_tokens is None:
            metrics.child(metrics.USAGE_UNKNOWN, provider=result.provider or "", model=model).inc()
        if isinstance(error, InvalidOutputError):
            metrics.child(metrics.VALIDATION_FAILURES, task=attempt.job.task).inc()


# The series of each set of label values, looked up once per set rather than a label
# lookup per series per job. The values are bounded sets (outcomes, statuses, failure
# classes, task, model and provider names; tenants only where per-tenant series are
# on), as the metrics' own children are.


@functools.cache
def _accepted(task: str, tenant: str) -> Counter:
    return metrics.child(metrics.JOBS_ACCEPTED, task=task, tenant=tenant)


@functools.cache
def _retries(failure_class: str) -> Counter:
    return metrics.child(metrics.RETRIES, failure_class=failure_class)


@functools.cache
def _attempts_ended(outcome: str) -> Counter:
    return metrics.child(metrics.ATTEMPTS_ENDED, outcome=outcome)


@functools.cache
def _invocations(task: str, model: str) -> Counter:
    return metrics.child(metrics.INVOCATIONS, task=task, model=model)


@functools.cache
def _call_series(model: str) -> tuple[Histogram, Counter, Counter]:
    """A call's latency, input tokens and output tokens, by model alias."""
    return (
        metrics.child(metrics.MODEL_LATENCY, model=model),
        metrics.child(metrics.TOKENS, model=model, direction="input"),
        metrics.child(metrics.TOKENS, model=model, direction="output"),
    )


@functools.cache
def _usage_series(provider: str, model: str, outcome: str) -> tuple[Counter, Counter, Counter]:
    """An attempt's input tokens, output tokens and cost."""
    labels = {"provider": provider, "model": model, "outcome": outcome}
    return (
        metrics.child(metrics.ATTEMPT_TOKENS, **labels, direction="input"),
        metrics.child(metrics.ATTEMPT_TOKENS, **labels, direction="output"),
        metrics.child(metrics.PROVIDER_COST, **labels),
    )


@functools.cache
def _terminal_series(
    task: str, tenant: str, status: str, failure_class: str
) -> tuple[Counter, Histogram]:
    """A job's terminal status, and its time from acceptance."""
    return (
        metrics.child(
            metrics.JOB_OUTCOMES,
            task=task,
            tenant=tenant,
            status=status,
            failure_class=failure_class,
        ),
        metrics.child(metrics.END_TO_END_LATENCY, task=task),
    )
