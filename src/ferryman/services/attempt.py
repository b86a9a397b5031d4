"""Running one attempt's model call while its heartbeat keeps the claim alive.

While an attempt is attended (``AttemptRunner.attending``), a heartbeat renews the
job lease (conditional on the attempt) and the message's visibility, from the claim
until the attempt's outcome is about to be written, result storage included. The
call is interrupted when the lease is lost, when the worker shuts down, or when the
job's client asks for a cancel: the heartbeat sees that too, but the worker's
cancel watcher (``watch_cancellations``, services/cancels.py) looks for cancel
requests on every running call at once, as soon as the store hints that one was made
and every ``cancel_check_seconds`` anyway, so a cancel lands within milliseconds
(within about a second when the hint is lost) rather than at the next heartbeat.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core.errors import (
    InvalidOutputError,
    InvalidRequestError,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ThrottledError,
)
from ferryman.core.job import RAW_OUTPUT_MAX_CHARS, AttemptOutcome, AttemptReport
from ferryman.ports.provider import FinishReason
from ferryman.services.cancels import CancelWatcher
from ferryman.services.limiter import estimate_tokens

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ferryman.core.job import Job
    from ferryman.core.lease import LeasePolicy
    from ferryman.ports.provider import ModelProvider, ModelRequest, ModelResponse
    from ferryman.ports.queue import Delivery
    from ferryman.services.catalog import Route
    from ferryman.services.ledger import LeaseStatus
    from ferryman.services.limiter import Limiters
    from ferryman.services.worker_parts import WorkerParts
    from ferryman.tasks import TaskDefinition

log = structlog.get_logger("ferryman.worker")


@dataclass(slots=True)
class RunningAttempt:
    """One claimed attempt: the job as this attempt last wrote it, and why it stopped."""

    job: Job
    delivery: Delivery
    lease_lost: bool = False
    cancel_requested: bool = False
    released: bool = False
    _call: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def attempt_id(self) -> str:
        assert self.job.attempt_id is not None
        return self.job.attempt_id

    @property
    def interrupted(self) -> bool:
        return self.lease_lost or self.cancel_requested or self.released

    @property
    def holds_lease(self) -> bool:
        """Still worth writing for: the job is ours and we are not giving it back."""
        return not (self.lease_lost or self.released)

    def interrupt(self) -> None:
        """Stop the model call if it is still running (a no-op once it returned)."""
        if self._call is not None and not self._call.done():
            self._call.cancel()


@dataclass(slots=True)
class CallResult:
    output: dict[str, Any] | None = None
    error: ProviderError | None = None
    latency_ms: int | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    provider_request_id: str | None = None
    # Which alias the call ran under, at which provider, which model answered and why
    # it stopped; what the call cost; the answer, when it broke the schema.
    model: str | None = None
    provider: str | None = None
    provider_model: str | None = None
    finish_reason: str | None = None
    cost_nano_usd: int | None = None
    raw_output: str | None = None

    def report(self, outcome: AttemptOutcome) -> AttemptReport:
        error = self.error if outcome in _FAILING_OUTCOMES else None
        return AttemptReport(
            outcome=outcome,
            failure_class=error.failure_class if error else None,
            error_code=error.code if error else None,
            latency_ms=self.latency_ms,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            provider_request_id=self.provider_request_id,
            model=self.model,
            provider=self.provider,
            provider_model=self.provider_model,
            finish_reason=self.finish_reason,
            cost_nano_usd=self.cost_nano_usd,
            raw_output=self.raw_output,
        )

    def ended_log_fields(self, outcome: AttemptOutcome | None) -> dict[str, Any]:
        """What the ``attempt.ended`` line says about the call: the model alias, the
        provider and the provider's model, how the attempt ended, and the failure class
        and error code of a call that failed. Identifiers only: never the prompt, the
        output or an error's message."""
        error = self.error
        return {
            "model": self.model,
            "provider": self.provider,
            "provider_model": self.provider_model,
            "outcome": None if outcome is None else str(outcome),
            "failure_class": None if error is None else str(error.failure_class),
            "error_code": None if error is None else error.code,
            "latency_ms": self.latency_ms,
        }


# Outcomes whose report says what failed (a cancel keeps the failure its call had).
_FAILING_OUTCOMES = frozenset(
    {AttemptOutcome.RETRY, AttemptOutcome.FAILED, AttemptOutcome.CANCELLED}
)


@dataclass(frozen=True, slots=True)
class AttemptTimeouts:
    # A call's client-side timeout, for a provider without one of its own.
    provider_timeout_seconds: float
    # The whole call as the worker bounds it: above every provider's timeout, so the
    # provider's own, well-described timeout fires first (``ferryman doctor`` checks it).
    attempt_timeout_seconds: float
    # Each provider's own timeout (``[providers.NAME] timeout_seconds``), by name.
    per_provider: Mapping[str, float] = field(default_factory=dict)

    def for_provider(self, provider: str) -> float:
        """The timeout a call to ``provider`` is given, whatever the provider's kind."""
        return self.per_provider.get(provider, self.provider_timeout_seconds)


def attempt_timeouts(
    provider_timeout_seconds: float,
    *,
    attempt_timeout_seconds: float | None = None,
    provider_timeouts: Mapping[str, float] | None = None,
) -> AttemptTimeouts:
    """The timeouts of a worker's calls; the attempt's, unless given, is 1.5 times the
    longest provider timeout (FERRYMAN_ATTEMPT_TIMEOUT_SECONDS's rule)."""
    per_provider = dict(provider_timeouts or {})
    return AttemptTimeouts(
        provider_timeout_seconds=provider_timeout_seconds,
        attempt_timeout_seconds=attempt_timeout_seconds
        or max([provider_timeout_seconds, *per_provider.values()]) * 1.5,
        per_provider=per_provider,
    )


class AttemptRunner:
    def __init__(
        self,
        parts: WorkerParts,
        *,
        lease: LeasePolicy,
        timeouts: AttemptTimeouts,
        limiters: Limiters,
    ) -> None:
        self._store = parts.store
        self._queue = parts.queue
        self._catalog = parts.catalog
        self._tasks = parts.tasks
        self._clock = parts.clock
        self._observers = parts.observers
        self._lease = lease
        self._timeouts = timeouts
        self._limiters = limiters
        self._releasing = asyncio.Event()
        # Attended attempts by job id: what the cancel watcher looks at.
        self._attended: dict[str, RunningAttempt] = {}

    @property
    def longest_attempt_seconds(self) -> float:
        """The longest one attempt may hold its message: its call, bounded by the attempt
        timeout whatever the provider, then a lease's worth for its writes."""
        return self._timeouts.attempt_timeout_seconds + self._lease.lease_seconds

    def release_all(self) -> None:
        """Interrupt every attended attempt so it gives its job back (shutdown)."""
        self._releasing.set()
        for attempt in list(self._attended.values()):
            attempt.released = True
            attempt.interrupt()

    def attending(self, attempt: RunningAttempt) -> Attending:
        """Heartbeat for the attempt (and watch it for cancels) until the block ends."""
        return Attending(self, attempt)

    async def call(self, attempt: RunningAttempt) -> CallResult:
        """Invoke the model for the attempt; interrupted calls leave the result empty."""
        result = CallResult()
        if attempt.interrupted:
            return result
        job = attempt.job
        try:
            task = self._tasks.get(job.task)
            route = self._catalog.route_at(job.model, job.fallback_level)
            request = task.build_request(
                job.input, model=route.alias.model, attempt_no=job.fence, job_id=job.job_id
            )
        except InvalidRequestError as exc:  # a task or stored input this worker cannot use
            result.error = ProviderBadRequestError(exc.message)
            return result
        except ProviderError as exc:
            result.error = exc
            return result
        result.model, result.provider = route.alias.name, route.provider.name
        attempt._call = asyncio.create_task(self._call(attempt, route, task, request, result))
        try:
            await attempt._call
        except asyncio.CancelledError:
            if not attempt.interrupted:
                raise  # we are being cancelled ourselves, not interrupted
        finally:
            attempt._call = None
        return result

    async def watch_cancellations(self, stop: asyncio.Event, *, interval_seconds: float) -> None:
        """Interrupt attended calls whose job's client asked for a cancel: one batched
        read for every running call, on the store's cancel hint and every interval."""
        watcher = CancelWatcher(
            requests=self._store,
            hints=self._store.cancel_hints,
            attended=self._attended,
            interval_seconds=interval_seconds,
        )
        await watcher.run(stop)

    async def _call(
        self,
        attempt: RunningAttempt,
        route: Route,
        task: TaskDefinition[Any],
        request: ModelRequest,
        result: CallResult,
    ) -> None:
        provider = route.provider
        limiter = self._limiters.get(provider.name, request.model)
        estimate = estimate_tokens(request.system, request.prompt, max_tokens=request.max_tokens)
        elapsed: float | None = None  # set once the provider was asked
        try:
            async with limiter.slot(estimated_tokens=estimate) as admission:
                self._observers.call_started(attempt, result)
                started = time.perf_counter()
                try:
                    response = await self._invoke(provider, request)
                except ProviderError as exc:
                    result.error = exc
                    # The provider's id for the failed call: what its support asks for.
                    result.provider_request_id = exc.provider_request_id
                    if not exc.scripted:  # a client's script never steers the shared window
                        await limiter.record(
                            admission,
                            throttled=isinstance(exc, ThrottledError),
                            retry_after_seconds=exc.retry_after_seconds,
                        )
                    return
                finally:
                    elapsed = time.perf_counter() - started
                    result.latency_ms = int(elapsed * 1000)
                await limiter.record(admission, throttled=False, used_tokens=_used_tokens(response))
            self._record_usage(result, route, response)
            try:
                if response.finish_reason is FinishReason.LENGTH:
                    raise InvalidOutputError(
                        "the answer was cut off at max_tokens before it was complete"
                    )
                result.output = task.parse_output(response.text, request=request)
            except ProviderError as exc:  # InvalidOutputError: the schema was broken
                result.error = exc
                # Kept (bounded) with the attempt, for its tenant to debug the prompt with.
                result.raw_output = response.text[:RAW_OUTPUT_MAX_CHARS]
        finally:
            if elapsed is not None:
                self._observers.call_ended(attempt, result, elapsed)

    async def _invoke(self, provider: ModelProvider, request: ModelRequest) -> ModelResponse:
        try:
            async with asyncio.timeout(self._timeouts.attempt_timeout_seconds):
                return await provider.invoke(
                    request, timeout_seconds=self._timeouts.for_provider(provider.name)
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
    def _record_usage(result: CallResult, route: Route, response: ModelResponse) -> None:
        tokens_in, tokens_out = response.input_tokens, response.output_tokens
        result.input_tokens, result.output_tokens = tokens_in, tokens_out
        result.provider_request_id = response.provider_request_id
        result.provider_model = response.model
        result.finish_reason = response.finish_detail or str(response.finish_reason)
        if tokens_in is None or tokens_out is None:
            # Unknown, never 0 tokens and $0: the attempt's cost stays null, and usage
            # reports count such calls apart (observability/job_logs.py warns of them).
            result.cost_nano_usd = None
        else:
            result.cost_nano_usd = route.alias.prices.cost_nano_usd(tokens_in, tokens_out)

    async def _beat(self, attempt: RunningAttempt) -> LeaseStatus | None:
        """Renew the lease and the message's visibility; None when the store failed."""
        now = self._clock.now()
        try:
            status = await self._store.renew_lease(
                attempt.job.job_id,
                attempt_id=attempt.attempt_id,
                now=now,
                lease_until=self._lease.lease_until(now),
                known=attempt.job,
            )
            await self._queue.change_visibility(
                attempt.delivery.receipt, timeout_seconds=self._lease.visibility_timeout_seconds
            )
        except Exception as exc:  # noqa: BLE001 - one missed beat must not kill a paid-for call
            log.warning(
                "heartbeat.failed", job_id=attempt.job.job_id, error_type=type(exc).__name__
            )
            return None
        return status

    async def _beat_and_judge(self, attempt: RunningAttempt) -> bool:
        """One heartbeat; False when the attempt must stop (it was interrupted)."""
        if self._releasing.is_set():
            # release_all interrupted it already; nothing more to renew.
            return False
        status = await self._beat(attempt)
        if status is None:
            return True  # the store did not answer: the lease has two more beats of slack
        if not status.held:
            attempt.lease_lost = True
            attempt.interrupt()
            return False
        if status.job is not None:
            attempt.job = status.job
        if status.cancel_requested and not attempt.cancel_requested:
            attempt.cancel_requested = True
            attempt.interrupt()
        return True


def _used_tokens(response: ModelResponse) -> int | None:
    """What the call used, for the limiter's token budget; None when the provider did not
    say, so the limiter keeps the call's estimate rather than refunding all of it."""
    if response.input_tokens is None or response.output_tokens is None:
        return None
    return response.input_tokens + response.output_tokens


class Attending:
    """The heartbeat of one attended attempt, as a timer between beats.

    A worker holds thousands of calls at once; between beats each holds only a timer
    handle here, not a task with its own frame, timeout and waiter (about a kilobyte
    less per call in flight, docs/benchmarks.md). A beat runs as a short task.
    """

    __slots__ = ("_attempt", "_beating", "_runner", "_timer")

    def __init__(self, runner: AttemptRunner, attempt: RunningAttempt) -> None:
        self._runner = runner
        self._attempt = attempt
        self._timer: asyncio.TimerHandle | None = None
        self._beating: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RunningAttempt:
        runner, attempt = self._runner, self._attempt
        runner._attended[attempt.job.job_id] = attempt
        if runner._releasing.is_set():
            attempt.released = True
        self._schedule()
        return attempt

    async def __aexit__(self, *exc_info: object) -> None:
        self._runner._attended.pop(self._attempt.job.job_id, None)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        beating = self._beating
        if beating is not None:
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    def _schedule(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(self._runner._lease.heartbeat_seconds, self._fire)

    def _fire(self) -> None:
        self._timer = None
        self._beating = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        try:
            if await self._runner._beat_and_judge(self._attempt):
                self._schedule()
        finally:
            self._beating = None
