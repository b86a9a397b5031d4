"""One delivery of one message, through the worker's steps (docs/architecture.md).

The rule that keeps this safe: every change to the job is a conditional write
that names this attempt, and the message is deleted only after the job holds a
terminal status or a scheduled retry. A crash anywhere leaves the message to be
delivered again, and the next delivery finds the truth in the job record.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import structlog

from ferryman.core.errors import (
    BackendUnavailableError,
    FailureClass,
    ProviderError,
    ResultsUnavailableError,
)
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import (
    SUPPORTED_PAYLOAD_VERSIONS,
    AttemptOutcome,
    AttemptReport,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.services.attempt import RunningAttempt
from ferryman.services.claims import ClaimBatcher
from ferryman.services.failures import judge_failure
from ferryman.services.ledger import ClaimRequest, ClaimResult
from ferryman.services.pauses import PAUSED_PROVIDER_RECHECK_SECONDS, ProviderPauses
from ferryman.services.probes import ProviderProbes
from ferryman.services.result_records import result_record
from ferryman.services.verdicts import Skip, Verdict

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Mapping

    from ferryman.core.changes import Change
    from ferryman.core.lease import LeasePolicy
    from ferryman.core.retry import RetryPolicy
    from ferryman.ports.queue import Delivery, Received
    from ferryman.ports.results import StagedResult
    from ferryman.services.attempt import AttemptRunner, CallResult
    from ferryman.services.probes import ProbeSchedule
    from ferryman.services.worker_parts import WorkerParts

log = structlog.get_logger("ferryman.worker")

T = TypeVar("T")
# Well within a lease: the heartbeat has stopped once the call returned.
PERSIST_RETRY_DELAYS_SECONDS = (0.1, 0.5, 2.0)


_VERDICTS = {
    JobStatus.SUCCEEDED: Verdict.SUCCEEDED,
    JobStatus.RETRY_SCHEDULED: Verdict.RETRY_SCHEDULED,
    JobStatus.FAILED: Verdict.FAILED,
    JobStatus.CANCELLED: Verdict.CANCELLED,
}


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    lease: LeasePolicy
    retry: RetryPolicy
    worker_id: str
    # Deliveries of one job that may end without an outcome before it is dead-lettered.
    max_receives: int = 10
    # When a provider paused automatically is probed again (services/probes.py); None:
    # ProbeSchedule's defaults.
    probe_schedule: ProbeSchedule | None = None


class DeliveryHandler:
    def __init__(
        self, parts: WorkerParts, *, runner: AttemptRunner, settings: DeliverySettings
    ) -> None:
        self._catalog = parts.catalog
        self._tasks = parts.tasks
        self._pauses = ProviderPauses(parts.control)
        self._probes = ProviderProbes(
            catalog=parts.catalog,
            control=parts.control,
            clock=parts.clock,
            pauses=self._pauses,
            actor=f"worker:{settings.worker_id}",
            schedule=settings.probe_schedule,
        )
        self._store = store = parts.store
        self._claims = ClaimBatcher(store)
        self._queue = parts.queue
        self._results = parts.results
        self._runner = runner
        self._clock = parts.clock
        self._settings = settings
        self._observers = parts.observers

    async def handle(self, delivery: Delivery, read: Mapping[str, Job] | None = None) -> Verdict:
        """``read``: the jobs of this delivery's receive batch, read together by the
        worker (a job absent from it does not exist); None reads this one alone."""
        return await self._observed(delivery, self._handle(delivery, read))

    async def _observed(self, delivery: Delivery, handling: Awaitable[Verdict]) -> Verdict:
        """The delivery from start to end, as its observers see it."""
        self._observers.delivery_started(delivery)
        verdict = Verdict.DEFERRED  # what a delivery that raised comes to (Worker._guarded)
        try:
            verdict = await handling
        finally:
            self._observers.delivery_ended(delivery, verdict)
        return verdict

    async def _handle(self, delivery: Delivery, read: Mapping[str, Job] | None) -> Verdict:
        self._observers.reached("after_receive")
        message = delivery.message
        if message.payload_version not in SUPPORTED_PAYLOAD_VERSIONS:
            # Rollback safety: leave it for a worker that knows this layout.
            self._observers.delivery_skipped(delivery, None, Skip.UNKNOWN_PAYLOAD)
            await self._hide(delivery, self._settings.lease.visibility_timeout_seconds)
            return Verdict.DEFERRED
        if read is None:
            job = await self._store.get(message.job_id)
        else:
            job = read.get(message.job_id)
        if job is None or job.status.terminal:
            return await self._ack_duplicate(delivery, job)
        now = self._clock.now()
        if job.not_before is not None and job.not_before > now:
            await self._hide(delivery, job.not_before - now)
            return Verdict.DEFERRED
        if job.failure_count >= self._retry_policy(job).max_attempts:
            return await self._fail_exhausted(delivery, job)
        if await self._provider_paused(job):
            return await self._requeue(delivery, PAUSED_PROVIDER_RECHECK_SECONDS)
        if not self._time_for_an_attempt(delivery, now):
            self._observers.delivery_skipped(delivery, job, Skip.NO_TIME)
            await self._hide(delivery, 0.0)
            return Verdict.DEFERRED
        return await self._claim_and_run(delivery, job)

    def _time_for_an_attempt(self, delivery: Delivery, now: float) -> bool:
        """Whether the receipt can stay hidden for as long as an attempt may take. A
        queue whose visibility has a ceiling (SQS: 12 hours from the receive) says so
        in ``Delivery.extendable_until``; an attempt that could outlive it is not
        started, so its message never reappears under a live attempt. Letting the
        message go at once gives it a new receive, whose window starts again."""
        until = delivery.extendable_until
        return until is None or now + self._runner.longest_attempt_seconds <= until

    @property
    def probes(self) -> ProviderProbes:
        """Judges refused calls; probes automatically paused providers (Worker.run)."""
        return self._probes

    def decide_claim(self, delivery: Delivery, job: Job | None) -> Change | None:
        """The claim to write with the receive itself (ports/queue.py's ClaimsOnReceive),
        or None to handle the delivery as ``handle`` does. Only a delivery ``handle``
        would claim at once gets one: a known payload, a job that exists, is not
        terminal, is due, has attempts left and whose provider is known (from a look
        fresh enough to trust) not to be paused; the change is core's claim rule's,
        as ``_claim_and_run`` would ask for. Runs on the engine's writer: it only
        decides, never reads, writes or counts."""
        try:
            return self._decide_claim(delivery, job)
        except Exception:  # noqa: BLE001 - handle() meets the same failure, for this delivery only
            # Raised inside the receive, it would undo every delivery of it, on every look.
            return None

    def _decide_claim(self, delivery: Delivery, job: Job | None) -> Change | None:
        if job is None or job.status.terminal:
            return None
        if delivery.message.payload_version not in SUPPORTED_PAYLOAD_VERSIONS:
            return None
        now = self._clock.now()
        if job.not_before is not None and job.not_before > now:
            return None
        if job.failure_count >= self._retry_policy(job).max_attempts:
            return None
        if not self._time_for_an_attempt(delivery, now):
            return None
        try:
            provider = self._catalog.route_at(job.model, job.fallback_level).provider.name
        except ProviderError:
            provider = None  # the claim's call fails it as an unknown model, as in handle
        if provider is not None and self._pauses.known(provider) is not False:
            return None  # paused, or not known now: handle looks first
        return self._store.claim_change(self._claim_request(job, now), job)

    async def look_at_pauses(self) -> None:
        """Before a receive that claims: a fresh look at the paused providers lets
        ``decide_claim`` claim instead of leaving the delivery to ``handle``."""
        await self._pauses.refresh()

    async def handle_received(self, received: Received) -> Verdict:
        """A delivery from a receive that may have claimed its job already (``decide_claim``);
        one it wrote no claim for is handled as ``handle`` would, with its job as read."""
        return await self._observed(received.delivery, self._handle_received(received))

    async def _handle_received(self, received: Received) -> Verdict:
        if not received.read:
            return await self._handle(received.delivery, None)
        claim = received.claim
        if claim is None:
            job = received.job
            return await self._handle(received.delivery, {} if job is None else {job.job_id: job})
        self._observers.reached("after_receive")
        return await self._claimed(
            received.delivery, claim.before or claim.after, self._store.claimed(claim)
        )

    async def _provider_paused(self, job: Job) -> bool:
        try:
            route = self._catalog.route_at(job.model, job.fallback_level)
        except ProviderError:
            return False  # the claim's call fails it as an unknown model
        return await self._pauses.paused(route.provider.name)

    async def _requeue(self, delivery: Delivery, delay_seconds: float) -> Verdict:
        """Put the job's message back for later without counting this delivery: a new
        message, then the old one deleted (a duplicate is harmless, a loss is not). A
        paused provider may stay paused for hours; its jobs must not be dead-lettered
        for having waited."""
        await self._queue.send(delivery.message, delay_seconds=delay_seconds)
        await self._queue.delete(delivery.receipt)
        return Verdict.DEFERRED

    def _claim_request(self, job: Job, now: float) -> ClaimRequest:
        return ClaimRequest(
            known=job,
            attempt_id=new_attempt_id(),
            worker_id=self._settings.worker_id,
            now=now,
            lease_until=self._settings.lease.lease_until(now),
            max_deliveries_without_outcome=self._settings.max_receives,
        )

    async def _claim_and_run(self, delivery: Delivery, job: Job) -> Verdict:
        # Written together with the claims of the batch's other deliveries.
        claim = await self._claims.claim(self._claim_request(job, self._clock.now()))
        return await self._claimed(delivery, job, claim)

    async def _claimed(self, delivery: Delivery, job: Job, claim: ClaimResult) -> Verdict:
        """Run the attempt the claim opened (or end the delivery the claim refused)."""
        if claim.dead_lettered:
            # The claim found a crash loop: the job is FAILED (dead_lettered), not invoked.
            await self._ack(delivery)
            return Verdict.DEAD_LETTERED
        if not claim.claimed:
            return await self._not_claimed(delivery, claim.job)
        self._observers.reached("after_claim")
        attempt = RunningAttempt(job=claim.job, delivery=delivery)
        self._observers.attempt_started(attempt)
        async with self._runner.attending(attempt):
            result = await self._runner.call(attempt)
            self._observers.reached("after_invoke")
            ref = await self._store_result(attempt, result)
        verdict = await self._conclude(attempt, result, ref)
        self._observers.attempt_ended(attempt, result, verdict)
        return verdict

    async def _store_result(self, attempt: RunningAttempt, result: CallResult) -> str | None:
        """Keep a paid-for output: its write is retried for as long as the heartbeat
        still holds the job, never thrown away for a full disk and paid for again.
        None when the job was lost (or given back) before the write went through."""
        if result.output is None or result.error is not None or attempt.interrupted:
            return None
        key, data = result_record(attempt.job, attempt.attempt_id, result.output)
        staged = self._staged(key, data)
        if staged is not None:
            # Written by the publish itself, in its transaction (_publish): one wait fewer.
            return staged.ref
        try:
            ref = await self._results.put(key, data, keep_trying=lambda: attempt.holds_lease)
        except ResultsUnavailableError:
            return None
        self._observers.reached("after_result_put")
        return ref

    def _staged(self, key: str, data: bytes) -> StagedResult | None:
        """The result as the publish can write it in its own transaction (results kept
        in the job store's database), or None: it is put first."""
        staged = self._results.staged(key, data)
        return staged if staged is not None and self._store.takes_result(staged) else None

    async def _not_claimed(self, delivery: Delivery, job: Job) -> Verdict:
        """Another attempt owns the job (or it just finished): never invoke twice."""
        if job.status.terminal:
            return await self._ack_duplicate(delivery, job)
        now = self._clock.now()
        if job.status is JobStatus.PROCESSING:
            delay = self._settings.lease.takeover_delay_seconds(job.lease_until, now)
        else:
            delay = max(1.0, (job.not_before or now) - now)
        await self._store.record_event(
            job.job_id, EventKind.DUPLICATE_DELIVERY, now=now, detail={"owner": job.attempt_id}
        )
        await self._hide(delivery, delay)
        return Verdict.DEFERRED

    async def _conclude(
        self, attempt: RunningAttempt, result: CallResult, ref: str | None
    ) -> Verdict:
        if attempt.released:
            return await self._release(attempt, result)
        if attempt.lease_lost:
            return await self._lease_lost(attempt, result)
        if attempt.cancel_requested:
            return await self._cancelled(attempt, result)
        if result.error is not None:
            return await self._failed(attempt, result, result.error)
        if ref is None:  # the output could not be kept while the job was ours
            return await self._lease_lost(attempt, result)
        return await self._publish(attempt, result, ref)

    async def _publish(self, attempt: RunningAttempt, result: CallResult, ref: str) -> Verdict:
        """SUCCEEDED, or CANCELLED if a cancel was requested meanwhile (it wins)."""
        report = self._report(result, AttemptOutcome.SUCCEEDED)
        # What _store_result left for this write to keep (the same bytes, the same ref).
        staged = (
            self._staged(*result_record(attempt.job, attempt.attempt_id, result.output))
            if self._results.stages
            else None
        )

        def publish(kept: StagedResult | None) -> Awaitable[Job | None]:
            return self._store.succeed(
                attempt.job.job_id,
                attempt_id=attempt.attempt_id,
                now=self._clock.now(),
                result_ref=ref,
                report=report,
                known=attempt.job,
                ack=self._ack_with_outcome(attempt),
                result=kept,
            )

        try:
            after = await self._persistently(lambda: publish(staged))
        except BackendUnavailableError:
            if staged is None:
                raise
            # The store stayed away longer than a publish waits: keep the paid-for
            # output as before, put on its own while the lease lasts, then publish.
            try:
                await self._results.put(
                    staged.key,
                    staged.data,
                    keep_trying=lambda: (
                        attempt.holds_lease and self._clock.now() < (attempt.job.lease_until or 0)
                    ),
                )
            except ResultsUnavailableError:
                return await self._lease_lost(attempt, result)
            after = await self._persistently(lambda: publish(None))
        if after is None:
            # Not ours any more: this result stays unreferenced (the key is ours alone).
            return await self._lease_lost(attempt, result)
        self._observers.reached("after_publish")
        return await self._ended(attempt, after)

    async def _failed(
        self, attempt: RunningAttempt, result: CallResult, error: ProviderError
    ) -> Verdict:
        job = attempt.job
        verdict = judge_failure(
            job,
            error,
            policy=self._retry_policy(job),
            catalog=self._catalog,
            key_check=await self._probes.after_refusal(result.provider, error),
        )
        if verdict.waits_for_provider:
            return await self._wait_for_provider(attempt, result, verdict.error)
        now = self._clock.now()
        if verdict.retry:
            report = self._report(result, AttemptOutcome.RETRY)
            after = await self._persistently(
                lambda: self._store.schedule_retry(
                    job.job_id,
                    attempt_id=attempt.attempt_id,
                    now=now,
                    not_before=now + verdict.delay_seconds,
                    error=verdict.error,
                    report=report,
                    known=attempt.job,
                    fall_back_to=verdict.fall_back_to,
                    ack=self._ack_with_outcome(attempt),
                )
            )
        else:
            report = self._report(result, AttemptOutcome.FAILED)
            after = await self._persistently(
                lambda: self._store.fail(
                    job.job_id,
                    attempt_id=attempt.attempt_id,
                    now=now,
                    error=verdict.error,
                    report=report,
                    known=attempt.job,
                    ack=self._ack_with_outcome(attempt),
                )
            )
        if after is None:
            return await self._lease_lost(attempt, result)
        if after.status is JobStatus.RETRY_SCHEDULED:
            # The same message carries the retry: hidden until the job is due (I5).
            await self._hide(attempt.delivery, verdict.delay_seconds)
            return Verdict.RETRY_SCHEDULED
        return await self._ended(attempt, after)

    async def _wait_for_provider(
        self, attempt: RunningAttempt, result: CallResult, error: JobError
    ) -> Verdict:
        """Its provider refuses our credentials and is paused: the job goes back to the
        queue (QUEUED, budgets untouched) and its message is put back for later without
        counting this delivery, as step 4 does for every job of a paused provider."""
        report = self._report(result, AttemptOutcome.RETRY)
        after = await self._persistently(
            lambda: self._store.wait_for_provider(
                attempt.job.job_id,
                attempt_id=attempt.attempt_id,
                now=self._clock.now(),
                error=error,
                report=report,
                known=attempt.job,
                ack=self._ack_with_outcome(attempt),
            )
        )
        if after is None:
            return await self._lease_lost(attempt, result)
        if after.status.terminal:  # a cancel requested meanwhile won
            return await self._ended(attempt, after)
        return await self._requeue(attempt.delivery, PAUSED_PROVIDER_RECHECK_SECONDS)

    async def _cancelled(self, attempt: RunningAttempt, result: CallResult) -> Verdict:
        report = self._report(result, AttemptOutcome.CANCELLED)
        after = await self._persistently(
            lambda: self._store.finish_cancelled(
                attempt.job.job_id,
                attempt_id=attempt.attempt_id,
                now=self._clock.now(),
                report=report,
                known=attempt.job,
                ack=self._ack_with_outcome(attempt),
            )
        )
        if after is None:
            return await self._lease_lost(attempt, result)
        return await self._ended(attempt, after)

    async def _ended(self, attempt: RunningAttempt, after: Job) -> Verdict:
        """The owner's write made the job terminal: ack (I5), unless the write deleted
        the message already."""
        if not self._store.acks_with_outcome:
            await self._ack(attempt.delivery)
        return _VERDICTS[after.status]

    def _ack_with_outcome(self, attempt: RunningAttempt) -> str | None:
        """The receipt to delete with a terminal write (the engines that can: one
        transaction instead of two, and still never an ack before the outcome is
        stored); None where the message is deleted after it (``_ended``)."""
        return attempt.delivery.receipt if self._store.acks_with_outcome else None

    async def _lease_lost(self, attempt: RunningAttempt, result: CallResult) -> Verdict:
        """Another attempt owns the job now: record why ours ended, leave its message alone."""
        await self._store.end_attempt(
            attempt.job.job_id,
            attempt_id=attempt.attempt_id,
            now=self._clock.now(),
            report=self._report(result, AttemptOutcome.LEASE_LOST),
        )
        return Verdict.LEASE_LOST

    async def _release(self, attempt: RunningAttempt, result: CallResult) -> Verdict:
        """Shutting down: give the job back now and make its message visible now."""
        released = await self._store.release(
            attempt.job.job_id,
            attempt_id=attempt.attempt_id,
            now=self._clock.now(),
            report=self._report(result, AttemptOutcome.ABANDONED),
            known=attempt.job,
        )
        if released is None:
            return await self._lease_lost(attempt, result)
        await self._hide(attempt.delivery, 0.0)
        return Verdict.RELEASED

    async def _fail_exhausted(self, delivery: Delivery, job: Job) -> Verdict:
        last_class = job.error.failure_class if job.error else FailureClass.TRANSIENT
        error = JobError(
            code="attempts_exhausted",
            failure_class=last_class,
            message=f"{job.failure_count} attempts failed",
        )
        failed = await self._store.fail_unowned(
            job.job_id, now=self._clock.now(), error=error, kind=EventKind.FAILED, detail={}
        )
        if failed is not None:
            await self._ack(delivery)
        return Verdict.FAILED

    async def _ack_duplicate(self, delivery: Delivery, job: Job | None) -> Verdict:
        """A message for a job that is gone or finished: nothing to run. Counted and
        logged, not written into the job's history, which ends with its terminal event."""
        self._observers.delivery_skipped(delivery, job, Skip.DUPLICATE)
        await self._ack(delivery)
        return Verdict.DUPLICATE

    def _retry_policy(self, job: Job) -> RetryPolicy:
        """The deployment's budgets, with the job's task's own where it sets them."""
        if job.task not in self._tasks:
            return self._settings.retry
        return self._tasks.get(job.task).retry_policy(self._settings.retry)

    @staticmethod
    def _report(result: CallResult, outcome: AttemptOutcome) -> AttemptReport:
        """How the attempt ended (observers count it from the change that writes it)."""
        return result.report(outcome)

    async def _persistently(self, write: Callable[[], Awaitable[T]]) -> T:
        """Make an attempt's outcome durable, riding out a briefly unavailable store.

        The model call is already paid for: a lock held a moment too long must not
        throw its result away. Every write here is conditional on the attempt still
        owning the job, so repeating one that failed is safe.
        """
        for delay in PERSIST_RETRY_DELAYS_SECONDS:
            try:
                return await write()
            except BackendUnavailableError as exc:
                log.warning("outcome.write_failed", error_type=type(exc).__name__, retry_in=delay)
                await asyncio.sleep(delay)
        return await write()

    async def _ack(self, delivery: Delivery) -> None:
        self._observers.reached("before_ack")
        await self._queue.delete(delivery.receipt)

    async def _hide(self, delivery: Delivery, seconds: float) -> None:
        await self._queue.change_visibility(delivery.receipt, timeout_seconds=max(0.0, seconds))
