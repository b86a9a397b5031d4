"""The ledger: every change to a job, as read, decide (core), apply-if-unchanged.

Each verb reads the job (or starts from a version the caller already holds), asks
``core.changes`` for the change a transition makes, and asks the engine to apply it
only if the job's revision has not moved. When it has (a heartbeat, a cancel
request, another worker), the job is read again and the rule applied again to the
current facts: a rule is never applied to a stale job, and no engine decides a rule
itself. Conflicts are short-lived by construction (each writer retries at once with
what it just read), so a small bound on retries is a safety net, not a policy.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ferryman.core import changes
from ferryman.core.errors import (
    AlreadyTerminalError,
    IllegalTransitionError,
    JobNotFoundError,
    StaleFenceError,
    StateConflictError,
)
from ferryman.ports.store import AcksWithOutcome, AppliesMany, PublishesWithResult
from ferryman.services.claim_rules import (
    ClaimRequest,
    ClaimResult,
    claim_result,
    claim_rule,
    requested_rule,
)
from ferryman.services.observers import Observers

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Sequence

    from ferryman.core.changes import Change
    from ferryman.core.job import AttemptReport, EventKind, Job, JobError
    from ferryman.ports.results import StagedResult
    from ferryman.ports.store import Accepted, CreateOutcome, Hint, JobStore

__all__ = ["MAX_CONFLICTS", "ClaimRequest", "ClaimResult", "JobLedger", "LeaseStatus"]

# Every retry follows a fresh read, so only a job changing faster than we can read it
# would exhaust this.
MAX_CONFLICTS = 50


@dataclass(frozen=True, slots=True)
class LeaseStatus:
    held: bool
    cancel_requested: bool = False
    # The job as this renewal left it (or found it): the owner's latest known version.
    job: Job | None = None


class JobLedger:
    def __init__(self, store: JobStore, *, observers: Observers | None = None) -> None:
        self._store = store
        # Every change applied here is passed to them (services/observers.py).
        self._observers = observers if observers is not None else Observers()
        # Where the engine can, an attempt's terminal write deletes its message too.
        self._acking: AcksWithOutcome | None = (
            store if isinstance(store, AcksWithOutcome) and store.acks_with_outcome else None
        )
        # Where the engine can, several jobs' changes are written in one transaction.
        self._applies_many: AppliesMany | None = store if isinstance(store, AppliesMany) else None
        # Where the engine can, a publish writes its result in its own transaction.
        self._with_results: PublishesWithResult | None = (
            store if isinstance(store, PublishesWithResult) else None
        )

    @property
    def store(self) -> JobStore:
        return self._store

    @property
    def observers(self) -> Observers:
        return self._observers

    @property
    def enqueues_with_job(self) -> bool:
        return self._store.enqueues_with_job

    @property
    def acks_with_outcome(self) -> bool:
        """An ``ack`` given to succeed, fail or finish_cancelled is deleted in the same
        transaction as the terminal write (ports/store.py's AcksWithOutcome); when
        False the ``ack`` is ignored and the caller deletes the message itself."""
        return self._acking is not None

    def takes_result(self, result: StagedResult) -> bool:
        """Whether ``succeed`` can write this staged result with the publish (ports/
        store.py's PublishesWithResult); when False it must be put first."""
        return self._with_results is not None and self._with_results.takes_result(result)

    # --- the one write loop -----------------------------------------------------

    async def _mutate(
        self,
        job_id: str,
        rule: Callable[[Job], Change | None],
        *,
        known: Job | None = None,
        ack: str | None = None,
        result: StagedResult | None = None,
    ) -> tuple[Job, Change | None]:
        """Apply ``rule`` to the current job until its change lands (or it wants none).

        Returns the job as the change left it (or as found, with None). The rule's own
        exceptions (IllegalTransitionError, StaleFenceError) propagate unchanged.
        ``ack``: a receipt deleted with a change that leaves the job terminal (where
        the engine can; see ``acks_with_outcome``).
        """
        job = known
        for _ in range(MAX_CONFLICTS):
            if job is None:
                job = await self._store.get(job_id)
                if job is None:
                    raise JobNotFoundError()
            change = rule(job)
            if change is None:
                return job, None
            if await self._apply(change, ack, result):
                self._observers.changed(change)
                return change.after, change
            job = None  # it moved under us: read it again
        raise StateConflictError(f"job {job_id} kept changing; gave up after {MAX_CONFLICTS}")

    async def _apply(
        self, change: Change, ack: str | None, result: StagedResult | None = None
    ) -> bool:
        if result is not None:
            if self._with_results is None:  # never publish a ref to bytes nobody wrote
                raise ValueError("this engine cannot write a result with the publish")
            acks = ack is not None and self._acking is not None and change.after.status.terminal
            receipt = ack if acks else None
            return await self._with_results.apply_with_result(
                change, result=result, receipt=receipt
            )
        if ack is not None and self._acking is not None and change.after.status.terminal:
            return await self._acking.apply_and_ack(change, receipt=ack)
        return await self._store.apply(change)

    async def _owner_write(
        self,
        job_id: str,
        rule: Callable[[Job], Change],
        *,
        known: Job | None,
        ack: str | None = None,
        result: StagedResult | None = None,
    ) -> Job | None:
        """An owning attempt's write: the job after it, or None if the attempt lost it."""
        try:
            job, _ = await self._mutate(job_id, rule, known=known, ack=ack, result=result)
        except (StaleFenceError, JobNotFoundError):
            return None
        return job

    # --- intake and dispatch -----------------------------------------------------

    async def create(
        self, job: Job, *, idempotency_expires_at: float | None, now: float
    ) -> Accepted:
        change = changes.accept(job, now=now, dispatched=self._store.enqueues_with_job)
        accepted = await self._store.create(change, idempotency_expires_at=idempotency_expires_at)
        if accepted.created:
            self._observers.changed(change)
        return accepted

    async def create_many(
        self, jobs: Sequence[Job], *, idempotency_expires_at: float | None, now: float
    ) -> list[CreateOutcome]:
        """New jobs in one transaction (JobStore.create_many), their outcomes in order."""
        dispatched = self._store.enqueues_with_job
        batch = [changes.accept(job, now=now, dispatched=dispatched) for job in jobs]
        outcomes = await self._store.create_many(
            batch, idempotency_expires_at=idempotency_expires_at
        )
        for change, outcome in zip(batch, outcomes, strict=True):
            if not isinstance(outcome, Exception) and outcome.created:
                self._observers.changed(change)
        return outcomes

    async def mark_dispatched(
        self, job_id: str, *, now: float, redispatch: bool = False, known: Job | None = None
    ) -> None:
        """Its message was (re)sent now. A job gone or finished meanwhile needs nothing.
        ``known``: the job as the caller last saw it stored (intake: as it created it),
        tried first instead of a read; a job that moved since is read again."""
        try:
            await self._mutate(
                job_id,
                lambda job: changes.mark_dispatched(job, now=now, redispatch=redispatch),
                known=known,
            )
        except JobNotFoundError:
            return

    async def redispatch(self, job_id: str, *, now: float) -> bool:
        """Send the job a new message in the transaction that records it (engines that
        enqueue with the job), so a job that finished meanwhile gets neither a message
        nor an event. False when nothing was sent (the job is gone or finished)."""
        if not self._store.enqueues_with_job:
            raise ValueError("this engine cannot send a message with a change")
        try:
            _, change = await self._mutate(
                job_id,
                lambda job: changes.mark_dispatched(job, now=now, redispatch=True, enqueue=True),
            )
        except JobNotFoundError:
            return False
        return change is not None

    # --- the worker ----------------------------------------------------------------

    async def claim(
        self,
        job_id: str,
        *,
        attempt_id: str,
        worker_id: str,
        now: float,
        lease_until: float,
        max_deliveries_without_outcome: int,
        known: Job | None = None,
    ) -> ClaimResult:
        rule = claim_rule(
            attempt_id=attempt_id,
            worker_id=worker_id,
            now=now,
            lease_until=lease_until,
            max_deliveries_without_outcome=max_deliveries_without_outcome,
        )
        job, change = await self._mutate(job_id, rule, known=known)
        return claim_result(job, change)

    @staticmethod
    def claim_change(request: ClaimRequest, job: Job) -> Change | None:
        """The change ``claim`` would write for the job as given (core's claim rule),
        or None when it cannot be claimed now. For an engine that writes it itself
        under the same revision check (ports/queue.py's ClaimsOnReceive)."""
        return requested_rule(request)(job)

    def claimed(self, change: Change) -> ClaimResult:
        """What ``claim`` returns for a claim change that was written (by the engine's
        receive itself: ports/queue.py's ClaimsOnReceive); its observers see it here."""
        self._observers.changed(change)
        return claim_result(change.after, change)

    async def claim_many(self, claims: Sequence[ClaimRequest]) -> list[ClaimResult | Exception]:
        """``claim`` for each request, in order; the changes of the jobs as the requests
        know them are written together, in one transaction where the engine can
        (ports/store.py's AppliesMany). Each is still conditional on its own job's
        revision: a job that moved meanwhile is read again and claimed alone. A claim
        that failed on its own has its exception in its place, so it never hides the
        others' results (a job claimed and then left alone would wait for its lease to
        end, and count a delivery without an outcome)."""
        rules = [requested_rule(c) for c in claims]
        proposed = [rule(c.known) for rule, c in zip(rules, claims, strict=True)]
        to_apply = [change for change in proposed if change is not None]
        applied = iter(await self._apply_many(to_apply)) if to_apply else iter(())
        results: list[ClaimResult | Exception] = []
        for claim, rule, change in zip(claims, rules, proposed, strict=True):
            if change is None:
                results.append(ClaimResult(job=claim.known, claimed=False))
                continue
            written = next(applied)
            if isinstance(written, Exception):
                results.append(written)
            elif written:
                self._observers.changed(change)
                results.append(claim_result(change.after, change))
            else:  # it moved under us: read it again and decide again, alone
                try:
                    job, again = await self._mutate(claim.known.job_id, rule)
                except Exception as exc:  # noqa: BLE001 - that claim's caller gets it
                    results.append(exc)
                else:
                    results.append(claim_result(job, again))
        return results

    async def _apply_many(self, batch: Sequence[Change]) -> Sequence[bool | Exception]:
        """Whether each change was written; an engine without AppliesMany applies them
        one by one, and a failure of one is that change's alone."""
        if self._applies_many is not None and len(batch) > 1:
            return await self._applies_many.apply_many(batch)
        outcomes = await asyncio.gather(
            *(self._store.apply(change) for change in batch), return_exceptions=True
        )
        return [o if isinstance(o, bool | Exception) else _reraise(o) for o in outcomes]

    async def renew_lease(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        lease_until: float,
        known: Job | None = None,
    ) -> LeaseStatus:
        try:
            job, _ = await self._mutate(
                job_id,
                lambda job: changes.renew_lease(
                    job, attempt_id=attempt_id, now=now, lease_until=lease_until
                ),
                known=known,
            )
        except JobNotFoundError:
            return LeaseStatus(held=False)
        except StaleFenceError:
            current = await self._store.get(job_id)
            return LeaseStatus(
                held=False, cancel_requested=bool(current and current.cancel_requested), job=current
            )
        return LeaseStatus(held=True, cancel_requested=job.cancel_requested, job=job)

    async def succeed(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        result_ref: str,
        report: AttemptReport,
        known: Job | None = None,
        ack: str | None = None,
        result: StagedResult | None = None,
    ) -> Job | None:
        """Publish (or, when a cancel was requested meanwhile, end CANCELLED). None: the
        attempt no longer owns the job and nothing was written. ``result``: the staged
        result ``result_ref`` names, written by the same transaction (only where
        ``takes_result`` said so)."""
        return await self._owner_write(
            job_id,
            lambda job: changes.succeed(
                job, attempt_id=attempt_id, now=now, result_ref=result_ref, report=report
            ),
            known=known,
            ack=ack,
            result=result,
        )

    async def schedule_retry(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        not_before: float,
        error: JobError,
        report: AttemptReport,
        known: Job | None = None,
        fall_back_to: str | None = None,
        ack: str | None = None,
    ) -> Job | None:
        """``ack`` goes only with a change that ends the job (a cancel requested
        meanwhile wins over the retry); a scheduled retry keeps its message (I5)."""
        return await self._owner_write(
            job_id,
            lambda job: changes.schedule_retry(
                job,
                attempt_id=attempt_id,
                now=now,
                not_before=not_before,
                error=error,
                report=report,
                fall_back_to=fall_back_to,
            ),
            known=known,
            ack=ack,
        )

    async def wait_for_provider(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        error: JobError,
        report: AttemptReport,
        known: Job | None = None,
        ack: str | None = None,
    ) -> Job | None:
        """The job goes back to the queue to wait for its paused provider, budgets
        untouched (core.changes.wait_for_provider). ``ack`` goes only with a change that
        ends the job (a cancel requested meanwhile wins)."""
        return await self._owner_write(
            job_id,
            lambda job: changes.wait_for_provider(
                job, attempt_id=attempt_id, now=now, error=error, report=report
            ),
            known=known,
            ack=ack,
        )

    async def fail(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        error: JobError,
        report: AttemptReport,
        known: Job | None = None,
        ack: str | None = None,
    ) -> Job | None:
        return await self._owner_write(
            job_id,
            lambda job: changes.fail(
                job, attempt_id=attempt_id, now=now, error=error, report=report
            ),
            known=known,
            ack=ack,
        )

    async def finish_cancelled(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        report: AttemptReport,
        known: Job | None = None,
        ack: str | None = None,
    ) -> Job | None:
        return await self._owner_write(
            job_id,
            lambda job: changes.finish_cancelled(
                job, attempt_id=attempt_id, now=now, report=report
            ),
            known=known,
            ack=ack,
        )

    async def release(
        self,
        job_id: str,
        *,
        attempt_id: str,
        now: float,
        report: AttemptReport,
        known: Job | None = None,
    ) -> Job | None:
        return await self._owner_write(
            job_id,
            lambda job: changes.release(job, attempt_id=attempt_id, now=now, report=report),
            known=known,
        )

    async def end_attempt(
        self, job_id: str, *, attempt_id: str, now: float, report: AttemptReport
    ) -> None:
        """Record why an attempt that lost its job ended; the job itself is left alone."""
        attempt = next(
            (a for a in await self._store.attempts(job_id) if a.attempt_id == attempt_id), None
        )
        try:
            await self._mutate(
                job_id, lambda job: changes.lease_lost(job, attempt, now=now, report=report)
            )
        except JobNotFoundError:
            return

    # --- clients, operators and the sweeper ----------------------------------------

    async def request_cancel(self, job_id: str, *, tenant_id: str, now: float) -> Job:
        """Raises JobNotFoundError (also for another tenant's job), AlreadyTerminalError."""
        job = await self._store.get(job_id, tenant_id=tenant_id)
        if job is None:
            raise JobNotFoundError()
        try:
            after, _ = await self._mutate(
                job_id, lambda current: changes.request_cancel(current, now=now), known=job
            )
        except IllegalTransitionError:
            raise AlreadyTerminalError() from None
        return after

    async def fail_unowned(
        self, job_id: str, *, now: float, error: JobError, kind: EventKind, detail: dict[str, Any]
    ) -> Job | None:
        """None when the job is gone, finished, or owned by a live attempt."""
        try:
            job, _ = await self._mutate(
                job_id,
                lambda job: changes.fail_unowned(
                    job, now=now, error=error, kind=kind, detail=detail
                ),
            )
        except (JobNotFoundError, IllegalTransitionError):
            return None
        return job

    async def replay(
        self, job_id: str, *, now: float, actor: str, reason: str, include_failed: bool = False
    ) -> Job:
        """Raises JobNotFoundError, IllegalTransitionError (core.job.replay's rules)."""
        dispatched = self._store.enqueues_with_job
        job, _ = await self._mutate(
            job_id,
            lambda job: changes.replay(
                job,
                now=now,
                actor=actor,
                reason=reason,
                include_failed=include_failed,
                dispatched=dispatched,
            ),
        )
        return job

    async def claim_webhook(self, job: Job, *, now: float, lease_until: float) -> Job | None:
        """Take the job's owed notification for one delivery attempt (``job``: as the
        dispatcher's scan read it). The job as claimed, or None when nothing is due any
        more (another dispatcher took it, it was delivered, or the job is gone)."""
        try:
            claimed, _ = await self._mutate(
                job.job_id,
                lambda current: changes.claim_webhook(current, now=now, lease_until=lease_until),
                known=job,
            )
        except (JobNotFoundError, IllegalTransitionError):
            return None
        return claimed

    async def record_webhook_attempt(
        self,
        job_id: str,
        *,
        now: float,
        event_seq: int,
        attempt_no: int,
        delivered: bool,
        next_due_at: float | None,
        detail: dict[str, Any],
    ) -> bool:
        """Record a delivery attempt's outcome (core.changes.webhook_attempted). False
        when the attempt no longer owned the notification or the job is gone."""
        try:
            _, change = await self._mutate(
                job_id,
                lambda job: changes.webhook_attempted(
                    job,
                    now=now,
                    event_seq=event_seq,
                    attempt_no=attempt_no,
                    delivered=delivered,
                    next_due_at=next_due_at,
                    detail=detail,
                ),
            )
        except JobNotFoundError:
            return False
        return change is not None

    async def record_event(
        self, job_id: str, kind: EventKind, *, now: float, detail: dict[str, Any] | None = None
    ) -> None:
        """Record an event about a job (nothing if the job is gone or finished)."""
        try:
            await self._mutate(
                job_id, lambda job: changes.note(job, kind, now=now, detail=detail or {})
            )
        except JobNotFoundError:
            return

    # --- what the worker reads beside its writes ---------------------------------
    # The job it is about to change, and whether to stop. Everything else is read
    # from the engine's query port (ports/store.py's JobReads), never through here.

    async def get(self, job_id: str, *, tenant_id: str | None = None) -> Job | None:
        return await self._store.get(job_id, tenant_id=tenant_id)

    async def get_many(self, job_ids: Collection[str]) -> dict[str, Job]:
        return await self._store.get_many(job_ids)

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        return await self._store.cancel_requested(job_ids) if job_ids else set()

    @property
    def cancel_hints(self) -> Hint:
        """Nudged when a cancel is requested for a running job (ports/store.py)."""
        return self._store.cancel_hints

    @property
    def status_hints(self) -> Hint:
        """Nudged when a job moves to another status (ports/store.py)."""
        return self._store.status_hints


def _reraise(error: BaseException) -> bool:
    """A cancellation (or an exit) is not one claim's failure: it stops the caller."""
    raise error
