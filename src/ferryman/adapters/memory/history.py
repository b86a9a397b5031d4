"""JobHistory: the attempts and events of every job, as the in-memory store keeps them."""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ferryman.core.job import Attempt, AttemptOutcome, Event, EventKind

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.job import AttemptReport, Job

    _Change = Callable[[Attempt], Attempt]


class JobHistory:
    """Append-only events (seq 1, 2, ...) and one attempt row per claim, per job."""

    def __init__(self) -> None:
        self._events: defaultdict[str, list[Event]] = defaultdict(list)
        self._attempts: defaultdict[str, list[Attempt]] = defaultdict(list)

    def events(self, job_id: str) -> list[Event]:
        return list(self._events.get(job_id, []))

    def attempts(self, job_id: str) -> list[Attempt]:
        return sorted(self._attempts.get(job_id, []), key=lambda a: a.attempt_no)

    def event(
        self, job_id: str, kind: EventKind, at: float, detail: dict[str, Any] | None = None
    ) -> None:
        events = self._events[job_id]
        events.append(
            Event(job_id=job_id, seq=len(events) + 1, at=at, kind=kind, detail=detail or {})
        )

    def start(self, job: Job, at: float) -> None:
        """The attempt a claim just began: its number is the job's new fence."""
        assert job.attempt_id is not None
        assert job.worker_id is not None
        self._attempts[job.job_id].append(
            Attempt(
                job_id=job.job_id,
                attempt_no=job.fence,
                attempt_id=job.attempt_id,
                worker_id=job.worker_id,
                started_at=at,
            )
        )
        self.event(
            job.job_id,
            EventKind.CLAIMED,
            at,
            {"attempt_id": job.attempt_id, "attempt_no": job.fence, "worker_id": job.worker_id},
        )

    def close(self, job_id: str, attempt_id: str, at: float, report: AttemptReport) -> bool:
        """Record how an attempt ended, unless it already has an outcome of its own.

        An outcome of ``abandoned`` set by a takeover may be replaced: the worker
        survived and knows better why its attempt ended. True if recorded.
        """
        return self._update(
            job_id,
            lambda a: a.attempt_id == attempt_id and a.outcome in (None, AttemptOutcome.ABANDONED),
            lambda a: dataclasses.replace(
                a,
                ended_at=at,
                outcome=report.outcome,
                failure_class=report.failure_class,
                error_code=report.error_code,
                latency_ms=report.latency_ms,
                input_tokens=report.input_tokens,
                output_tokens=report.output_tokens,
                provider_request_id=report.provider_request_id,
            ),
        )

    def abandon(self, job_id: str, attempt_id: str, at: float) -> None:
        """A claim took over this attempt's expired lease."""
        if self._update(
            job_id, lambda a: a.outcome is None and a.attempt_id == attempt_id, _abandoned(at)
        ):
            self.event(job_id, EventKind.ATTEMPT_ABANDONED, at, {"attempt_id": attempt_id})

    def abandon_open(self, job_id: str, at: float) -> None:
        """Close every attempt still without an outcome (the job ended without its owner)."""
        self._update(job_id, lambda a: a.outcome is None, _abandoned(at))

    def _update(self, job_id: str, which: Callable[[Attempt], bool], change: _Change) -> bool:
        attempts = self._attempts.get(job_id, [])
        updated = False
        for i, attempt in enumerate(attempts):
            if which(attempt):
                attempts[i] = change(attempt)
                updated = True
        return updated


def _abandoned(at: float) -> _Change:
    def change(attempt: Attempt) -> Attempt:
        return dataclasses.replace(attempt, ended_at=at, outcome=AttemptOutcome.ABANDONED)

    return change
