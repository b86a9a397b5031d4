"""JobHistory: the attempts and events of every job, as the in-memory store keeps them."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING

from ferryman.core.job import AttemptOutcome

if TYPE_CHECKING:
    from ferryman.core.changes import AttemptEnding, Change
    from ferryman.core.job import Attempt, Event


class JobHistory:
    """Append-only events and one attempt row per claim, per job, written from Changes."""

    def __init__(self) -> None:
        self._events: defaultdict[str, list[Event]] = defaultdict(list)
        self._attempts: defaultdict[str, list[Attempt]] = defaultdict(list)

    def events(self, job_id: str) -> list[Event]:
        return list(self._events.get(job_id, []))

    def attempts(self, job_id: str) -> list[Attempt]:
        return sorted(self._attempts.get(job_id, []), key=lambda a: a.attempt_no)

    def all_attempts(self) -> list[Attempt]:
        return [attempt for attempts in self._attempts.values() for attempt in attempts]

    def record(self, change: Change) -> None:
        """Write what a change says happened: its events, the attempt it opened, the
        attempts it closed."""
        self._events[change.job_id].extend(change.events)
        if change.opened is not None:
            self._attempts[change.job_id].append(change.opened)
        for ending in change.closed:
            self._close(change.job_id, ending)

    def forget(self, job_id: str) -> None:
        self._events.pop(job_id, None)
        self._attempts.pop(job_id, None)

    def _close(self, job_id: str, ending: AttemptEnding) -> None:
        attempts = self._attempts.get(job_id, [])
        for i, attempt in enumerate(attempts):
            if attempt.attempt_id != ending.attempt_id:
                continue
            open_or_correctable = attempt.outcome is None or (
                ending.replaces_abandoned and attempt.outcome is AttemptOutcome.ABANDONED
            )
            if open_or_correctable:
                report = ending.report
                attempts[i] = dataclasses.replace(
                    attempt,
                    ended_at=ending.ended_at,
                    outcome=report.outcome,
                    failure_class=report.failure_class,
                    error_code=report.error_code,
                    latency_ms=report.latency_ms,
                    input_tokens=report.input_tokens,
                    output_tokens=report.output_tokens,
                    provider_request_id=report.provider_request_id,
                    model=report.model or attempt.model,
                    provider=report.provider,
                    provider_model=report.provider_model,
                    finish_reason=report.finish_reason,
                    cost_nano_usd=report.cost_nano_usd,
                    raw_output=report.raw_output,
                )
