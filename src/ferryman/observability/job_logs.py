"""The log lines about jobs, written by an observer (services/observers.py).

One line when an attempt starts (DEBUG) and when it ends (INFO), one for a duplicate
delivery, a warning for a dead-lettered job (whichever service found it), and a
warning, at most once a minute per (provider, alias), about answers that reported no
usage. Identifiers only: never a prompt, an output or an error's message.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core.job import DEAD_LETTERED_CODE, AttemptOutcome
from ferryman.observability.logging import enabled as log_enabled
from ferryman.services.observers import JobObserver
from ferryman.services.verdicts import Skip, Verdict

if TYPE_CHECKING:
    from ferryman.core.changes import Change
    from ferryman.core.job import Job
    from ferryman.ports.queue import Delivery
    from ferryman.services.attempt import CallResult, RunningAttempt

log = structlog.get_logger("ferryman.worker")

# The attempt's outcome for each way a claimed delivery ends (the attempt.ended line).
_ATTEMPT_OUTCOMES = {
    Verdict.SUCCEEDED: AttemptOutcome.SUCCEEDED,
    Verdict.RETRY_SCHEDULED: AttemptOutcome.RETRY,
    Verdict.FAILED: AttemptOutcome.FAILED,
    Verdict.CANCELLED: AttemptOutcome.CANCELLED,
    Verdict.LEASE_LOST: AttemptOutcome.LEASE_LOST,
    Verdict.RELEASED: AttemptOutcome.ABANDONED,
    # Given back to wait for its paused provider (a claimed delivery defers only so).
    Verdict.DEFERRED: AttemptOutcome.RETRY,
}

# An answer without usage is counted every time; its warning is written once per
# (provider, alias) in this long at most, saying how many calls it stands for.
UNKNOWN_USAGE_WARNING_INTERVAL_SECONDS = 60.0


class LogObserver(JobObserver):
    def __init__(
        self, *, unknown_usage_interval_seconds: float = UNKNOWN_USAGE_WARNING_INTERVAL_SECONDS
    ) -> None:
        self._unknown_usage = UnknownUsageWarnings(interval_seconds=unknown_usage_interval_seconds)

    def attempt_started(self, attempt: RunningAttempt) -> None:
        if log_enabled(logging.DEBUG):  # a line per attempt: nothing built when filtered
            log.debug("attempt.started", **_job_fields(attempt.job))

    def attempt_ended(self, attempt: RunningAttempt, result: CallResult, verdict: Verdict) -> None:
        if log_enabled(logging.INFO):
            log.info(
                "attempt.ended",
                **_job_fields(attempt.job),
                verdict=str(verdict),
                **result.ended_log_fields(_ATTEMPT_OUTCOMES.get(verdict)),
            )

    def delivery_skipped(self, delivery: Delivery, job: Job | None, skip: Skip) -> None:
        if skip is Skip.DUPLICATE and log_enabled(logging.INFO):
            log.info(
                "delivery.duplicate",
                job_id=delivery.message.job_id,
                status=None if job is None else str(job.status),
                receive_count=delivery.receive_count,
            )
        elif skip is Skip.NO_TIME:
            log.warning(
                "delivery.no_time_for_an_attempt",
                job_id=delivery.message.job_id,
                extendable_until=delivery.extendable_until,
                receive_count=delivery.receive_count,
            )

    def completed(self, change: Change) -> None:
        job = change.after
        if job.error is not None and job.error.code == DEAD_LETTERED_CODE:
            log.warning(
                "job.dead_lettered",
                job_id=job.job_id,
                tenant_id=job.tenant_id,
                deliveries_without_outcome=job.deliveries_without_outcome,
            )

    def call_ended(
        self, attempt: RunningAttempt, result: CallResult, elapsed_seconds: float
    ) -> None:
        answered = result.finish_reason is not None
        if answered and (result.input_tokens is None or result.output_tokens is None):
            self._unknown_usage.note(result)


def _job_fields(job: Job) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "tenant_id": job.tenant_id,
        "correlation_id": job.correlation_id,
        "attempt": job.fence,
    }


class UnknownUsageWarnings:
    """Warns about answers that reported no usage (``ferryman_usage_unknown_total``
    counts them all): the first at once, then at most one line a minute per
    (provider, alias), so a server that never reports usage does not write a line per
    call."""

    def __init__(self, *, interval_seconds: float = UNKNOWN_USAGE_WARNING_INTERVAL_SECONDS):
        self._interval_seconds = interval_seconds
        # (provider, alias) -> when its last line was written, calls since then.
        self._last: dict[tuple[str, str], tuple[float, int]] = {}

    def note(self, result: CallResult) -> None:
        provider, alias = result.provider or "", result.model or ""
        now = time.monotonic()
        written_at, unwritten = self._last.get((provider, alias), (float("-inf"), 0))
        if now - written_at < self._interval_seconds:
            self._last[(provider, alias)] = (written_at, unwritten + 1)
            return
        self._last[(provider, alias)] = (now, 0)
        missing = [
            name
            for name, value in (
                ("input_tokens", result.input_tokens),
                ("output_tokens", result.output_tokens),
            )
            if value is None
        ]
        # Identifiers only: never the prompt or the answer.
        log.warning(
            "provider.usage_unknown",
            provider=provider,
            model=alias,
            provider_model=result.provider_model,
            missing=",".join(missing),
            calls=unwritten + 1,
        )
