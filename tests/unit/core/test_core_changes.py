"""core.changes: which events and attempt rows go with each transition, once.

Every engine persists a Change as given, so what is written here is what every engine
writes: the job after the transition (revision +1), its events numbered after the
job's last one, and the attempt rows opened or closed.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Callable
from typing import Any

import pytest

from ferryman.core import changes
from ferryman.core import job as rules
from ferryman.core.changes import AttemptEnding, Change
from ferryman.core.errors import FailureClass, IllegalTransitionError, StaleFenceError
from ferryman.core.job import (
    DEAD_LETTERED_CODE,
    Attempt,
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    Job,
    JobError,
    JobStatus,
    JobUpdate,
)

# A hundred seconds after the jobs of job_factory were created.
NOW = 1_700_000_100.0
LEASE_UNTIL = NOW + 60.0
OWNER = "att_owner"
TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")
UNAUTHORIZED = JobError(
    code="unauthorized", failure_class=FailureClass.UNAUTHORIZED, message="key refused"
)
INVALID = JobError(code="invalid_output", failure_class=FailureClass.INVALID_OUTPUT, message="x")
DELIVERY = JobError(code="poison", failure_class=FailureClass.DELIVERY, message="crash loop")
REPORT = AttemptReport(
    outcome=AttemptOutcome.SUCCEEDED,
    latency_ms=120,
    input_tokens=3,
    output_tokens=5,
    provider_request_id="req-1",
)


class Jobs:
    """Jobs in the states the transitions start from, made with job_factory."""

    def __init__(self, make: Callable[..., Job]) -> None:
        self.make = make

    def owned(self, **overrides: Any) -> Job:
        """PROCESSING under OWNER, with a live lease and some history behind it."""
        fields: dict[str, Any] = {
            "status": JobStatus.PROCESSING,
            "dispatch_state": DispatchState.DISPATCHED,
            "attempt_id": OWNER,
            "worker_id": "w1",
            "lease_until": LEASE_UNTIL,
            "fence": 2,
            "attempt_count": 2,
            "failure_count": 1,
            "revision": 7,
            "event_seq": 11,
        }
        return self.make(**{**fields, **overrides})

    def waiting(self, **overrides: Any) -> Job:
        fields: dict[str, Any] = {
            "dispatch_state": DispatchState.DISPATCHED,
            "revision": 3,
            "event_seq": 4,
        }
        return self.make(**{**fields, **overrides})

    def expired(self, **overrides: Any) -> Job:
        """PROCESSING, but its owner's lease ended before NOW: a takeover."""
        return self.owned(lease_until=NOW - 1, **overrides)

    def failed(self, error: JobError = DELIVERY) -> Job:
        return self.waiting(status=JobStatus.FAILED, error=error, completed_at=NOW - 5, fence=3)


@pytest.fixture
def jobs(job_factory: Callable[..., Job]) -> Jobs:
    return Jobs(job_factory)


def kinds(change: Change) -> list[EventKind]:
    return [event.kind for event in change.events]


def facts(job: Job) -> Job:
    """The job without the bookkeeping every change advances."""
    return dataclasses.replace(job, revision=0, event_seq=0)


def ending(report: AttemptReport = REPORT, **overrides: Any) -> AttemptEnding:
    return AttemptEnding(attempt_id=OWNER, ended_at=NOW, report=report, **overrides)


def _claim(job: Job, *, max_deliveries: int = 10) -> Change:
    return changes.claim(
        job,
        attempt_id="att_new",
        worker_id="w2",
        now=NOW,
        lease_until=NOW + 30,
        max_deliveries_without_outcome=max_deliveries,
    )


# --- bookkeeping: revision and event numbers -----------------------------------------

TRANSITIONS: dict[str, tuple[Callable[[Jobs], Job], Callable[[Job], Change | None]]] = {
    "mark_dispatched": (
        lambda jobs: jobs.waiting(dispatch_state=DispatchState.PENDING),
        lambda job: changes.mark_dispatched(job, now=NOW, redispatch=False),
    ),
    "redispatch": (
        Jobs.waiting,
        lambda job: changes.mark_dispatched(job, now=NOW, redispatch=True),
    ),
    "claim": (Jobs.waiting, _claim),
    "takeover": (Jobs.expired, _claim),
    "dead_letter": (lambda jobs: jobs.expired(deliveries_without_outcome=9), _claim),
    "renew_lease": (
        Jobs.owned,
        lambda job: changes.renew_lease(job, attempt_id=OWNER, now=NOW, lease_until=NOW + 90),
    ),
    "succeed": (
        Jobs.owned,
        lambda job: changes.succeed(
            job, attempt_id=OWNER, now=NOW, result_ref="ref", report=REPORT
        ),
    ),
    "schedule_retry": (
        Jobs.owned,
        lambda job: changes.schedule_retry(
            job, attempt_id=OWNER, now=NOW, not_before=NOW + 5, error=TRANSIENT, report=REPORT
        ),
    ),
    "fail": (
        Jobs.owned,
        lambda job: changes.fail(job, attempt_id=OWNER, now=NOW, error=TRANSIENT, report=REPORT),
    ),
    "wait_for_provider": (
        Jobs.owned,
        lambda job: changes.wait_for_provider(
            job, attempt_id=OWNER, now=NOW, error=UNAUTHORIZED, report=REPORT
        ),
    ),
    "finish_cancelled": (
        lambda jobs: jobs.owned(cancel_requested=True),
        lambda job: changes.finish_cancelled(job, attempt_id=OWNER, now=NOW, report=REPORT),
    ),
    "release": (
        Jobs.owned,
        lambda job: changes.release(job, attempt_id=OWNER, now=NOW, report=REPORT),
    ),
    "lease_lost": (
        Jobs.expired,
        lambda job: changes.lease_lost(
            job,
            Attempt(
                job_id=job.job_id, attempt_no=2, attempt_id=OWNER, worker_id="w1", started_at=0
            ),
            now=NOW,
            report=REPORT,
        ),
    ),
    "request_cancel": (Jobs.waiting, lambda job: changes.request_cancel(job, now=NOW)),
    "request_cancel_running": (Jobs.owned, lambda job: changes.request_cancel(job, now=NOW)),
    "fail_unowned": (
        Jobs.expired,
        lambda job: changes.fail_unowned(
            job, now=NOW, error=DELIVERY, kind=EventKind.DEAD_LETTERED, detail={"n": 1}
        ),
    ),
    "replay": (
        Jobs.failed,
        lambda job: changes.replay(
            job, now=NOW, actor="op", reason="fixed", include_failed=False, dispatched=True
        ),
    ),
    "note": (
        Jobs.waiting,
        lambda job: changes.note(job, EventKind.DUPLICATE_DELIVERY, now=NOW, detail={}),
    ),
}


@pytest.mark.parametrize("name", list(TRANSITIONS))
def test_every_change_is_one_revision_with_events_numbered_after_the_last(
    name: str, jobs: Jobs
) -> None:
    make, transition = TRANSITIONS[name]
    before = make(jobs)

    change = transition(before)

    assert change is not None
    assert change.before is before
    assert change.expected_revision == before.revision
    assert change.after.revision == before.revision + 1
    assert change.at == NOW
    assert change.job_id == before.job_id
    seqs = [event.seq for event in change.events]
    assert seqs == list(range(before.event_seq + 1, before.event_seq + 1 + len(seqs)))
    assert change.after.event_seq == before.event_seq + len(seqs)
    assert all(event.job_id == before.job_id and event.at == NOW for event in change.events)


def test_a_change_leaves_the_job_it_was_computed_from_alone(jobs: Jobs) -> None:
    for make, transition in TRANSITIONS.values():
        before = make(jobs)
        snapshot = dataclasses.replace(before)
        transition(before)
        assert before == snapshot


def test_a_rules_update_names_fields_of_the_job_typed_as_on_the_job() -> None:
    # What the update leaves out is not a rule's to change: what intake fixed, and the
    # revision and event number only a change sets.
    job_types = typing.get_type_hints(Job)
    update_types = typing.get_type_hints(JobUpdate)
    assert update_types.items() <= job_types.items()
    assert {"revision", "event_seq", "tenant_id", "job_id", "input"}.isdisjoint(update_types)


# --- intake and dispatch ---------------------------------------------------------------


@pytest.mark.parametrize("dispatched", [True, False])
def test_accept_starts_the_history_of_a_new_job(dispatched: bool, jobs: Jobs) -> None:
    # Whatever bookkeeping the caller's Job carried, a new job's history starts at one.
    job = jobs.make(revision=5, event_seq=9, status=JobStatus.FAILED)

    change = changes.accept(job, now=NOW, dispatched=dispatched)

    assert change.before is None
    assert change.expected_revision == 0
    assert change.after.status is JobStatus.QUEUED
    assert change.after.revision == 1
    expected = [EventKind.ACCEPTED, EventKind.DISPATCHED] if dispatched else [EventKind.ACCEPTED]
    assert kinds(change) == expected
    assert [event.seq for event in change.events] == list(range(1, len(expected) + 1))
    assert change.after.event_seq == len(expected)
    assert change.enqueue is dispatched
    assert change.after.dispatch_state is (
        DispatchState.DISPATCHED if dispatched else DispatchState.PENDING
    )
    assert (change.opened, change.closed) == (None, ())
    assert change.backlog_delta == 1


def test_the_first_dispatch_of_a_pending_job_is_recorded(jobs: Jobs) -> None:
    job = jobs.waiting(dispatch_state=DispatchState.PENDING)

    change = changes.mark_dispatched(job, now=NOW, redispatch=False)

    assert facts(change.after) == facts(
        dataclasses.replace(job, dispatch_state=DispatchState.DISPATCHED, updated_at=NOW)
    )
    assert kinds(change) == [EventKind.DISPATCHED]
    assert change.events[0].detail == {}
    assert change.enqueue is False


def test_marking_a_dispatched_job_again_records_nothing_but_moves_updated_at(jobs: Jobs) -> None:
    job = jobs.waiting()

    change = changes.mark_dispatched(job, now=NOW, redispatch=False)

    assert change.events == ()
    assert change.after.updated_at == NOW
    assert change.after.dispatch_state is DispatchState.DISPATCHED


@pytest.mark.parametrize("state", list(DispatchState))
def test_a_redispatch_says_what_the_sweeper_found(state: DispatchState, jobs: Jobs) -> None:
    job = jobs.waiting(status=JobStatus.RETRY_SCHEDULED, dispatch_state=state)

    change = changes.mark_dispatched(job, now=NOW, redispatch=True)

    [event] = change.events
    assert event.kind is EventKind.REDISPATCHED
    assert event.detail == {"status": "RETRY_SCHEDULED", "dispatch_state": str(state)}
    # updated_at moves, so the stalled scan waits for the job to stall anew.
    assert change.after.updated_at == NOW
    assert change.after.dispatch_state is DispatchState.DISPATCHED


# --- claim -----------------------------------------------------------------------------


def test_a_claim_opens_the_attempt_numbered_by_the_new_fence(jobs: Jobs) -> None:
    job = jobs.waiting(fence=4)

    change = _claim(job)

    # It carries whose job, which task and which model alias, for usage reports.
    assert change.opened == Attempt(
        job_id=job.job_id,
        attempt_no=5,
        attempt_id="att_new",
        worker_id="w2",
        started_at=NOW,
        tenant_id=job.tenant_id,
        task=job.task,
        model=job.model,
    )
    assert change.closed == ()
    [event] = change.events
    assert event.kind is EventKind.CLAIMED
    assert event.detail == {"attempt_id": "att_new", "attempt_no": 5, "worker_id": "w2"}
    assert change.after.status is JobStatus.PROCESSING
    assert change.after.deliveries_without_outcome == 0


def test_a_takeover_closes_the_silent_attempt_as_abandoned_and_counts_a_delivery(
    jobs: Jobs,
) -> None:
    job = jobs.expired(deliveries_without_outcome=2)

    change = _claim(job)

    assert change.closed == (
        AttemptEnding(
            attempt_id=OWNER,
            ended_at=NOW,
            report=AttemptReport(outcome=AttemptOutcome.ABANDONED),
        ),
    )
    assert kinds(change) == [EventKind.ATTEMPT_ABANDONED, EventKind.CLAIMED]
    assert change.events[0].detail == {"attempt_id": OWNER}
    assert change.opened is not None and change.opened.attempt_id == "att_new"
    assert change.after.deliveries_without_outcome == 3
    assert change.after.attempt_id == "att_new"


def test_the_takeover_that_reaches_the_delivery_budget_dead_letters_instead(jobs: Jobs) -> None:
    job = jobs.expired(deliveries_without_outcome=2)

    change = _claim(job, max_deliveries=3)

    after = change.after
    assert after.status is JobStatus.FAILED
    assert after.error is not None
    assert (after.error.code, after.error.failure_class) == (
        DEAD_LETTERED_CODE,
        FailureClass.DELIVERY,
    )
    assert after.error.message == (
        "3 deliveries of this job ended without any attempt recording an outcome"
        " (crashes or lost leases)"
    )
    assert after.deliveries_without_outcome == 3
    assert (after.completed_at, after.updated_at, after.lease_until) == (NOW, NOW, None)
    # No attempt is started: no attempt number, no model-failure budget is spent.
    assert change.opened is None
    assert (after.fence, after.attempt_count) == (job.fence, job.attempt_count)
    assert (after.failure_count, after.invalid_output_count) == (
        job.failure_count,
        job.invalid_output_count,
    )
    assert change.closed == (
        AttemptEnding(
            attempt_id=OWNER,
            ended_at=NOW,
            report=AttemptReport(outcome=AttemptOutcome.ABANDONED),
        ),
    )
    assert kinds(change) == [EventKind.ATTEMPT_ABANDONED, EventKind.DEAD_LETTERED]
    assert change.events[1].detail == {"deliveries_without_outcome": 3}
    assert change.backlog_delta == -1


def _replayed(dead: Job, *, now: float) -> Job:
    """A dead-lettered job as an operator's replay leaves it."""
    return changes.replay(
        dead, now=now, actor="ops", reason="r", include_failed=False, dispatched=False
    ).after


def test_a_replay_gives_a_dead_lettered_job_its_whole_delivery_budget_again(
    jobs: Jobs,
) -> None:
    dead = _claim(jobs.expired(deliveries_without_outcome=2), max_deliveries=3).after
    assert dead.deliveries_without_outcome == 3

    replayed = _replayed(dead, now=NOW + 1)

    assert replayed.deliveries_without_outcome == 0
    # Its next delivery runs it rather than dead-lettering it again at once.
    claimed = changes.claim(
        replayed,
        attempt_id="att_again",
        worker_id="w2",
        now=NOW + 2,
        lease_until=NOW + 32,
        max_deliveries_without_outcome=1,
    )
    assert claimed.after.status is JobStatus.PROCESSING


def test_one_takeover_short_of_the_budget_still_claims(jobs: Jobs) -> None:
    change = _claim(jobs.expired(deliveries_without_outcome=1), max_deliveries=3)

    assert change.after.status is JobStatus.PROCESSING
    assert change.after.deliveries_without_outcome == 2
    assert change.opened is not None


def test_a_claim_that_takes_over_nothing_never_dead_letters(jobs: Jobs) -> None:
    # A budget of one delivery: the first claim runs; only a takeover spends it.
    assert _claim(jobs.waiting(), max_deliveries=1).after.status is JobStatus.PROCESSING
    assert _claim(jobs.expired(), max_deliveries=1).after.status is JobStatus.FAILED


def test_a_job_that_is_not_claimable_is_refused(jobs: Jobs) -> None:
    for job in (
        jobs.owned(),  # a live owner
        jobs.waiting(status=JobStatus.SUCCEEDED),
        jobs.waiting(not_before=NOW + 1),  # not due yet
    ):
        with pytest.raises(IllegalTransitionError) as refused:
            _claim(job)
        assert str(refused.value) == f"job in {job.status} cannot be claimed now"


# --- the owner's heartbeat and endings -------------------------------------------------


def test_a_heartbeat_writes_only_the_lease(jobs: Jobs) -> None:
    job = jobs.owned()

    change = changes.renew_lease(job, attempt_id=OWNER, now=NOW, lease_until=NOW + 90)

    assert facts(change.after) == facts(dataclasses.replace(job, lease_until=NOW + 90))
    assert (change.events, change.opened, change.closed) == ((), None, ())


def test_succeed_publishes_and_closes_the_attempt_with_its_report(jobs: Jobs) -> None:
    job = jobs.owned(error=TRANSIENT)

    change = changes.succeed(job, attempt_id=OWNER, now=NOW, result_ref="ref-1", report=REPORT)

    assert change.after.status is JobStatus.SUCCEEDED
    assert change.after.result_ref == "ref-1"
    assert change.after.error is None
    assert change.after.updated_at == NOW
    assert change.closed == (ending(),)
    [event] = change.events
    assert event.kind is EventKind.SUCCEEDED
    assert event.detail == {"attempt_id": OWNER, "result_ref": "ref-1"}
    assert change.backlog_delta == -1


def test_schedule_retry_says_when_and_why(jobs: Jobs) -> None:
    job = jobs.owned()

    change = changes.schedule_retry(
        job, attempt_id=OWNER, now=NOW, not_before=NOW + 5, error=INVALID, report=REPORT
    )

    assert change.after.status is JobStatus.RETRY_SCHEDULED
    assert (change.after.failure_count, change.after.invalid_output_count) == (2, 1)
    assert (change.after.not_before, change.after.updated_at) == (NOW + 5, NOW)
    assert change.closed == (ending(),)
    [event] = change.events
    assert event.kind is EventKind.RETRY_SCHEDULED
    assert event.detail == {
        "attempt_id": OWNER,
        "not_before": NOW + 5,
        "error_code": "invalid_output",
        "failure_class": "INVALID_OUTPUT",
    }
    assert change.backlog_delta == 0


def test_a_job_waits_for_its_paused_provider_in_the_queue_spending_nothing(jobs: Jobs) -> None:
    job = jobs.owned(failure_count=2, invalid_output_count=1, deliveries_without_outcome=1)

    change = changes.wait_for_provider(
        job, attempt_id=OWNER, now=NOW, error=UNAUTHORIZED, report=REPORT
    )

    after = change.after
    assert facts(after) == facts(
        dataclasses.replace(
            job,
            status=JobStatus.QUEUED,
            error=UNAUTHORIZED,
            attempt_id=None,
            worker_id=None,
            lease_until=None,
            not_before=None,
            updated_at=NOW,
        )
    )
    assert (after.failure_count, after.invalid_output_count) == (2, 1)  # untouched
    assert after.deliveries_without_outcome == 1
    assert after.fence == job.fence
    assert change.closed == (ending(),)
    [event] = change.events
    assert event.kind is EventKind.RELEASED
    assert event.detail == {
        "attempt_id": OWNER,
        "reason": "provider_paused",
        "error_code": "unauthorized",
        "failure_class": "UNAUTHORIZED",
    }
    assert change.backlog_delta == 0
    assert change.enqueue is False  # its message is put back by the worker, not sent anew


def test_only_the_owner_gives_a_job_back_to_wait_for_its_provider(jobs: Jobs) -> None:
    with pytest.raises(StaleFenceError):
        changes.wait_for_provider(
            jobs.owned(), attempt_id="att_other", now=NOW, error=UNAUTHORIZED, report=REPORT
        )
    with pytest.raises(StaleFenceError):
        changes.wait_for_provider(
            jobs.expired(), attempt_id=OWNER, now=NOW, error=UNAUTHORIZED, report=REPORT
        )


def test_a_retry_on_a_fallback_model_starts_its_budgets_afresh(jobs: Jobs) -> None:
    job = jobs.owned(failure_count=4, invalid_output_count=1, fallback_level=1)

    change = changes.schedule_retry(
        job,
        attempt_id=OWNER,
        now=NOW,
        not_before=NOW,
        error=INVALID,
        report=REPORT,
        fall_back_to="backup",
    )

    after = change.after
    assert (after.failure_count, after.invalid_output_count, after.fallback_level) == (0, 0, 2)


@pytest.mark.parametrize(
    ("error", "failures", "invalid_outputs"),
    [(TRANSIENT, 2, 0), (INVALID, 2, 1), (DELIVERY, 1, 0)],
    ids=["model-failure", "invalid-output", "delivery-failure"],
)
def test_fail_spends_the_model_budgets_only_for_a_model_failure(
    error: JobError, failures: int, invalid_outputs: int, jobs: Jobs
) -> None:
    job = jobs.owned(failure_count=1, invalid_output_count=0)

    change = changes.fail(job, attempt_id=OWNER, now=NOW, error=error, report=REPORT)

    after = change.after
    assert (after.status, after.error, after.updated_at) == (JobStatus.FAILED, error, NOW)
    assert (after.failure_count, after.invalid_output_count) == (failures, invalid_outputs)
    assert change.closed == (ending(),)
    [event] = change.events
    assert event.kind is EventKind.FAILED
    assert event.detail == {
        "attempt_id": OWNER,
        "error_code": error.code,
        "failure_class": str(error.failure_class),
    }


OWNER_ENDINGS: dict[str, Callable[[Job], Change]] = {
    "succeed": lambda job: changes.succeed(
        job, attempt_id=OWNER, now=NOW, result_ref="ref", report=REPORT
    ),
    "schedule_retry": lambda job: changes.schedule_retry(
        job, attempt_id=OWNER, now=NOW, not_before=NOW + 5, error=TRANSIENT, report=REPORT
    ),
    "fail": lambda job: changes.fail(
        job, attempt_id=OWNER, now=NOW, error=TRANSIENT, report=REPORT
    ),
    "wait_for_provider": lambda job: changes.wait_for_provider(
        job, attempt_id=OWNER, now=NOW, error=UNAUTHORIZED, report=REPORT
    ),
    "finish_cancelled": lambda job: changes.finish_cancelled(
        job, attempt_id=OWNER, now=NOW, report=REPORT
    ),
}


@pytest.mark.parametrize("name", list(OWNER_ENDINGS))
def test_a_requested_cancel_wins_over_every_ending_of_the_owner(name: str, jobs: Jobs) -> None:
    job = jobs.owned(cancel_requested=True, failure_count=1)

    change = OWNER_ENDINGS[name](job)

    after = change.after
    assert after.status is JobStatus.CANCELLED
    assert (after.completed_at, after.lease_until, after.result_ref) == (NOW, None, None)
    # Nothing of the ending it replaced: no budget spent, no error, no retry time.
    assert (after.failure_count, after.invalid_output_count) == (1, 0)
    assert (after.error, after.not_before) == (None, None)
    # The attempt keeps its own account, with the outcome ``cancelled``.
    cancelled = dataclasses.replace(REPORT, outcome=AttemptOutcome.CANCELLED)
    assert change.closed == (ending(cancelled),)
    [event] = change.events
    assert (event.kind, event.detail) == (EventKind.CANCELLED, {"attempt_id": OWNER})


@pytest.mark.parametrize("name", [*OWNER_ENDINGS, "release"])
def test_an_attempt_that_does_not_own_the_job_can_end_nothing(name: str, jobs: Jobs) -> None:
    def release(job: Job) -> Change:
        return changes.release(job, attempt_id=OWNER, now=NOW, report=REPORT)

    transition = release if name == "release" else OWNER_ENDINGS[name]
    for job in (
        jobs.owned(attempt_id="att_other"),
        jobs.expired(),
        jobs.expired(cancel_requested=True),
        jobs.owned(status=JobStatus.RETRY_SCHEDULED, lease_until=None),
    ):
        with pytest.raises(StaleFenceError):
            transition(job)


def test_a_release_gives_the_job_back_with_one_released_event(jobs: Jobs) -> None:
    job = jobs.owned(deliveries_without_outcome=1)
    report = AttemptReport(outcome=AttemptOutcome.ABANDONED, latency_ms=7)

    change = changes.release(job, attempt_id=OWNER, now=NOW, report=report)

    after = change.after
    assert (after.status, after.attempt_id, after.worker_id, after.lease_until) == (
        JobStatus.QUEUED,
        None,
        None,
        None,
    )
    # The attempt reported: a release is no delivery without an outcome.
    assert after.deliveries_without_outcome == 1
    assert change.closed == (ending(report),)
    assert [(e.kind, e.detail) for e in change.events] == [
        (EventKind.RELEASED, {"attempt_id": OWNER})
    ]
    assert change.opened is None
    assert change.backlog_delta == 0


# --- an attempt that lost its job ------------------------------------------------------


def _attempt(outcome: AttemptOutcome | None) -> Attempt:
    return Attempt(
        job_id="gen_01TEST",
        attempt_no=2,
        attempt_id=OWNER,
        worker_id="w1",
        started_at=NOW - 50,
        outcome=outcome,
    )


@pytest.mark.parametrize("outcome", [None, AttemptOutcome.ABANDONED])
def test_a_lost_lease_is_recorded_on_the_attempt_and_leaves_the_job_alone(
    outcome: AttemptOutcome | None, jobs: Jobs
) -> None:
    job = jobs.owned(attempt_id="att_other")
    report = AttemptReport(outcome=AttemptOutcome.LEASE_LOST, latency_ms=99)

    change = changes.lease_lost(job, _attempt(outcome), now=NOW, report=report)

    assert change is not None
    assert facts(change.after) == facts(job)
    assert change.closed == (ending(report, replaces_abandoned=True),)
    assert [(e.kind, e.detail) for e in change.events] == [
        (EventKind.LEASE_LOST, {"attempt_id": OWNER})
    ]


@pytest.mark.parametrize(
    "outcome", [o for o in AttemptOutcome if o is not AttemptOutcome.ABANDONED]
)
def test_an_attempt_that_already_has_its_own_outcome_is_not_ended_again(
    outcome: AttemptOutcome, jobs: Jobs
) -> None:
    report = AttemptReport(outcome=AttemptOutcome.LEASE_LOST)
    assert changes.lease_lost(jobs.owned(), _attempt(outcome), now=NOW, report=report) is None


def test_a_lost_lease_of_an_unknown_attempt_records_nothing(jobs: Jobs) -> None:
    report = AttemptReport(outcome=AttemptOutcome.LEASE_LOST)
    assert changes.lease_lost(jobs.owned(), None, now=NOW, report=report) is None


# --- clients, operators and the sweeper ------------------------------------------------


@pytest.mark.parametrize("status", [JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED])
def test_a_cancel_of_a_waiting_job_ends_it_at_once(status: JobStatus, jobs: Jobs) -> None:
    change = changes.request_cancel(jobs.waiting(status=status), now=NOW)

    assert change is not None
    assert change.after.status is JobStatus.CANCELLED
    assert [(e.kind, e.detail) for e in change.events] == [(EventKind.CANCELLED, {})]
    assert change.backlog_delta == -1


def test_a_cancel_of_a_running_job_asks_its_owner_once(jobs: Jobs) -> None:
    change = changes.request_cancel(jobs.owned(), now=NOW)

    assert change is not None
    assert change.after.status is JobStatus.PROCESSING
    assert change.after.cancel_requested is True
    assert [(e.kind, e.detail) for e in change.events] == [(EventKind.CANCEL_REQUESTED, {})]
    assert changes.request_cancel(change.after, now=NOW + 1) is None


@pytest.mark.parametrize("name", list(TRANSITIONS))
def test_only_a_cancel_that_finds_the_job_running_asks_its_worker_to_look_now(
    name: str, jobs: Jobs
) -> None:
    make, transition = TRANSITIONS[name]

    change = transition(make(jobs))

    assert change is not None
    # What engines nudge the worker's cancel check for: nothing else may wake it.
    assert change.stops_running_attempt is (name == "request_cancel_running")


def test_the_changes_of_a_running_job_after_its_cancel_was_asked_ask_nothing_new(
    jobs: Jobs,
) -> None:
    asked = jobs.owned(cancel_requested=True)

    renewed = changes.renew_lease(asked, attempt_id=OWNER, now=NOW, lease_until=LEASE_UNTIL + 1)
    noted = changes.note(asked, EventKind.DUPLICATE_DELIVERY, now=NOW, detail={})

    assert renewed.after.cancel_requested and noted.after.cancel_requested
    assert not renewed.stops_running_attempt
    assert not noted.stops_running_attempt


def test_fail_unowned_closes_an_attempt_a_crash_left_open(jobs: Jobs) -> None:
    detail = {"receive_count": 11}

    change = changes.fail_unowned(
        jobs.expired(), now=NOW, error=DELIVERY, kind=EventKind.DEAD_LETTERED, detail=detail
    )

    assert change.after.status is JobStatus.FAILED
    assert change.closed == (
        AttemptEnding(
            attempt_id=OWNER, ended_at=NOW, report=AttemptReport(outcome=AttemptOutcome.ABANDONED)
        ),
    )
    [event] = change.events
    assert (event.kind, event.detail) == (EventKind.DEAD_LETTERED, detail)
    assert event.detail is not detail  # the caller's dict is not shared with the record


def test_fail_unowned_of_a_waiting_job_ends_no_attempt(jobs: Jobs) -> None:
    # A retry keeps the id of the attempt that ended; that attempt has its outcome already.
    job = jobs.waiting(status=JobStatus.RETRY_SCHEDULED, attempt_id=OWNER, not_before=NOW + 5)

    change = changes.fail_unowned(job, now=NOW, error=TRANSIENT, kind=EventKind.FAILED, detail={})

    assert change.closed == ()
    assert kinds(change) == [EventKind.FAILED]


def test_fail_unowned_refuses_a_lease_that_is_live_to_its_last_instant(jobs: Jobs) -> None:
    job = jobs.owned(lease_until=NOW)
    with pytest.raises(IllegalTransitionError) as refused:
        changes.fail_unowned(job, now=NOW, error=DELIVERY, kind=EventKind.FAILED, detail={})
    assert str(refused.value) == "a live attempt owns the job"
    later = changes.fail_unowned(
        job, now=NOW + 0.001, error=DELIVERY, kind=EventKind.FAILED, detail={}
    )
    assert later.after.status is JobStatus.FAILED


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED])
def test_fail_unowned_leaves_a_finished_job_alone(jobs: Jobs, status: JobStatus) -> None:
    with pytest.raises(IllegalTransitionError):
        changes.fail_unowned(
            jobs.waiting(status=status), now=NOW, error=DELIVERY, kind=EventKind.FAILED, detail={}
        )


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.CANCELLED])
def test_a_refusal_of_a_finished_job_names_its_status(jobs: Jobs, status: JobStatus) -> None:
    job = jobs.waiting(status=status)
    expected = f"job is already {status}"
    for refuse in (
        lambda: changes.request_cancel(job, now=NOW),
        lambda: changes.fail_unowned(
            job, now=NOW, error=DELIVERY, kind=EventKind.FAILED, detail={}
        ),
        lambda: rules.cancelled(job, now=NOW),
    ):
        with pytest.raises(IllegalTransitionError) as refused:
            refuse()
        assert str(refused.value) == expected
    with pytest.raises(IllegalTransitionError) as refused:
        rules.replay(jobs.waiting(), now=NOW)
    assert str(refused.value) == "only FAILED jobs are replayed, not QUEUED"


def test_a_failure_spends_the_model_budget_unless_told_otherwise(jobs: Jobs) -> None:
    failed = rules.fail(jobs.owned(failure_count=1), attempt_id=OWNER, now=NOW, error=INVALID)
    assert (failed["failure_count"], failed["invalid_output_count"]) == (2, 1)


def test_a_replay_takes_only_dead_letters_unless_told_otherwise(jobs: Jobs) -> None:
    with pytest.raises(IllegalTransitionError):
        rules.replay(jobs.failed(TRANSIENT), now=NOW)
    assert rules.replay(jobs.failed(DELIVERY), now=NOW)["status"] is JobStatus.QUEUED


@pytest.mark.parametrize("dispatched", [True, False])
def test_a_replay_records_who_and_why_and_sends_a_message_where_the_engine_can(
    dispatched: bool, jobs: Jobs
) -> None:
    change = changes.replay(
        jobs.failed(),
        now=NOW,
        actor="ops",
        reason="fixed",
        include_failed=False,
        dispatched=dispatched,
    )

    assert change.after.status is JobStatus.QUEUED
    assert change.events[0].detail == {"actor": "ops", "reason": "fixed"}
    if dispatched:
        assert kinds(change) == [EventKind.REPLAYED, EventKind.DISPATCHED]
        assert change.after.dispatch_state is DispatchState.DISPATCHED
    else:
        assert kinds(change) == [EventKind.REPLAYED]
        assert change.after.dispatch_state is DispatchState.PENDING
    assert change.enqueue is dispatched
    assert change.backlog_delta == 1


def test_a_replay_starts_again_on_the_jobs_own_model(jobs: Jobs) -> None:
    job = dataclasses.replace(jobs.failed(), fallback_level=2)
    assert rules.replay(job, now=NOW)["fallback_level"] == 0


def test_replay_of_a_model_failure_needs_include_failed(jobs: Jobs) -> None:
    job = jobs.failed(TRANSIENT)
    with pytest.raises(
        IllegalTransitionError,
        match=r"^only dead-lettered jobs are replayed unless other FAILED jobs are included$",
    ):
        changes.replay(
            job, now=NOW, actor="ops", reason="r", include_failed=False, dispatched=False
        )
    change = changes.replay(
        job, now=NOW, actor="ops", reason="r", include_failed=True, dispatched=False
    )
    assert change.after.status is JobStatus.QUEUED


def test_a_note_records_one_event_and_changes_nothing_else(jobs: Jobs) -> None:
    job = jobs.waiting()
    detail = {"receive_count": 3}

    change = changes.note(job, EventKind.DUPLICATE_DELIVERY, now=NOW, detail=detail)

    assert facts(change.after) == facts(job)
    [event] = change.events
    assert (event.kind, event.detail) == (EventKind.DUPLICATE_DELIVERY, detail)
    assert event.detail is not detail
    assert change.backlog_delta == 0


# --- sequences the random machine reaches only by chance --------------------------------


def test_a_job_dead_lettered_while_its_retry_waits_is_due_at_once_when_replayed(
    jobs: Jobs,
) -> None:
    # Its message kept dying while the retry waited (the sweeper fails it unowned): the
    # old retry's wait goes with the old attempt series, not into the replay.
    retried = changes.schedule_retry(
        jobs.owned(),
        attempt_id=OWNER,
        now=NOW,
        not_before=NOW + 300,
        error=TRANSIENT,
        report=REPORT,
    ).after
    dead = changes.fail_unowned(
        retried, now=NOW + 1, error=DELIVERY, kind=EventKind.FAILED, detail={}
    ).after
    assert dead.status is JobStatus.FAILED

    replayed = _replayed(dead, now=NOW + 2)

    assert rules.is_claimable(replayed, now=NOW + 2)
    assert replayed.not_before is None


def test_a_job_cancelled_while_its_retry_waits_is_never_replayed_or_claimed(jobs: Jobs) -> None:
    job = jobs.owned()
    retried = changes.schedule_retry(
        job, attempt_id=OWNER, now=NOW, not_before=NOW + 30, error=TRANSIENT, report=REPORT
    ).after

    cancel = changes.request_cancel(retried, now=NOW + 1)

    assert cancel is not None
    cancelled = cancel.after
    assert cancelled.status is JobStatus.CANCELLED
    assert kinds(cancel) == [EventKind.CANCELLED]
    # The attempt had ended with its retry; the cancel ends no attempt a second time.
    assert cancel.closed == ()
    for include_failed in (False, True):
        with pytest.raises(
            IllegalTransitionError, match=r"^a job its client cancelled is not replayed$"
        ):
            changes.replay(
                cancelled,
                now=NOW + 2,
                actor="ops",
                reason="r",
                include_failed=include_failed,
                dispatched=True,
            )
    # The retry's message still comes due; its delivery finds nothing to claim.
    with pytest.raises(IllegalTransitionError):
        changes.claim(
            cancelled,
            attempt_id="att_late",
            worker_id="w2",
            now=NOW + 31,
            lease_until=NOW + 91,
            max_deliveries_without_outcome=10,
        )


@pytest.mark.parametrize("dispatched", [True, False])
def test_accept_leaves_the_job_it_was_given_alone(dispatched: bool, jobs: Jobs) -> None:
    job = jobs.make(revision=5, event_seq=5)
    snapshot = dataclasses.replace(job)

    change = changes.accept(job, now=NOW, dispatched=dispatched)

    assert job == snapshot
    assert change.after is not job
    assert (change.after.revision, change.after.event_seq) == (1, 1 + dispatched)


@pytest.mark.parametrize("name", ["note", "lease_lost"])
def test_a_change_that_keeps_the_job_still_gives_a_new_revision_of_its_own(
    name: str, jobs: Jobs
) -> None:
    make, transition = TRANSITIONS[name]
    before = make(jobs)

    change = transition(before)

    assert change is not None
    assert change.after is not before
    assert (before.revision, change.after.revision) == (
        change.expected_revision,
        before.revision + 1,
    )


# --- a finished job's history ends with its terminal event ------------------------------


def _finished(jobs: Jobs) -> list[Job]:
    return [
        jobs.failed(),
        jobs.waiting(status=JobStatus.SUCCEEDED, result_ref="r", completed_at=NOW - 5),
        jobs.waiting(status=JobStatus.CANCELLED, completed_at=NOW - 5),
    ]


@pytest.mark.parametrize("redispatch", [True, False])
def test_a_finished_job_is_not_dispatched_again(redispatch: bool, jobs: Jobs) -> None:
    for job in _finished(jobs):
        assert changes.mark_dispatched(job, now=NOW, redispatch=redispatch) is None
        assert changes.mark_dispatched(job, now=NOW, redispatch=True, enqueue=True) is None


def test_a_duplicate_delivery_of_a_finished_job_is_not_noted(jobs: Jobs) -> None:
    for job in _finished(jobs):
        assert changes.note(job, EventKind.DUPLICATE_DELIVERY, now=NOW, detail={}) is None


def test_a_redispatch_can_carry_its_message(jobs: Jobs) -> None:
    change = changes.mark_dispatched(jobs.waiting(), now=NOW, redispatch=True, enqueue=True)

    assert change is not None
    assert change.enqueue is True
    assert kinds(change) == [EventKind.REDISPATCHED]


def test_a_lost_lease_on_a_finished_job_explains_the_attempt_without_an_event(
    jobs: Jobs,
) -> None:
    report = AttemptReport(outcome=AttemptOutcome.LEASE_LOST, latency_ms=99, input_tokens=7)
    for job in _finished(jobs):
        change = changes.lease_lost(job, _attempt(None), now=NOW, report=report)

        assert change is not None
        assert change.events == ()
        assert change.closed == (ending(report, replaces_abandoned=True),)
        assert facts(change.after) == facts(job)


def test_no_transition_adds_an_event_after_a_terminal_one(jobs: Jobs) -> None:
    """Every transition, offered a finished job, refuses, wants nothing, or writes no
    event: only a replay (which makes the job unfinished again) continues a history."""
    for name, (_, transition) in TRANSITIONS.items():
        for job in _finished(jobs):
            try:
                change = transition(job)
            except (IllegalTransitionError, StaleFenceError):
                continue
            if change is None or not change.after.status.terminal:
                continue
            assert change.events == (), f"{name} wrote {kinds(change)} after {job.status}"


def test_the_rule_holds_for_any_change_core_makes(jobs: Jobs) -> None:
    # The guard itself: an event after a terminal one is refused where changes are made.
    job = jobs.failed()
    with pytest.raises(
        IllegalTransitionError, match=r"^a finished job's history ends with its terminal event$"
    ):
        changes._change(job, job, JobUpdate(), now=NOW, events=[(EventKind.DUPLICATE_DELIVERY, {})])
