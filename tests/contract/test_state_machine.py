"""A job's whole lifecycle, driven through the ledger over every engine's ports.

tests/unit/core/test_core_job_machine.py checks core's rules against a model of them.
This machine checks that every engine keeps what those rules decide: each step calls
the ledger (services/ledger.py) over the engine's JobStore as the services do
(accept, claims by several workers, some racing, renewals, every ending of an
attempt, cancel requests, the sweeper's redispatch and dead-letter, replays, leases
left to expire by moving the FakeClock), and applies core.changes to the test's own
copy of the job. After every step the engine must agree with that copy exactly (the
job, its events, its attempt rows) and keep the invariants no engine may break:

- at most one result is ever published;
- a finished job never changes (until an operator replays it);
- every attempt row has ended, but for the one the job's current attempt owns;
- the revision moves by one for every applied change, and never otherwise;
- events are numbered 1..event_seq, with no gap.

Hypothesis drives state machines synchronously; the engines are async, so each
machine owns one event loop (``asyncio.Runner``) and runs every step on it, opening
its engine in ``__init__`` and closing it in ``teardown``. Every example starts from
an empty engine: a new one in memory, a new file for SQLite, emptied tables on the
PostgreSQL database the contract suite made (``postgres_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from ferryman.core import changes
from ferryman.core.clock import FakeClock
from ferryman.core.errors import (
    AlreadyTerminalError,
    FailureClass,
    IllegalTransitionError,
    StaleFenceError,
)
from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, Job, JobError, JobStatus
from ferryman.engines import EngineOptions, open_engine
from ferryman.services.ledger import JobLedger
from ferryman.services.observers import JobObserver, Observers

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path

    from ferryman.core.changes import Change
    from ferryman.core.job import Attempt, Event
    from ferryman.ports.store import JobStore

    Opener = Callable[[FakeClock], AbstractAsyncContextManager[JobStore]]

pytestmark = pytest.mark.timeout(120)

START = 1_700_000_000.0
TENANT = "acme"
WORKERS = ("w1", "w2", "w3")
# Small, so that takeovers reach it and the claim dead-letters the job.
MAX_DELIVERIES = 3
NEVER_ISSUED = "att_never_issued"
# How long a job stays unchanged before the sweeper sends its message again.
STALLED_SECONDS = 60.0
# Bounded so the four engines together run in well under a minute on two cores (an
# example costs about 0.1 s in memory, 0.25 s on SQLite, 0.7 s on PostgreSQL), and
# derandomized so CI runs the same examples every time.
EXAMPLES = {"memory": 50, "memory-outbox": 50, "sqlite": 25, "postgresql": 20}
MACHINE_SETTINGS = settings(
    max_examples=EXAMPLES["memory"],
    stateful_step_count=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)

leases = st.floats(min_value=10.0, max_value=120.0, allow_nan=False)
# "current" targets the job's own attempt; an integer picks any attempt ever issued.
attempts = st.one_of(st.just("current"), st.integers(min_value=0, max_value=1_000))
# (The owners' writes wait for a first claim: before it every one would be refused.)
failure_classes = st.sampled_from(list(FailureClass))


def _error(failure: FailureClass, code: str = "provider_error") -> JobError:
    return JobError(code=code, failure_class=failure, message="m")


class EngineLifecycle(RuleBasedStateMachine):
    """One job on one engine; ``opener`` opens a new, empty engine over a clock."""

    def __init__(self, opener: Opener) -> None:
        super().__init__()
        self.clock = FakeClock(START)
        self.runner = asyncio.Runner()
        self.stack = contextlib.AsyncExitStack()
        try:
            store = self.run(self.stack.enter_async_context(opener(self.clock)))
        except BaseException:
            self.runner.close()
            raise
        self.store = store
        # An observer in the ledger's chain sees every change the engine stored (below).
        self.observed = _Observed()
        self.ledger = JobLedger(store, observers=Observers([self.observed]))
        self.issued = [NEVER_ISSUED]
        # The model: the job, its events and its attempt rows as core's rules make them.
        self.model_events: list[Event] = []
        self.model_attempts: dict[str, AttemptOutcome | None] = {}
        self.applied = 0  # changes applied by the current step
        self.replayed = False  # the current step replayed a finished job
        job = Job(
            tenant_id=TENANT,
            job_id=new_job_id(),
            task="generate",
            model="sim",
            input={"prompt": "hi"},
            request_hash="0" * 64,
            created_at=START,
            updated_at=START,
            correlation_id=new_correlation_id(),
        )
        self.job_id = job.job_id
        accepted = changes.accept(job, now=self.now, dispatched=self.ledger.enqueues_with_job)
        self.run(self.ledger.create(job, idempotency_expires_at=self.now + 86_400, now=self.now))
        self.model = job  # replaced by absorb
        self.absorb(accepted)
        self.dispatch_if_outbox()
        self.seen = self.model
        self.applied = 0

    def run(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return self.runner.run(coroutine)

    def teardown(self) -> None:
        try:
            self.run(self.stack.aclose())
        finally:
            self.runner.close()

    # --- the model --------------------------------------------------------------

    @property
    def now(self) -> float:
        return self.clock.now()

    def absorb(self, change: Change) -> None:
        """Apply a change core computed to the test's own copy, as an engine must."""
        assert change.before is None or change.before == self.model
        self.model = change.after
        self.model_events += change.events
        if change.opened is not None:
            self.model_attempts[change.opened.attempt_id] = None
        for ending in change.closed:
            outcome = self.model_attempts[ending.attempt_id]
            if outcome is None or (
                ending.replaces_abandoned and outcome is AttemptOutcome.ABANDONED
            ):
                self.model_attempts[ending.attempt_id] = ending.report.outcome
        self.applied += 1

    def expected(self, compute: Callable[[Job], Change | None]) -> Change | Exception | None:
        """The change core's rule makes of the model's job, or the error it refuses with."""
        try:
            return compute(self.model)
        except (IllegalTransitionError, StaleFenceError) as refusal:
            return refusal

    def pick(self, choice: str | int) -> str:
        if choice == "current":
            return self.model.attempt_id or NEVER_ISSUED
        assert isinstance(choice, int)
        return self.issued[choice % len(self.issued)]

    def dispatch_if_outbox(self) -> None:
        """Where the store does not enqueue, the outbox path marks the message sent."""
        if self.ledger.enqueues_with_job:
            return
        change = changes.mark_dispatched(self.model, now=self.now, redispatch=False)
        self.run(self.ledger.mark_dispatched(self.job_id, now=self.now))
        if change is not None:
            self.absorb(change)

    def claimable(self) -> bool:
        return isinstance(self.expected(self._claim_rule(NEVER_ISSUED, "w0", 1.0)), changes.Change)

    def _claim_rule(self, attempt_id: str, worker: str, lease: float) -> Callable[[Job], Change]:
        return lambda job: changes.claim(
            job,
            attempt_id=attempt_id,
            worker_id=worker,
            now=self.now,
            lease_until=self.now + lease,
            max_deliveries_without_outcome=MAX_DELIVERIES,
        )

    def owner_step(self, choice: str | int, verb: str, **arguments: Any) -> None:
        """An owning attempt's write (``verb``: the same name and arguments in core.changes
        and the ledger): applied when core lets the attempt make it, else refused by the
        ledger with None and nothing written."""
        attempt_id = self.pick(choice)
        rule = getattr(changes, verb)
        want = self.expected(
            lambda job: rule(job, attempt_id=attempt_id, now=self.now, **arguments)
        )
        call = getattr(self.ledger, verb)
        got = self.run(call(self.job_id, attempt_id=attempt_id, now=self.now, **arguments))
        if isinstance(want, StaleFenceError):
            assert got is None
            return
        assert isinstance(want, changes.Change)
        assert got == want.after
        self.absorb(want)

    # --- the worker -------------------------------------------------------------

    @rule(worker=st.sampled_from(WORKERS), lease=leases)
    def claim(self, worker: str, lease: float) -> None:
        attempt_id = new_attempt_id()
        self.issued.append(attempt_id)
        want = self.expected(self._claim_rule(attempt_id, worker, lease))
        got = self.run(
            self.ledger.claim(
                self.job_id,
                attempt_id=attempt_id,
                worker_id=worker,
                now=self.now,
                lease_until=self.now + lease,
                max_deliveries_without_outcome=MAX_DELIVERIES,
            )
        )
        if isinstance(want, Exception):
            assert not got.claimed and not got.dead_lettered
            assert got.job == self.model
            return
        assert want is not None
        assert got.claimed is (want.opened is not None)
        assert got.dead_lettered is (want.opened is None)
        assert got.job == want.after
        self.absorb(want)

    @precondition(lambda self: self.claimable())
    @rule(workers=st.permutations(WORKERS).map(lambda w: w[:2]), lease=leases)
    def race_claims(self, workers: tuple[str, str], lease: float) -> None:
        """Two workers claim the same due job at once, each from the version it read (as a
        worker claims a job it received): both compute a claim of the same revision, the
        engine's conditional write lets exactly one land, the other finds it taken."""
        ids = [new_attempt_id() for _ in workers]
        self.issued += ids
        read = self.model

        async def both() -> list[Any]:
            return list(
                await asyncio.gather(
                    *(
                        self.ledger.claim(
                            self.job_id,
                            attempt_id=attempt_id,
                            worker_id=worker,
                            now=self.now,
                            lease_until=self.now + lease,
                            max_deliveries_without_outcome=MAX_DELIVERIES,
                            known=read,
                        )
                        for attempt_id, worker in zip(ids, workers, strict=True)
                    )
                )
            )

        results = self.run(both())
        won = [i for i, got in enumerate(results) if got.claimed or got.dead_lettered]
        assert len(won) == 1, results
        winner = won[0]
        want = self.expected(self._claim_rule(ids[winner], workers[winner], lease))
        assert not isinstance(want, Exception)
        assert want is not None
        # The loser read the job again and found it taken: both see it as the winner left it.
        assert [got.job for got in results] == [want.after, want.after]
        self.absorb(want)

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts, lease=leases)
    def renew(self, choice: str | int, lease: float) -> None:
        attempt_id = self.pick(choice)
        until = self.now + lease
        want = self.expected(
            lambda job: changes.renew_lease(
                job, attempt_id=attempt_id, now=self.now, lease_until=until
            )
        )
        got = self.run(
            self.ledger.renew_lease(
                self.job_id, attempt_id=attempt_id, now=self.now, lease_until=until
            )
        )
        if isinstance(want, StaleFenceError):
            assert not got.held
            return
        assert isinstance(want, changes.Change)
        assert got.held
        assert got.job == want.after
        self.absorb(want)

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts)
    def succeed(self, choice: str | int) -> None:
        report = AttemptReport(outcome=AttemptOutcome.SUCCEEDED, input_tokens=3, output_tokens=5)
        ref = f"results/{len(self.issued)}"
        self.owner_step(choice, "succeed", result_ref=ref, report=report)

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts, delay=st.floats(0, 30, allow_nan=False), failure=failure_classes)
    def schedule_retry(self, choice: str | int, delay: float, failure: FailureClass) -> None:
        self.owner_step(
            choice,
            "schedule_retry",
            not_before=self.now + delay,
            error=_error(failure),
            report=AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=failure),
        )

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts, failure=failure_classes)
    def fail(self, choice: str | int, failure: FailureClass) -> None:
        report = AttemptReport(outcome=AttemptOutcome.FAILED, failure_class=failure)
        self.owner_step(choice, "fail", error=_error(failure), report=report)

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts)
    def finish_cancelled(self, choice: str | int) -> None:
        """The owner stops its call because a cancel was requested."""
        report = AttemptReport(outcome=AttemptOutcome.CANCELLED)
        self.owner_step(choice, "finish_cancelled", report=report)

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts)
    def release(self, choice: str | int) -> None:
        """The owner gives the job back (shutdown)."""
        self.owner_step(choice, "release", report=AttemptReport(outcome=AttemptOutcome.ABANDONED))

    @precondition(lambda self: self.model.fence > 0)
    @rule(choice=attempts)
    def wait_for_provider(self, choice: str | int) -> None:
        """The owner's provider refused our credentials: the job waits in the queue again."""
        report = AttemptReport(outcome=AttemptOutcome.ABANDONED)
        error = _error(FailureClass.UNAUTHORIZED, code="unauthorized")
        self.owner_step(choice, "wait_for_provider", error=error, report=report)

    # --- clients, operators and the sweeper ---------------------------------------

    # Not before the first claim: a job cancelled at once would leave the run nothing to do.
    @precondition(lambda self: self.model.fence > 0)
    @rule()
    def request_cancel(self) -> None:
        want = self.expected(lambda job: changes.request_cancel(job, now=self.now))
        if isinstance(want, IllegalTransitionError):
            with pytest.raises(AlreadyTerminalError):
                self.run(self.ledger.request_cancel(self.job_id, tenant_id=TENANT, now=self.now))
            return
        got = self.run(self.ledger.request_cancel(self.job_id, tenant_id=TENANT, now=self.now))
        if want is None:  # asked already: nothing new happens
            assert got == self.model
            return
        assert isinstance(want, changes.Change)
        assert got == want.after
        self.absorb(want)

    @precondition(lambda self: self.model.updated_at < self.now - STALLED_SECONDS)
    @rule()
    def redispatch(self) -> None:
        """The sweeper sends the message of a job that stalled again (or finished meanwhile)."""
        enqueue = self.ledger.enqueues_with_job
        want = self.expected(
            lambda job: changes.mark_dispatched(job, now=self.now, redispatch=True, enqueue=enqueue)
        )
        if enqueue:
            sent = self.run(self.ledger.redispatch(self.job_id, now=self.now))
            assert sent is (want is not None)
        else:
            self.run(self.ledger.mark_dispatched(self.job_id, now=self.now, redispatch=True))
        if isinstance(want, changes.Change):
            self.absorb(want)

    @precondition(lambda self: self.model.fence > 0)
    @rule()
    def dead_letter(self) -> None:
        """The sweeper fails a job no live attempt owns (its message dead-lettered)."""
        error = _error(FailureClass.DELIVERY, code="dead_lettered")
        detail = {"receive_count": MAX_DELIVERIES}
        want = self.expected(
            lambda job: changes.fail_unowned(
                job, now=self.now, error=error, kind=EventKind.DEAD_LETTERED, detail=detail
            )
        )
        got = self.run(
            self.ledger.fail_unowned(
                self.job_id, now=self.now, error=error, kind=EventKind.DEAD_LETTERED, detail=detail
            )
        )
        if isinstance(want, IllegalTransitionError):
            assert got is None
            return
        assert isinstance(want, changes.Change)
        assert got == want.after
        self.absorb(want)

    @precondition(lambda self: self.model.status.terminal)
    @rule(include_failed=st.booleans())
    def replay(self, include_failed: bool) -> None:
        enqueue = self.ledger.enqueues_with_job

        def compute(job: Job) -> Change:
            return changes.replay(
                job,
                now=self.now,
                actor="ops",
                reason="try again",
                include_failed=include_failed,
                dispatched=enqueue,
            )

        want = self.expected(compute)
        call = self.ledger.replay(
            self.job_id,
            now=self.now,
            actor="ops",
            reason="try again",
            include_failed=include_failed,
        )
        if isinstance(want, IllegalTransitionError):
            with pytest.raises(IllegalTransitionError):
                self.run(call)
            return
        assert isinstance(want, changes.Change)
        assert self.run(call) == want.after
        self.absorb(want)
        self.replayed = True
        self.dispatch_if_outbox()

    # --- time ---------------------------------------------------------------------

    @rule(seconds=st.floats(min_value=0, max_value=60, allow_nan=False))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @precondition(
        lambda self: self.model.lease_until is not None and self.model.lease_until >= self.now
    )
    @rule(past=st.booleans())
    def advance_to_lease_edge(self, past: bool) -> None:
        """Land exactly on the lease's end (still owned) or just past it (expired)."""
        assert self.model.lease_until is not None
        self.clock.set(self.model.lease_until + (1e-3 if past else 0.0))

    # --- what every engine keeps ----------------------------------------------------

    @invariant()
    def engine_agrees_with_the_model(self) -> None:
        async def read() -> tuple[Job | None, list[Event], list[Attempt]]:
            return (
                await self.store.get(self.job_id),
                await self.store.events(self.job_id),
                await self.store.attempts(self.job_id),
            )

        job, events, attempt_rows = self.run(read())
        assert job == self.model
        # Every change applied was told to the observer once, and no other: revisions
        # 1, 2, 3... up to the stored one, carrying the stored events.
        assert self.observed.revisions == list(range(1, self.model.revision + 1))
        assert self.observed.events == self.model_events
        assert events == self.model_events
        assert {a.attempt_id: a.outcome for a in attempt_rows} == self.model_attempts
        self._check(job, events, attempt_rows)
        self.seen, self.applied, self.replayed = job, 0, False

    def _check(self, job: Job, events: list[Event], attempt_rows: list[Attempt]) -> None:
        # The revision moves by one for each applied change, and never otherwise.
        assert job.revision == self.seen.revision + self.applied
        # Events are numbered 1..event_seq, with no gap.
        assert [event.seq for event in events] == list(range(1, job.event_seq + 1))
        # At most one result is published, and only a SUCCEEDED job shows one.
        assert sum(event.kind is EventKind.SUCCEEDED for event in events) <= 1
        assert (job.result_ref is not None) is (job.status is JobStatus.SUCCEEDED)
        # A finished job never changes, until an operator replays it.
        if self.seen.status.terminal and not self.replayed:
            assert job == self.seen
        # Every attempt row has ended, but for the one the current attempt owns.
        open_rows = [a for a in attempt_rows if a.ended_at is None]
        assert all(a.outcome is None for a in open_rows)
        assert all(a.ended_at is not None for a in attempt_rows if a.outcome is not None)
        if job.status is JobStatus.PROCESSING:
            assert [a.attempt_id for a in open_rows] == [job.attempt_id]
        else:
            assert open_rows == []


class _Observed(JobObserver):
    def __init__(self) -> None:
        self.revisions: list[int] = []
        self.events: list[Event] = []

    def changed(self, change: Change) -> None:
        self.revisions.append(change.after.revision)
        self.events.extend(change.events)


# --- the engines ------------------------------------------------------------------


def _memory(*, outbox: bool) -> Opener:
    @contextlib.asynccontextmanager
    async def opened(clock: FakeClock) -> AsyncIterator[JobStore]:
        # With memory_outbox the store has no queue of its own: the shape of DynamoDB + SQS.
        options = EngineOptions(memory_outbox=outbox)
        async with open_engine("memory://", clock=clock, options=options) as engine:
            yield engine.store

    return opened


def _sqlite(directory: Path) -> Opener:
    files = itertools.count()

    @contextlib.asynccontextmanager
    async def opened(clock: FakeClock) -> AsyncIterator[JobStore]:
        url = f"sqlite:///{directory}/machine-{next(files)}.db"
        options = EngineOptions(sqlite_synchronous="NORMAL")
        async with open_engine(url, clock=clock, options=options) as engine:
            yield engine.store

    return opened


async def _empty_postgres(url: str) -> None:
    """Every table but the migrations ledger emptied, as tests/contract/conftest.py does,
    but row by row: TRUNCATE costs half a second a time here, DELETE of a few rows
    almost nothing. The jobs go last, after the rows that refer to them."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url) as conn:
        cursor = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename <> 'schema_migrations'"
        )
        tables = sorted((row[0] for row in await cursor.fetchall()), key=lambda t: t == "jobs")
        for table in tables:
            await conn.execute(f'DELETE FROM "{table}"')
        await conn.commit()


def _postgres(url: str) -> Opener:
    @contextlib.asynccontextmanager
    async def opened(clock: FakeClock) -> AsyncIterator[JobStore]:
        options = EngineOptions(postgres_pool_min_size=1, postgres_pool_max_size=3)
        async with open_engine(url, clock=clock, options=options) as engine:
            await _empty_postgres(url)
            yield engine.store

    return opened


@pytest.mark.parametrize("engine", list(EXAMPLES))
def test_every_engine_keeps_what_core_decides(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    if engine == "postgresql":
        opener = _postgres(request.getfixturevalue("postgres_url"))
    elif engine == "sqlite":
        opener = _sqlite(tmp_path / secrets.token_hex(4))
    else:
        opener = _memory(outbox=engine == "memory-outbox")
    chosen = settings(MACHINE_SETTINGS, max_examples=EXAMPLES[engine])
    if os.environ.get("MUTANT_UNDER_TEST"):
        # mutmut asks only whether a mutant fails the test: shrinking the failing run
        # to its shortest (up to a minute on PostgreSQL) would tell it nothing more.
        chosen = settings(chosen, phases=[Phase.explicit, Phase.reuse, Phase.generate])
    run_state_machine_as_test(lambda: EngineLifecycle(opener), settings=chosen)
