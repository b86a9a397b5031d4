"""What a failed model call leads to: a retry, a fallback model, a wait, or the end of the job.

core/retry.py decides retry or give up from the failure class and the budgets; this
module puts that decision in the job's context: whether the job's model has a
fallback left to move on to, the error the job records, and, for a call whose
credentials were refused, what a probe of its provider showed (services/probes.py):

- the provider refuses our credentials (it is paused for every job): the failure is
  the deployment's, not the job's, so the job goes back to the queue to wait for the
  provider with its budgets untouched, and runs once the provider is resumed;
- the provider takes them: it refused this request; the job fails, not retried;
- the probe showed nothing: the job is retried as after a transient failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import ContextLengthExceededError, FailureClass
from ferryman.core.job import JobError
from ferryman.core.retry import decide
from ferryman.services.probes import KeyCheck

if TYPE_CHECKING:
    from ferryman.core.errors import ProviderError
    from ferryman.core.job import Job
    from ferryman.core.retry import RetryPolicy
    from ferryman.services.catalog import ModelCatalog

# What the job's error adds to a refused call's message, by what the probe showed.
_KEY_CHECK_NOTES = {
    KeyCheck.REFUSED: "the provider refuses our credentials and is paused for every job: "
    "this job waits in the queue for it, spending no attempt",
    KeyCheck.ACCEPTED: "the provider takes our credentials (a check of it passed), so it "
    "refused this request itself: not retried",
    KeyCheck.UNKNOWN: "whether the provider takes our credentials could not be checked, "
    "so this counts as a transient failure",
}


@dataclass(frozen=True, slots=True)
class FailureVerdict:
    retry: bool
    error: JobError
    delay_seconds: float = 0.0
    # The fallback model the job moves on to (its budgets start afresh there).
    fall_back_to: str | None = None
    # The job goes back to the queue to wait for its provider, which refuses our
    # credentials and is paused: neither a retry nor an end, and it spends no budget.
    waits_for_provider: bool = False


def judge_failure(
    job: Job,
    error: ProviderError,
    *,
    policy: RetryPolicy,
    catalog: ModelCatalog,
    key_check: KeyCheck | None = None,
) -> FailureVerdict:
    """``key_check``: what a probe of the provider showed, for a call whose credentials
    were refused (services/probes.py); None for every other failure."""
    klass = error.failure_class
    invalid = klass is FailureClass.INVALID_OUTPUT
    chain = catalog.chain(job.model)
    next_level = job.fallback_level + 1
    fallback = chain[next_level] if next_level < len(chain) else None
    message = error.message
    if key_check is not None:
        message = f"{message}; {_KEY_CHECK_NOTES[key_check]}"
    if key_check is KeyCheck.REFUSED:
        error_now = JobError(code=error.code, failure_class=klass, message=message)
        return FailureVerdict(retry=False, error=error_now, waits_for_provider=True)
    decision = decide(
        policy,
        # A refusal the probe could not judge is retried as a transient failure is.
        failure_class=FailureClass.TRANSIENT if key_check is KeyCheck.UNKNOWN else klass,
        failures=job.failure_count + 1,
        invalid_outputs=job.invalid_output_count + (1 if invalid else 0),
        retry_after_seconds=error.retry_after_seconds,
        has_fallback=fallback is not None,
        context_too_long=isinstance(error, ContextLengthExceededError),
    )
    if decision.retry:
        return FailureVerdict(
            retry=True,
            error=JobError(code=error.code, failure_class=klass, message=message),
            delay_seconds=decision.delay_seconds,
            fall_back_to=fallback if decision.fall_back else None,
        )
    code = error.code if decision.reason == "not_retryable" else decision.reason
    return FailureVerdict(
        retry=False, error=JobError(code=code, failure_class=klass, message=message)
    )
