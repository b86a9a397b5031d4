"""What each transition writes: the job after it, its events, and the attempt rows it
opens or closes.

Which events and attempt rows go with a transition is a rule, and it lives here
once. Every engine persists a ``Change`` exactly as given, in one conditional write:
the job row is replaced only if its revision is still the one the change was
computed from (``Change.expected_revision``); then the events are appended, the
attempt rows opened or closed, and (where the engine can) the queue message sent,
all in the same transaction. A change whose condition fails is recomputed from the
job as it now is (services/ledger.py), so a rule is always applied to current facts.

Every change advances ``revision`` by one and numbers its events after the job's
``event_seq``, so no engine needs a query to number them. A rule (core/job.py) says
which fields change; the change makes the job after it with one ``dataclasses.replace``
of those fields and its revision and event number together, so a transition copies
its ~30-field job once.

A finished job's history ends with its terminal event, unless an operator replays it:
a change to a job that was finished and stays finished carries no event (a late
attempt's own ending is still written on its attempt row, so every call stays
explained), and the changes that only record something about a job (a duplicate
delivery, a re-sent message) are not made for a finished job at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.core import job as rules
from ferryman.core.errors import FailureClass, IllegalTransitionError, StaleFenceError
from ferryman.core.job import (
    DEAD_LETTERED_CODE,
    PROVIDER_PAUSED,
    Attempt,
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    Event,
    EventKind,
    Job,
    JobError,
    JobStatus,
    JobUpdate,
)

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True, slots=True)
class AttemptEnding:
    """How an attempt ended, to be written onto its row.

    An attempt keeps its first ending, except that ``abandoned`` (set by a takeover or
    a dead-letter while its worker was out of sight) may be replaced by the worker's
    own account when ``replaces_abandoned``: the worker survived and knows better.
    """

    attempt_id: str
    ended_at: float
    report: AttemptReport
    replaces_abandoned: bool = False


@dataclass(frozen=True, slots=True)
class Change:
    before: Job | None  # None: the job is new
    after: Job
    at: float  # when the change happens (the caller's clock)
    events: tuple[Event, ...] = ()
    opened: Attempt | None = None
    closed: tuple[AttemptEnding, ...] = ()
    # A new queue message goes with this change (engines that enqueue with the job).
    enqueue: bool = False

    @property
    def job_id(self) -> str:
        return self.after.job_id

    @property
    def expected_revision(self) -> int:
        """The revision the stored job must still have for this change to apply."""
        return 0 if self.before is None else self.before.revision

    @property
    def backlog_delta(self) -> int:
        """How the tenant's count of unfinished jobs moves (quotas)."""
        was = self.before is not None and not self.before.status.terminal
        return int(not self.after.status.terminal) - int(was)

    @property
    def changes_status(self) -> bool:
        """This change moves an existing job to another status (a claim, an outcome, a
        retry, a cancel, a release, a replay): engines nudge the status watchers (a
        client waiting on the job) when it is stored. A new job is nobody's news yet."""
        return self.before is not None and self.before.status is not self.after.status

    @property
    def stops_running_attempt(self) -> bool:
        """This change asks the attempt running the job to stop (a cancel request that
        found it PROCESSING): engines nudge the worker's cancel check when it is stored."""
        asked_before = self.before is not None and self.before.cancel_requested
        return (
            self.after.cancel_requested
            and not asked_before
            and self.after.status is JobStatus.PROCESSING
        )


def _change(
    before: Job | None,
    job: Job,
    update: JobUpdate,
    *,
    now: float,
    events: Sequence[tuple[EventKind, dict[str, Any]]] = (),
    opened: Attempt | None = None,
    closed: Sequence[AttemptEnding] = (),
    enqueue: bool = False,
) -> Change:
    """The change that gives ``job`` (``before``, or a new job when that is None) the
    rule's ``update``, this change's revision and its events' numbers."""
    revision = 0 if before is None else before.revision
    seq = 0 if before is None else before.event_seq
    if (
        events
        and before is not None
        and before.status.terminal
        and update.get("status", before.status).terminal
        and any(kind not in _AFTER_THE_END for kind, _ in events)
    ):
        raise IllegalTransitionError("a finished job's history ends with its terminal event")
    job_id = job.job_id
    # A list made, then frozen: cheaper than a generator for the one or two events.
    numbered = tuple(
        [
            Event(job_id=job_id, seq=seq + i, at=now, kind=kind, detail=detail)
            for i, (kind, detail) in enumerate(events, start=1)
        ]
    )
    event_seq = seq + len(numbered)
    if job.webhook_url is not None:
        _owe_webhook(before, update, now=now, event_seq=event_seq)
    # The one copy of the job this change makes.
    after = dataclasses.replace(job, **update, revision=revision + 1, event_seq=event_seq)
    return Change(
        before=before,
        after=after,
        at=now,
        events=numbered,
        opened=opened,
        closed=tuple(closed),
        enqueue=enqueue,
    )


# The events a finished job may still take: its webhook's delivery attempts.
_AFTER_THE_END = frozenset({EventKind.WEBHOOK_DELIVERED, EventKind.WEBHOOK_FAILED})


def _owe_webhook(before: Job | None, update: JobUpdate, *, now: float, event_seq: int) -> None:
    """The webhook outbox, written by the change that moves the job: a change that
    finishes a job with a ``webhook_url`` owes one notification, due now, about its
    terminal event; a replay drops a notification still owed for the outcome it undoes
    (the next outcome is notified instead)."""
    was_terminal = before is not None and before.status.terminal
    status = update.get("status", before.status if before is not None else None)
    if status is None:
        return
    if status.terminal and not was_terminal:
        update["webhook_due_at"] = now
        update["webhook_attempts"] = 0
        update["webhook_event_seq"] = event_seq
    elif was_terminal and not status.terminal:
        update["webhook_due_at"] = None


def _error_detail(error: JobError) -> dict[str, Any]:
    return {"error_code": error.code, "failure_class": str(error.failure_class)}


# --- intake and dispatch ------------------------------------------------------------


def accept(job: Job, *, now: float, dispatched: bool) -> Change:
    """A new job. ``dispatched``: the engine writes its message in the same transaction."""
    update = JobUpdate(
        status=JobStatus.QUEUED,
        dispatch_state=DispatchState.DISPATCHED if dispatched else DispatchState.PENDING,
    )
    events: list[tuple[EventKind, dict[str, Any]]] = [(EventKind.ACCEPTED, {})]
    if dispatched:
        events.append((EventKind.DISPATCHED, {}))
    return _change(None, job, update, now=now, events=events, enqueue=dispatched)


def mark_dispatched(
    job: Job, *, now: float, redispatch: bool, enqueue: bool = False
) -> Change | None:
    """The job's message was sent now: by the outbox path after intake or replay, or
    again by the sweeper (``redispatch``). updated_at moves, so the stalled scan waits
    for the job to stall anew before offering it again. ``enqueue``: the message goes
    with this change (engines that enqueue with the job), so a job that finished
    meanwhile gets no message at all. None for a finished job: it needs no message,
    and its history has ended."""
    if job.status.terminal:
        return None
    update = JobUpdate(dispatch_state=DispatchState.DISPATCHED, updated_at=now)
    if redispatch:
        detail = {"status": str(job.status), "dispatch_state": str(job.dispatch_state)}
        events = [(EventKind.REDISPATCHED, detail)]
    elif job.dispatch_state is DispatchState.PENDING:
        events = [(EventKind.DISPATCHED, {})]
    else:
        events = []
    return _change(job, job, update, now=now, events=events, enqueue=enqueue)


# --- the worker's claim -------------------------------------------------------------


def claim(
    job: Job,
    *,
    attempt_id: str,
    worker_id: str,
    now: float,
    lease_until: float,
    max_deliveries_without_outcome: int,
) -> Change:
    """Claim the job for a new attempt, taking over an expired one (closed as abandoned).

    A takeover is one more delivery that ended without an outcome; once they reach
    ``max_deliveries_without_outcome`` the job is dead-lettered instead of invoked
    again (FAILED, ``dead_lettered``), whatever the queue's receive counts say.
    Raises IllegalTransitionError when the job cannot be claimed now.
    """
    claimed = rules.claim(
        job, attempt_id=attempt_id, worker_id=worker_id, now=now, lease_until=lease_until
    )
    abandoned = rules.abandoned_attempt_id(job, now=now)
    events: list[tuple[EventKind, dict[str, Any]]] = []
    closed: list[AttemptEnding] = []
    if abandoned is not None:
        closed.append(_abandoned(abandoned, now))
        events.append((EventKind.ATTEMPT_ABANDONED, {"attempt_id": abandoned}))
    deliveries = claimed["deliveries_without_outcome"]
    if deliveries >= max_deliveries_without_outcome:
        return _dead_letter(job, deliveries, now, events, closed)
    attempt_no = claimed["fence"]
    opened = Attempt(
        job_id=job.job_id,
        attempt_no=attempt_no,
        attempt_id=attempt_id,
        worker_id=worker_id,
        started_at=now,
        tenant_id=job.tenant_id,
        task=job.task,
        model=job.model,
    )
    detail = {"attempt_id": attempt_id, "attempt_no": attempt_no, "worker_id": worker_id}
    events.append((EventKind.CLAIMED, detail))
    return _change(job, job, claimed, now=now, events=events, opened=opened, closed=closed)


def _dead_letter(
    job: Job,
    deliveries: int,
    now: float,
    events: list[tuple[EventKind, dict[str, Any]]],
    closed: list[AttemptEnding],
) -> Change:
    error = JobError(
        code=DEAD_LETTERED_CODE,
        failure_class=FailureClass.DELIVERY,
        message=f"{deliveries} deliveries of this job ended without any attempt "
        "recording an outcome (crashes or lost leases)",
    )
    update = rules.fail_unowned(job, now=now, error=error)
    update["deliveries_without_outcome"] = deliveries
    events.append((EventKind.DEAD_LETTERED, {"deliveries_without_outcome": deliveries}))
    return _change(job, job, update, now=now, events=events, closed=closed)


def _abandoned(attempt_id: str, now: float) -> AttemptEnding:
    return AttemptEnding(
        attempt_id=attempt_id,
        ended_at=now,
        report=AttemptReport(outcome=AttemptOutcome.ABANDONED),
    )


def renew_lease(job: Job, *, attempt_id: str, now: float, lease_until: float) -> Change:
    """The owner's heartbeat. Raises StaleFenceError when it no longer owns the job."""
    renewed = rules.renew_lease(job, attempt_id=attempt_id, now=now, lease_until=lease_until)
    return _change(job, job, renewed, now=now)


# --- how the owning attempt ends ----------------------------------------------------
# A requested cancel wins over every ending: success, retry or failure. The attempt
# keeps its own account (failure class, tokens), but its outcome is ``cancelled``
# and the job ends CANCELLED.


def succeed(
    job: Job, *, attempt_id: str, now: float, result_ref: str, report: AttemptReport
) -> Change:
    """Publish. Raises StaleFenceError when the attempt no longer owns the job."""
    if _cancel_wins(job, attempt_id, now):
        return _owner_cancelled(job, attempt_id, now, report)
    update = rules.succeed(job, attempt_id=attempt_id, now=now, result_ref=result_ref)
    return _owner_ends(
        job, update, attempt_id, now, report, EventKind.SUCCEEDED, {"result_ref": result_ref}
    )


def schedule_retry(
    job: Job,
    *,
    attempt_id: str,
    now: float,
    not_before: float,
    error: JobError,
    report: AttemptReport,
    fall_back_to: str | None = None,
) -> Change:
    """``fall_back_to``: the fallback model the job moves on to (its name, for the event)."""
    if _cancel_wins(job, attempt_id, now):
        return _owner_cancelled(job, attempt_id, now, report)
    update = rules.schedule_retry(
        job,
        attempt_id=attempt_id,
        now=now,
        not_before=not_before,
        error=error,
        fall_back=fall_back_to is not None,
    )
    detail: dict[str, Any] = {"not_before": not_before, **_error_detail(error)}
    if fall_back_to is not None:
        detail["fallback_model"] = fall_back_to
    return _owner_ends(job, update, attempt_id, now, report, EventKind.RETRY_SCHEDULED, detail)


def fail(
    job: Job, *, attempt_id: str, now: float, error: JobError, report: AttemptReport
) -> Change:
    if _cancel_wins(job, attempt_id, now):
        return _owner_cancelled(job, attempt_id, now, report)
    # A delivery-level failure spends no model-failure budget.
    counts = error.failure_class is not FailureClass.DELIVERY
    update = rules.fail(job, attempt_id=attempt_id, now=now, error=error, counts=counts)
    return _owner_ends(job, update, attempt_id, now, report, EventKind.FAILED, _error_detail(error))


def finish_cancelled(job: Job, *, attempt_id: str, now: float, report: AttemptReport) -> Change:
    """The owner stopped its call because a cancel was requested."""
    if not rules.is_owned_by(job, attempt_id, now=now):
        raise StaleFenceError()
    return _owner_cancelled(job, attempt_id, now, report)


def release(job: Job, *, attempt_id: str, now: float, report: AttemptReport) -> Change:
    """The owner gives the job back (shutdown): the attempt ends abandoned, one RELEASED."""
    update = rules.release(job, attempt_id=attempt_id, now=now)
    return _owner_ends(job, update, attempt_id, now, report, EventKind.RELEASED, {})


def wait_for_provider(
    job: Job, *, attempt_id: str, now: float, error: JobError, report: AttemptReport
) -> Change:
    """The owner gives the job back to wait for its paused provider (core.job's rule):
    one RELEASED saying so, with the refusal. A requested cancel wins."""
    if _cancel_wins(job, attempt_id, now):
        return _owner_cancelled(job, attempt_id, now, report)
    update = rules.wait_for_provider(job, attempt_id=attempt_id, now=now, error=error)
    detail = {"reason": PROVIDER_PAUSED, **_error_detail(error)}
    return _owner_ends(job, update, attempt_id, now, report, EventKind.RELEASED, detail)


def lease_lost(
    job: Job, attempt: Attempt | None, *, now: float, report: AttemptReport
) -> Change | None:
    """An attempt that lost its lease says so; the job itself is someone else's now.

    None when the attempt already ended with an outcome of its own (only a takeover's
    ``abandoned`` is corrected), so the fact is recorded once. On a job that has
    finished meanwhile the attempt row still gets its account (what its call did and
    cost), but no event follows the terminal one."""
    if attempt is None or attempt.outcome not in (None, AttemptOutcome.ABANDONED):
        return None
    attempt_id = attempt.attempt_id
    ending = AttemptEnding(
        attempt_id=attempt_id, ended_at=now, report=report, replaces_abandoned=True
    )
    events = [] if job.status.terminal else [(EventKind.LEASE_LOST, {"attempt_id": attempt_id})]
    return _change(job, job, JobUpdate(), now=now, events=events, closed=[ending])


def _cancel_wins(job: Job, attempt_id: str, now: float) -> bool:
    if not rules.is_owned_by(job, attempt_id, now=now):
        raise StaleFenceError()
    return job.cancel_requested


def _owner_cancelled(job: Job, attempt_id: str, now: float, report: AttemptReport) -> Change:
    update = rules.cancelled(job, now=now)
    cancelled = dataclasses.replace(report, outcome=AttemptOutcome.CANCELLED)
    return _owner_ends(job, update, attempt_id, now, cancelled, EventKind.CANCELLED, {})


def _owner_ends(
    before: Job,
    update: JobUpdate,
    attempt_id: str,
    now: float,
    report: AttemptReport,
    kind: EventKind,
    detail: dict[str, Any],
) -> Change:
    ending = AttemptEnding(attempt_id=attempt_id, ended_at=now, report=report)
    events = [(kind, {"attempt_id": attempt_id, **detail})]
    return _change(before, before, update, now=now, events=events, closed=[ending])


# --- clients, operators and the sweeper ----------------------------------------------


def request_cancel(job: Job, *, now: float) -> Change | None:
    """A waiting job is CANCELLED at once; a running one is asked to stop. None when
    the cancel was already requested (nothing new happens, nothing is recorded).
    Raises IllegalTransitionError for a finished job."""
    update = rules.request_cancel(job, now=now)
    if not update:
        return None
    cancelled = update.get("status", job.status).terminal
    kind = EventKind.CANCELLED if cancelled else EventKind.CANCEL_REQUESTED
    return _change(job, job, update, now=now, events=[(kind, {})])


def fail_unowned(
    job: Job, *, now: float, error: JobError, kind: EventKind, detail: dict[str, Any]
) -> Change:
    """Fail a job no live attempt owns; an attempt left open by a crash ends abandoned.
    Raises IllegalTransitionError when the job is finished or a live attempt owns it."""
    update = rules.fail_unowned(job, now=now, error=error)
    closed = []
    if job.status is JobStatus.PROCESSING and job.attempt_id is not None:
        closed.append(_abandoned(job.attempt_id, now))
    return _change(job, job, update, now=now, events=[(kind, dict(detail))], closed=closed)


def replay(
    job: Job,
    *,
    now: float,
    actor: str,
    reason: str,
    include_failed: bool,
    dispatched: bool,
) -> Change:
    """An operator's replay (core.job.replay) with a REPLAYED event saying who and why."""
    update = rules.replay(job, now=now, include_failed=include_failed)
    events: list[tuple[EventKind, dict[str, Any]]] = [
        (EventKind.REPLAYED, {"actor": actor, "reason": reason})
    ]
    if dispatched:
        update["dispatch_state"] = DispatchState.DISPATCHED
        events.append((EventKind.DISPATCHED, {}))
    return _change(job, job, update, now=now, events=events, enqueue=dispatched)


def note(job: Job, kind: EventKind, *, now: float, detail: dict[str, Any]) -> Change | None:
    """An event about the job that changes nothing else (a duplicate delivery). None
    for a finished job: its history ends with its terminal event."""
    if job.status.terminal:
        return None
    return _change(job, job, JobUpdate(), now=now, events=[(kind, dict(detail))])


# --- the completion webhook ---------------------------------------------------------


def claim_webhook(job: Job, *, now: float, lease_until: float) -> Change:
    """A dispatcher takes the job's owed notification for one delivery attempt: it is
    not due again before ``lease_until`` (another dispatcher takes it over then, if this
    one never reports). Raises IllegalTransitionError when nothing is owed or it is not
    due yet (another dispatcher took it first)."""
    if job.webhook_due_at is None or job.webhook_due_at > now:
        raise IllegalTransitionError("no webhook notification is due for this job")
    update = JobUpdate(webhook_due_at=lease_until, webhook_attempts=job.webhook_attempts + 1)
    return _change(job, job, update, now=now)


def webhook_attempted(
    job: Job,
    *,
    now: float,
    event_seq: int,
    attempt_no: int,
    delivered: bool,
    next_due_at: float | None,
    detail: dict[str, Any],
) -> Change | None:
    """Record one delivery attempt of the notification about event ``event_seq``, as
    attempt ``attempt_no``: WEBHOOK_DELIVERED, or WEBHOOK_FAILED with the next attempt
    due at ``next_due_at`` (None: no more attempts). None when the attempt no longer
    owns the notification (a replay, or a dispatcher that took it over after this one's
    lease): its report changes nothing."""
    if (
        job.webhook_event_seq != event_seq
        or job.webhook_attempts != attempt_no
        or job.webhook_due_at is None
    ):
        return None
    kind = EventKind.WEBHOOK_DELIVERED if delivered else EventKind.WEBHOOK_FAILED
    update = JobUpdate(webhook_due_at=None if delivered else next_due_at)
    return _change(job, job, update, now=now, events=[(kind, dict(detail))])
