"""Running one attempt's model call while its heartbeat keeps the claim alive.

The heartbeat renews the job lease (conditional on the attempt id) and the
message's visibility. If the lease is lost, the job's owner asks for
cancellation, or the worker is shutting down, the call is cancelled and the
result says why, so the caller records the right outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core.errors import (
    InvalidRequestError,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ThrottledError,
)
from ferryman.core.job import AttemptOutcome, AttemptReport
from ferryman.observability import metrics
from ferryman.services.gate import ProviderGate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ferryman.core.clock import Clock
    from ferryman.core.job import Job
    from ferryman.core.lease import LeasePolicy
    from ferryman.ports.provider import ModelProvider, ModelRequest, ModelResponse
    from ferryman.ports.queue import Delivery, JobQueue
    from ferryman.ports.store import JobStore, LeaseStatus
    from ferryman.tasks import TaskDefinition, TaskRegistry

log = structlog.get_logger("ferryman.worker")


@dataclass(slots=True)
class CallResult:
    output: dict[str, Any] | None = None
    error: ProviderError | None = None
    lease_lost: bool = False
    cancel_requested: bool = False
    released: bool = False
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    provider_request_id: str | None = None

    @property
    def interrupted(self) -> bool:
        return self.lease_lost or self.cancel_requested or self.released

    def report(self, outcome: AttemptOutcome) -> AttemptReport:
        error = self.error if outcome in (AttemptOutcome.RETRY, AttemptOutcome.FAILED) else None
        return AttemptReport(
            outcome=outcome,
            failure_class=error.failure_class if error else None,
            error_code=error.code if error else None,
            latency_ms=self.latency_ms,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            provider_request_id=self.provider_request_id,
        )


@dataclass(frozen=True, slots=True)
class AttemptTimeouts:
    provider_timeout_seconds: float
    attempt_timeout_seconds: float


class AttemptRunner:
    def __init__(
        self,
        *,
        store: JobStore,
        queue: JobQueue,
        providers: Sequence[ModelProvider],
        tasks: TaskRegistry,
        clock: Clock,
        lease: LeasePolicy,
        timeouts: AttemptTimeouts,
        gate_size: int,
    ) -> None:
        self._store = store
        self._queue = queue
        self._providers = list(providers)
        self._tasks = tasks
        self._clock = clock
        self._lease = lease
        self._timeouts = timeouts
        self._gates = {p.name: ProviderGate(gate_size) for p in self._providers}
        self._releasing = asyncio.Event()

    def release_all(self) -> None:
        """Interrupt every running attempt so it gives its job back (shutdown)."""
        self._releasing.set()

    async def run(self, job: Job, delivery: Delivery) -> CallResult:
        result = CallResult()
        try:
            task = self._tasks.get(job.task)
            provider = self._provider_for(job.model)
            request = task.build_request(
                job.input, model=job.model, attempt_no=job.fence, job_id=job.job_id
            )
        except InvalidRequestError as exc:  # a task or stored input this worker cannot use
            result.error = ProviderBadRequestError(exc.message)
            return result
        except ProviderError as exc:
            result.error = exc
            return result
        call = asyncio.create_task(self._call(provider, task, request, result))
        heartbeat = asyncio.create_task(self._heartbeat(job, delivery, call, result))
        try:
            await call
        except asyncio.CancelledError:
            if not result.interrupted:
                raise  # we are being cancelled ourselves, not interrupted by the heartbeat
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            if not call.done():
                call.cancel()
        return result

    def _provider_for(self, model: str) -> ModelProvider:
        for provider in self._providers:
            if provider.serves(model):
                return provider
        raise ProviderBadRequestError(f"no provider serves model {model!r}")

    async def _call(
        self,
        provider: ModelProvider,
        task: TaskDefinition[Any],
        request: ModelRequest,
        result: CallResult,
    ) -> None:
        gate = self._gates[provider.name]
        async with gate.slot():
            metrics.INVOCATIONS.labels(task=task.name, model=request.model).inc()
            started = time.perf_counter()
            try:
                response = await self._invoke(provider, request)
            except ProviderError as exc:
                result.error = exc
                if isinstance(exc, ThrottledError):
                    metrics.THROTTLES.labels(model=request.model).inc()
                await gate.record(throttled=isinstance(exc, ThrottledError))
                return
            finally:
                elapsed = time.perf_counter() - started
                result.latency_ms = int(elapsed * 1000)
                metrics.MODEL_LATENCY.labels(model=request.model).observe(elapsed)
            await gate.record(throttled=False)
        self._record_usage(result, request.model, response)
        try:
            result.output = task.parse_output(response.text)
        except ProviderError as exc:  # InvalidOutputError: the schema was broken
            metrics.VALIDATION_FAILURES.labels(task=task.name).inc()
            result.error = exc

    async def _invoke(self, provider: ModelProvider, request: ModelRequest) -> ModelResponse:
        try:
            async with asyncio.timeout(self._timeouts.attempt_timeout_seconds):
                return await provider.invoke(
                    request, timeout_seconds=self._timeouts.provider_timeout_seconds
                )
        except TimeoutError as exc:
            raise ProviderTimeoutError("the attempt timed out") from exc
        except (ProviderError, asyncio.CancelledError):
            raise
        except InvalidRequestError as exc:
            raise ProviderBadRequestError(exc.message) from exc
        except Exception as exc:
            log.warning("provider.unexpected_error", error_type=type(exc).__name__)
            raise ProviderServerError("the provider failed unexpectedly") from exc

    @staticmethod
    def _record_usage(result: CallResult, model: str, response: ModelResponse) -> None:
        result.input_tokens = response.input_tokens
        result.output_tokens = response.output_tokens
        result.provider_request_id = response.provider_request_id
        metrics.TOKENS.labels(model=model, direction="input").inc(response.input_tokens)
        metrics.TOKENS.labels(model=model, direction="output").inc(response.output_tokens)

    async def _beat(self, job: Job, delivery: Delivery) -> LeaseStatus | None:
        """Renew the lease and the message's visibility; None when the store failed."""
        assert job.attempt_id is not None
        now = self._clock.now()
        try:
            status = await self._store.renew_lease(
                job.job_id,
                attempt_id=job.attempt_id,
                now=now,
                lease_until=self._lease.lease_until(now),
            )
            await self._queue.change_visibility(
                delivery.receipt, timeout_seconds=self._lease.visibility_timeout_seconds
            )
        except Exception as exc:  # noqa: BLE001 - one missed beat must not kill a paid-for call
            log.warning(
                "heartbeat.failed", job_id=job.job_id, error_type=type(exc).__name__, error=str(exc)
            )
            return None
        return status

    async def _heartbeat(
        self, job: Job, delivery: Delivery, call: asyncio.Task[None], result: CallResult
    ) -> None:
        assert job.attempt_id is not None
        interval = self._lease.heartbeat_seconds
        while not call.done():
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await self._releasing.wait()
            if self._releasing.is_set():
                result.released = True
                call.cancel()
                return
            status = await self._beat(job, delivery)
            if status is None:
                continue  # the store did not answer: the lease has two more beats of slack
            if not status.held or status.cancel_requested:
                result.lease_lost = not status.held
                result.cancel_requested = status.held and status.cancel_requested
                call.cancel()
                return
