"""One delivery of one message, through the ten steps of ARCHITECTURE.md section 6.

The rule that keeps this safe: every change to the job is a conditional write
that names this attempt, and the message is deleted only after the job holds a
terminal status or a scheduled retry. A crash anywhere leaves the message to be
delivered again, and the next delivery finds the truth in the job record.
"""

from __future__ import annotations

import asyncio
import enum
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import structlog

from ferryman.core.errors import FailureClass, StoreUnavailableError
from ferryman.core.ids import new_attempt_id
from ferryman.core.job import (
    SUPPORTED_PAYLOAD_VERSIONS,
    AttemptOutcome,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.core.retry import decide
from ferryman.observability import metrics

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ferryman.core.clock import Clock
    from ferryman.core.errors import ProviderError
    from ferryman.core.lease import LeasePolicy
    from ferryman.core.retry import RetryPolicy
    from ferryman.failpoints import Failpoints
    from ferryman.ports.queue import Delivery, JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import JobStore
    from ferryman.services.attempt import AttemptRunner, CallResult

log = structlog.get_logger("ferryman.worker")

T = TypeVar("T")
# Well within a lease: the heartbeat has stopped once the call returned.
PERSIST_RETRY_DELAYS_SECONDS = (0.1, 0.5, 2.0)


class Verdict(enum.StrEnum):
    """What became of a delivery (for tests and metrics)."""

    SUCCEEDED = "succeeded"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    CANCELLED = "cancelled"
    LEASE_LOST = "lease_lost"
    RELEASED = "released"
    DUPLICATE = "duplicate"
    DEFERRED = "deferred"


@dataclass(frozen=True, slots=True)
class DeliverySettings:
    lease: LeasePolicy
    retry: RetryPolicy
    worker_id: str


class DeliveryHandler:
    def __init__(
        self,
        *,
        store: JobStore,
        queue: JobQueue,
        results: ResultStore,
        runner: AttemptRunner,
        clock: Clock,
        settings: DeliverySettings,
        failpoints: Failpoints,
    ) -> None:
        self._store = store
        self._queue = queue
        self._results = results
        self._runner = runner
        self._clock = clock
        self._settings = settings
        self._failpoints = failpoints

    async def handle(self, delivery: Delivery) -> Verdict:
        self._failpoints.hit("after_receive")
        message = delivery.message
        if message.payload_version not in SUPPORTED_PAYLOAD_VERSIONS:
            # Rollback safety: leave it for a worker that knows this layout.
            metrics.UNKNOWN_PAYLOADS.inc()
            await self._hide(delivery, self._settings.lease.visibility_timeout_seconds)
            return Verdict.DEFERRED
        job = await self._store.get(message.job_id)
        if job is None or job.status.terminal:
            return await self._ack_duplicate(delivery, job)
        now = self._clock.now()
        if job.not_before is not None and job.not_before > now:
            await self._hide(delivery, job.not_before - now)
            return Verdict.DEFERRED
        if job.failure_count >= self._settings.retry.max_attempts:
            return await self._fail_exhausted(delivery, job)
        return await self._claim_and_run(delivery, job)

    async def _claim_and_run(self, delivery: Delivery, job: Job) -> Verdict:
        now = self._clock.now()
        attempt_id = new_attempt_id()
        claim = await self._store.claim(
            job.job_id,
            attempt_id=attempt_id,
            worker_id=self._settings.worker_id,
            now=now,
            lease_until=self._settings.lease.lease_until(now),
        )
        if not claim.claimed:
            return await self._not_claimed(delivery, claim.job)
        if claim.abandoned_attempt_id is not None:
            metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.ABANDONED).inc()
        self._failpoints.hit("after_claim")
        job = claim.job
        bound = log.bind(
            job_id=job.job_id,
            tenant_id=job.tenant_id,
            correlation_id=job.correlation_id,
            attempt=job.fence,
        )
        bound.debug("attempt.started")
        result = await self._runner.run(job, delivery)
        self._failpoints.hit("after_invoke")
        verdict = await self._conclude(delivery, job, result)
        bound.info("attempt.ended", verdict=str(verdict), latency_ms=result.latency_ms)
        return verdict

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

    async def _conclude(self, delivery: Delivery, job: Job, result: CallResult) -> Verdict:
        if result.released:
            return await self._release(delivery, job, result)
        if result.lease_lost:
            return await self._lease_lost(job, result)
        if result.cancel_requested:
            return await self._cancelled(delivery, job, result)
        if result.error is not None:
            return await self._failed(delivery, job, result, result.error)
        return await self._publish(delivery, job, result)

    async def _publish(self, delivery: Delivery, job: Job, result: CallResult) -> Verdict:
        assert job.attempt_id is not None
        data = json.dumps(result.output, separators=(",", ":"), ensure_ascii=False).encode()
        # Attempt-specific, so a late attempt can never overwrite the published result.
        key = f"{job.tenant_id}/{job.job_id}.{job.attempt_id}.json"
        ref = await self._persistently(lambda: self._results.put(key, data))
        self._failpoints.hit("after_result_put")
        attempt_id = job.attempt_id
        published = await self._persistently(
            lambda: self._store.succeed(
                job.job_id,
                attempt_id=attempt_id,
                now=self._clock.now(),
                result_ref=ref,
                report=result.report(AttemptOutcome.SUCCEEDED),
            )
        )
        if not published:
            # Not ours any more: this result stays unreferenced (the key is ours alone).
            return await self._lease_lost(job, result)
        self._failpoints.hit("after_publish")
        self._count_terminal(job, JobStatus.SUCCEEDED, None)
        metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.SUCCEEDED).inc()
        await self._ack(delivery)
        return Verdict.SUCCEEDED

    async def _failed(
        self, delivery: Delivery, job: Job, result: CallResult, error: ProviderError
    ) -> Verdict:
        assert job.attempt_id is not None
        klass = error.failure_class
        invalid = klass is FailureClass.INVALID_OUTPUT
        decision = decide(
            self._settings.retry,
            failure_class=klass,
            failures=job.failure_count + 1,
            invalid_outputs=job.invalid_output_count + (1 if invalid else 0),
            retry_after_seconds=error.retry_after_seconds,
        )
        now = self._clock.now()
        if decision.retry:
            job_error = JobError(code=error.code, failure_class=klass, message=error.message)
            attempt_id = job.attempt_id
            scheduled = await self._persistently(
                lambda: self._store.schedule_retry(
                    job.job_id,
                    attempt_id=attempt_id,
                    now=now,
                    not_before=now + decision.delay_seconds,
                    error=job_error,
                    report=result.report(AttemptOutcome.RETRY),
                )
            )
            if not scheduled:
                return await self._lease_lost(job, result)
            metrics.RETRIES.labels(failure_class=klass).inc()
            metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.RETRY).inc()
            # The same message carries the retry: hidden until the job is due (I5).
            await self._hide(delivery, decision.delay_seconds)
            return Verdict.RETRY_SCHEDULED
        code = error.code if decision.reason == "not_retryable" else decision.reason
        job_error = JobError(code=code, failure_class=klass, message=error.message)
        attempt_id = job.attempt_id
        final_error = job_error
        failed = await self._persistently(
            lambda: self._store.fail(
                job.job_id,
                attempt_id=attempt_id,
                now=now,
                error=final_error,
                report=result.report(AttemptOutcome.FAILED),
            )
        )
        if not failed:
            return await self._lease_lost(job, result)
        self._count_terminal(job, JobStatus.FAILED, klass)
        metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.FAILED).inc()
        await self._ack(delivery)
        return Verdict.FAILED

    async def _cancelled(self, delivery: Delivery, job: Job, result: CallResult) -> Verdict:
        assert job.attempt_id is not None
        attempt_id = job.attempt_id
        done = await self._persistently(
            lambda: self._store.finish_cancelled(
                job.job_id,
                attempt_id=attempt_id,
                now=self._clock.now(),
                report=result.report(AttemptOutcome.CANCELLED),
            )
        )
        if not done:
            return await self._lease_lost(job, result)
        self._count_terminal(job, JobStatus.CANCELLED, None)
        metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.CANCELLED).inc()
        await self._ack(delivery)
        return Verdict.CANCELLED

    async def _lease_lost(self, job: Job, result: CallResult) -> Verdict:
        """Another attempt owns the job now: record why ours ended, leave its message alone."""
        assert job.attempt_id is not None
        await self._store.end_attempt(
            job.job_id,
            attempt_id=job.attempt_id,
            now=self._clock.now(),
            report=result.report(AttemptOutcome.LEASE_LOST),
        )
        metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.LEASE_LOST).inc()
        return Verdict.LEASE_LOST

    async def _release(self, delivery: Delivery, job: Job, result: CallResult) -> Verdict:
        """Shutting down: give the job back now and make its message visible now."""
        assert job.attempt_id is not None
        await self._store.release(
            job.job_id,
            attempt_id=job.attempt_id,
            now=self._clock.now(),
            report=result.report(AttemptOutcome.ABANDONED),
        )
        metrics.ATTEMPTS_ENDED.labels(outcome=AttemptOutcome.ABANDONED).inc()
        await self._hide(delivery, 0.0)
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
            self._count_terminal(job, JobStatus.FAILED, last_class)
            await self._ack(delivery)
        return Verdict.FAILED

    async def _ack_duplicate(self, delivery: Delivery, job: Job | None) -> Verdict:
        metrics.DUPLICATE_DELIVERIES.inc()
        if job is not None:
            await self._store.record_event(
                job.job_id,
                EventKind.DUPLICATE_DELIVERY,
                now=self._clock.now(),
                detail={"status": str(job.status), "receive_count": delivery.receive_count},
            )
        await self._ack(delivery)
        return Verdict.DUPLICATE

    async def _persistently(self, write: Callable[[], Awaitable[T]]) -> T:
        """Make an attempt's outcome durable, riding out a briefly unavailable store.

        The model call is already paid for: a lock held a moment too long must not
        throw its result away. Every write here is conditional on the attempt still
        owning the job, so repeating one that failed is safe.
        """
        for delay in PERSIST_RETRY_DELAYS_SECONDS:
            try:
                return await write()
            except (StoreUnavailableError, OSError) as exc:
                log.warning("outcome.write_failed", error_type=type(exc).__name__, retry_in=delay)
                await asyncio.sleep(delay)
        return await write()

    async def _ack(self, delivery: Delivery) -> None:
        self._failpoints.hit("before_ack")
        await self._queue.delete(delivery.receipt)

    async def _hide(self, delivery: Delivery, seconds: float) -> None:
        await self._queue.change_visibility(delivery.receipt, timeout_seconds=max(0.0, seconds))

    def _count_terminal(self, job: Job, status: JobStatus, klass: FailureClass | None) -> None:
        metrics.JOB_OUTCOMES.labels(
            task=job.task, tenant=job.tenant_id, status=status, failure_class=klass or ""
        ).inc()
        metrics.END_TO_END_LATENCY.labels(task=job.task).observe(
            max(0.0, self._clock.now() - job.created_at)
        )
