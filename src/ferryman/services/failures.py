"""What a failed model call leads to: a retry, a fallback model, or the end of the job.

core/retry.py decides retry or give up from the failure class and the budgets; this
module puts that decision in the job's context: whether the job's model has a
fallback left to move on to, the error the job records, and whether the failure
says the provider itself must be paused (it refused our credentials: every other
job for it would be refused too, so none should be sent until an operator resumes).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import ContextLengthExceededError, FailureClass
from ferryman.core.job import JobError
from ferryman.core.retry import decide

if TYPE_CHECKING:
    from ferryman.core.errors import ProviderError
    from ferryman.core.job import Job
    from ferryman.core.retry import RetryPolicy
    from ferryman.services.catalog import ModelCatalog


@dataclass(frozen=True, slots=True)
class FailureVerdict:
    retry: bool
    error: JobError
    delay_seconds: float = 0.0
    # The fallback model the job moves on to (its budgets start afresh there).
    fall_back_to: str | None = None
    # The provider to pause for every job, not just this one.
    pause_provider: str | None = None


def judge_failure(
    job: Job,
    error: ProviderError,
    *,
    policy: RetryPolicy,
    catalog: ModelCatalog,
    provider: str | None,
) -> FailureVerdict:
    klass = error.failure_class
    invalid = klass is FailureClass.INVALID_OUTPUT
    chain = catalog.chain(job.model)
    next_level = job.fallback_level + 1
    fallback = chain[next_level] if next_level < len(chain) else None
    decision = decide(
        policy,
        failure_class=klass,
        failures=job.failure_count + 1,
        invalid_outputs=job.invalid_output_count + (1 if invalid else 0),
        retry_after_seconds=error.retry_after_seconds,
        has_fallback=fallback is not None,
        context_too_long=isinstance(error, ContextLengthExceededError),
    )
    pause = provider if klass is FailureClass.UNAUTHORIZED and not error.scripted else None
    if decision.retry:
        return FailureVerdict(
            retry=True,
            error=JobError(code=error.code, failure_class=klass, message=error.message),
            delay_seconds=decision.delay_seconds,
            fall_back_to=fallback if decision.fall_back else None,
            pause_provider=pause,
        )
    code = error.code if decision.reason == "not_retryable" else decision.reason
    return FailureVerdict(
        retry=False,
        error=JobError(code=code, failure_class=klass, message=error.message),
        pause_provider=pause,
    )
