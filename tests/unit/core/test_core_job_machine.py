"""The job state machine against an independent model of the rules (docs/architecture.md:
the data model and the worker's steps).

Each rule computes from the model whether the call is legal, then checks that
core.job either performs it exactly or raises the right error without changing
anything. "Exactly" means every field: each rule lists the fields its transition
sets, with their values, and asserts that no other field moved (``expect``). Time
moves only through a FakeClock.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from ferryman.core import job as jobs
from ferryman.core.clock import FakeClock
from ferryman.core.errors import FailureClass, IllegalTransitionError, StaleFenceError
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import DispatchState, Job, JobError, JobStatus, JobUpdate

START = 1_700_000_000.0
WORKERS = ("w1", "w2", "w3")
TERMINAL = {JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.CANCELLED}
WAITING = {JobStatus.QUEUED, JobStatus.RETRY_SCHEDULED}
NEVER_ISSUED = "att_never_issued"

leases = st.floats(min_value=0.5, max_value=120.0, allow_nan=False)
# "current" targets the job's own attempt id; an integer picks any id ever issued.
attempts = st.one_of(st.just("current"), st.integers(min_value=0, max_value=10_000))
failure_classes = st.sampled_from(list(FailureClass))

E = TypeVar("E", bound=Exception)


class JobLifecycle(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock(START)
        self.job = Job(
            tenant_id="acme",
            job_id="gen_01MACHINE",
            task="generate",
            model="sim",
            input={"prompt": "hi"},
            request_hash="0" * 64,
            created_at=START,
            updated_at=START,
            correlation_id="cor_machine",
            # As intake leaves it where the message is written with the job.
            dispatch_state=DispatchState.DISPATCHED,
        )
        self.issued: list[str] = [NEVER_ISSUED]
        # The model: what the rules say the job should be.
        self.status = JobStatus.QUEUED
        self.owner: str | None = None
        self.lease_until: float | None = None
        self.not_before: float | None = None
        self.cancel_requested = False
        self.claims = 0
        self.published_in_series = 0
        self.published_ever = 0
        self.last_fence = 0
        self.failed_class: FailureClass | None = None
        self.takeovers_in_series = 0
        # The two retry budgets: model failures of this series, and how many broke the schema.
        self.failures_in_series = 0
        self.invalid_outputs_in_series = 0

    # --- the model's view -----------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now()

    def claimable(self) -> bool:
        if self.status in WAITING:
            return self.not_before is None or self.not_before <= self.now
        if self.status is JobStatus.PROCESSING:
            assert self.lease_until is not None
            return self.lease_until < self.now
        return False

    def owns(self, attempt_id: str) -> bool:
        return (
            self.status is JobStatus.PROCESSING
            and attempt_id == self.owner
            and self.lease_until is not None
            and self.now <= self.lease_until
        )

    def pick(self, choice: str | int) -> str:
        if choice == "current":
            return self.job.attempt_id or NEVER_ISSUED
        assert isinstance(choice, int)
        return self.issued[choice % len(self.issued)]

    def refused(self, error: type[E], call: Callable[[], JobUpdate]) -> None:
        """An illegal call raises ``error`` and changes nothing."""
        snapshot = copy.deepcopy(self.job)
        with pytest.raises(error):
            call()
        assert self.job == snapshot

    @staticmethod
    def expect(before: Job, after: Job, **changed: Any) -> None:
        """``after`` is ``before`` with exactly the ``changed`` fields set, nothing else."""
        assert after == dataclasses.replace(before, **changed)

    def applied(self, call: Callable[[], JobUpdate], *, replaying: bool = False) -> Job:
        """The job with the fields the rule's update gives it, as core/changes.py makes it."""
        before = copy.deepcopy(self.job)
        after = dataclasses.replace(self.job, **call())
        assert self.job == before, "a transition mutated its input"
        if before.status in TERMINAL and not replaying:
            raise AssertionError(f"a {before.status} job changed")
        self.job = after
        return after

    # --- rules ----------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), lease=leases)
    def claim(self, worker: str, lease: float) -> None:
        attempt_id = new_attempt_id()
        self.issued.append(attempt_id)
        lease_until = self.now + lease

        def call() -> JobUpdate:
            return jobs.claim(
                self.job,
                attempt_id=attempt_id,
                worker_id=worker,
                now=self.now,
                lease_until=lease_until,
            )

        if not self.claimable():
            assert jobs.abandoned_attempt_id(self.job, now=self.now) is None
            self.refused(IllegalTransitionError, call)
            return
        taken_over = self.owner if self.status is JobStatus.PROCESSING else None
        assert jobs.abandoned_attempt_id(self.job, now=self.now) == taken_over
        self.takeovers_in_series += taken_over is not None
        before = self.job
        after = self.applied(call)
        # A claim starts a new attempt; the last retry's error stays visible meanwhile.
        self.expect(
            before,
            after,
            status=JobStatus.PROCESSING,
            fence=before.fence + 1,
            attempt_count=before.attempt_count + 1,
            deliveries_without_outcome=before.deliveries_without_outcome
            + (1 if taken_over is not None else 0),
            attempt_id=attempt_id,
            worker_id=worker,
            lease_until=lease_until,
            not_before=None,
            updated_at=self.now,
        )
        self.status, self.owner, self.lease_until = JobStatus.PROCESSING, attempt_id, lease_until
        self.not_before = None
        self.claims += 1

    @rule(choice=attempts, lease=leases)
    def renew(self, choice: str | int, lease: float) -> None:
        attempt_id = self.pick(choice)
        wanted = self.now + lease

        def call() -> JobUpdate:
            return jobs.renew_lease(
                self.job, attempt_id=attempt_id, now=self.now, lease_until=wanted
            )

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        assert self.lease_until is not None
        before = self.job
        after = self.applied(call)
        # A renewal never shortens a lease, and is no change of the job's state: the
        # stalled scan's clock (updated_at) does not move.
        self.expect(before, after, lease_until=max(wanted, self.lease_until))
        self.lease_until = after.lease_until

    @rule(choice=attempts)
    def succeed(self, choice: str | int) -> None:
        attempt_id = self.pick(choice)
        ref = f"results/{attempt_id}"

        def call() -> JobUpdate:
            return jobs.succeed(self.job, attempt_id=attempt_id, now=self.now, result_ref=ref)

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        before = self.job
        after = self.applied(call)
        # A SUCCEEDED job shows no error, even after retries that each left one.
        self.expect(
            before,
            after,
            status=JobStatus.SUCCEEDED,
            result_ref=ref,
            error=None,
            lease_until=None,
            updated_at=self.now,
            completed_at=self.now,
        )
        self.status, self.lease_until = JobStatus.SUCCEEDED, None
        self.published_in_series += 1
        self.published_ever += 1

    @rule(choice=attempts, delay=st.floats(0, 120), failure=failure_classes)
    def schedule_retry(self, choice: str | int, delay: float, failure: FailureClass) -> None:
        attempt_id = self.pick(choice)
        not_before = self.now + delay
        error = JobError(code="x", failure_class=failure, message="m")

        def call() -> JobUpdate:
            return jobs.schedule_retry(
                self.job, attempt_id=attempt_id, now=self.now, not_before=not_before, error=error
            )

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        before = self.job
        after = self.applied(call)
        invalid = 1 if failure is FailureClass.INVALID_OUTPUT else 0
        self.expect(
            before,
            after,
            status=JobStatus.RETRY_SCHEDULED,
            not_before=not_before,
            lease_until=None,
            error=error,
            failure_count=before.failure_count + 1,
            invalid_output_count=before.invalid_output_count + invalid,
            updated_at=self.now,
        )
        self.status, self.lease_until, self.not_before = JobStatus.RETRY_SCHEDULED, None, not_before
        self.failures_in_series += 1
        self.invalid_outputs_in_series += invalid

    @rule(choice=attempts, failure=failure_classes, counts=st.booleans())
    def fail(self, choice: str | int, failure: FailureClass, counts: bool) -> None:
        """``counts``: a model failure spends the budgets; any other failure does not."""
        attempt_id = self.pick(choice)
        error = JobError(code="x", failure_class=failure, message="m")

        def call() -> JobUpdate:
            return jobs.fail(
                self.job, attempt_id=attempt_id, now=self.now, error=error, counts=counts
            )

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        before = self.job
        after = self.applied(call)
        spent = 1 if counts else 0
        invalid = 1 if counts and failure is FailureClass.INVALID_OUTPUT else 0
        self.expect(
            before,
            after,
            status=JobStatus.FAILED,
            error=error,
            lease_until=None,
            failure_count=before.failure_count + spent,
            invalid_output_count=before.invalid_output_count + invalid,
            updated_at=self.now,
            completed_at=self.now,
        )
        self.failures_in_series += spent
        self.invalid_outputs_in_series += invalid
        self.status, self.lease_until = JobStatus.FAILED, None
        self.failed_class = failure

    @rule(choice=attempts)
    def release(self, choice: str | int) -> None:
        """The owner gives the job back: it waits again, owned by nobody."""
        attempt_id = self.pick(choice)

        def call() -> JobUpdate:
            return jobs.release(self.job, attempt_id=attempt_id, now=self.now)

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        before = self.job
        after = self.applied(call)
        self.expect(
            before,
            after,
            status=JobStatus.QUEUED,
            attempt_id=None,
            worker_id=None,
            lease_until=None,
            updated_at=self.now,
        )
        self.status, self.owner, self.lease_until = JobStatus.QUEUED, None, None

    @rule(choice=attempts)
    def wait_for_provider(self, choice: str | int) -> None:
        """The owner's provider refuses our credentials: the job waits in the queue again,
        owned by nobody, with the refusal as its error and its budgets untouched."""
        attempt_id = self.pick(choice)
        error = JobError(code="unauthorized", failure_class=FailureClass.UNAUTHORIZED, message="m")

        def call() -> JobUpdate:
            return jobs.wait_for_provider(
                self.job, attempt_id=attempt_id, now=self.now, error=error
            )

        if not self.owns(attempt_id):
            self.refused(StaleFenceError, call)
            return
        before = self.job
        after = self.applied(call)
        self.expect(
            before,
            after,
            status=JobStatus.QUEUED,
            error=error,
            attempt_id=None,
            worker_id=None,
            lease_until=None,
            not_before=None,
            updated_at=self.now,
        )
        self.status, self.owner, self.lease_until = JobStatus.QUEUED, None, None
        self.not_before = None

    @rule()
    def request_cancel(self) -> None:
        def call() -> JobUpdate:
            return jobs.request_cancel(self.job, now=self.now)

        if self.status in TERMINAL:
            self.refused(IllegalTransitionError, call)
            return
        before = self.job
        after = self.applied(call)
        if self.status is JobStatus.PROCESSING and self.cancel_requested:
            # Asking again changes nothing: no field moves.
            self.expect(before, after)
        elif self.status is JobStatus.PROCESSING:
            # The owner is asked to stop; the job stays its until it does.
            self.expect(before, after, cancel_requested=True, updated_at=self.now)
        else:
            self.expect(
                before,
                after,
                status=JobStatus.CANCELLED,
                cancel_requested=True,
                lease_until=None,
                updated_at=self.now,
                completed_at=self.now,
            )
            self.status, self.lease_until = JobStatus.CANCELLED, None
        self.cancel_requested = True

    @rule(choice=attempts)
    def finish_cancelled(self, choice: str | int) -> None:
        """The owning attempt honours a cancel request (the store guards ownership)."""
        attempt_id = self.pick(choice)

        def call() -> JobUpdate:
            return jobs.cancelled(self.job, now=self.now)

        if self.status in TERMINAL:
            self.refused(IllegalTransitionError, call)
            return
        if not self.owns(attempt_id):
            return
        before = self.job
        after = self.applied(call)
        self.expect(
            before,
            after,
            status=JobStatus.CANCELLED,
            cancel_requested=True,
            lease_until=None,
            updated_at=self.now,
            completed_at=self.now,
        )
        self.status, self.lease_until = JobStatus.CANCELLED, None

    @rule()
    def fail_unowned(self) -> None:
        error = JobError(code="dead_lettered", failure_class=FailureClass.DELIVERY, message="m")

        def call() -> JobUpdate:
            return jobs.fail_unowned(self.job, now=self.now, error=error)

        live_owner = (
            self.status is JobStatus.PROCESSING
            and self.lease_until is not None
            and self.lease_until >= self.now
        )
        if self.status in TERMINAL or live_owner:
            self.refused(IllegalTransitionError, call)
            return
        before = self.job
        after = self.applied(call)
        # Not a model failure: neither budget is spent.
        self.expect(
            before,
            after,
            status=JobStatus.FAILED,
            error=error,
            lease_until=None,
            updated_at=self.now,
            completed_at=self.now,
        )
        self.status, self.lease_until = JobStatus.FAILED, None
        self.failed_class = FailureClass.DELIVERY

    @rule(include_failed=st.booleans())
    def replay(self, include_failed: bool) -> None:
        def call() -> JobUpdate:
            return jobs.replay(self.job, now=self.now, include_failed=include_failed)

        # Only FAILED jobs come back: dead-lettered ones always, others when asked;
        # a job its client cancelled never.
        dead_lettered = self.failed_class is FailureClass.DELIVERY
        if self.status is not JobStatus.FAILED or not (include_failed or dead_lettered):
            self.refused(IllegalTransitionError, call)
            return
        before = self.job
        after = self.applied(call, replaying=True)
        # A new series: its budgets and ownership start afresh, its message is not yet
        # known to exist; the fence and the attempt count are kept, so a replay never
        # reuses an attempt number and the job's count agrees with its attempt list.
        self.expect(
            before,
            after,
            status=JobStatus.QUEUED,
            dispatch_state=DispatchState.PENDING,
            failure_count=0,
            invalid_output_count=0,
            deliveries_without_outcome=0,
            attempt_id=None,
            worker_id=None,
            lease_until=None,
            not_before=None,
            cancel_requested=False,
            error=None,
            result_ref=None,
            updated_at=self.now,
            completed_at=None,
        )
        self.status, self.owner, self.lease_until, self.not_before = (
            JobStatus.QUEUED,
            None,
            None,
            None,
        )
        self.cancel_requested = False
        self.published_in_series = 0
        self.takeovers_in_series = 0
        self.failures_in_series = 0
        self.invalid_outputs_in_series = 0
        self.failed_class = None

    @rule(seconds=st.floats(min_value=0, max_value=200, allow_nan=False))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(lambda self: self.lease_until is not None and self.lease_until >= self.now)
    @rule(past=st.booleans())
    def advance_to_lease_edge(self, past: bool) -> None:
        """Land exactly on the lease's end (still owned) or just past it (claimable)."""
        assert self.lease_until is not None
        self.clock.set(self.lease_until + (1e-3 if past else 0.0))

    @precondition(lambda self: self.not_before is not None and self.not_before >= self.now)
    @rule()
    def advance_to_not_before(self) -> None:
        assert self.not_before is not None
        self.clock.set(self.not_before)

    # --- invariants -----------------------------------------------------------

    @invariant()
    def agrees_with_the_model(self) -> None:
        assert self.job.status is self.status
        assert self.job.lease_until == self.lease_until
        if self.status is JobStatus.PROCESSING:
            assert self.job.attempt_id == self.owner

    @invariant()
    def fence_counts_claims_and_never_goes_back(self) -> None:
        assert self.job.fence == self.claims
        assert self.job.fence >= self.last_fence
        self.last_fence = self.job.fence

    @invariant()
    def attempts_are_counted_across_replays(self) -> None:
        """Every claim is an attempt, numbered by the fence: the count a job shows is
        its latest attempt's number, whatever replays started new series."""
        assert self.job.attempt_count == self.claims == self.job.fence

    @invariant()
    def deliveries_without_outcome_count_takeovers(self) -> None:
        """Every claim that took over an attempt which never reported is counted, in this
        series; a graceful release is not (its attempt did report)."""
        assert self.job.deliveries_without_outcome == self.takeovers_in_series

    @invariant()
    def budgets_count_model_failures_of_the_series(self) -> None:
        assert self.job.failure_count == self.failures_in_series
        assert self.job.invalid_output_count == self.invalid_outputs_in_series

    @invariant()
    def no_lease_outside_processing(self) -> None:
        if self.job.status is not JobStatus.PROCESSING:
            assert self.job.lease_until is None

    @invariant()
    def at_most_one_publication(self) -> None:
        assert self.published_in_series <= 1
        # SUCCEEDED is never replayed, so a job publishes once in its whole life.
        assert self.published_ever <= 1
        assert (self.job.result_ref is not None) == (self.job.status is JobStatus.SUCCEEDED)

    @invariant()
    def terminal_jobs_are_complete(self) -> None:
        if self.job.status in TERMINAL:
            assert self.job.completed_at is not None
        else:
            assert self.job.completed_at is None


JobLifecycle.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestJobLifecycle = JobLifecycle.TestCase
