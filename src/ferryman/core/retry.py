"""The one place that decides whether a failed attempt is tried again, and when."""

from __future__ import annotations

import random
from dataclasses import dataclass

from ferryman.core.errors import FailureClass

RETRYABLE = frozenset({FailureClass.THROTTLED, FailureClass.TRANSIENT, FailureClass.INVALID_OUTPUT})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Budgets and backoff for model failures.

    ``max_attempts`` bounds attempts ending in a retryable model failure;
    INVALID_OUTPUT has its own, smaller budget, since a model that breaks the
    schema twice rarely mends on the third try and every try is billed.
    """

    initial_interval_seconds: float = 1.0
    backoff_coefficient: float = 2.0
    maximum_interval_seconds: float = 300.0
    max_attempts: int = 5
    max_invalid_output_attempts: int = 2
    # Never wait longer than this for a provider's Retry-After.
    maximum_retry_after_seconds: float = 900.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.max_invalid_output_attempts < 1:
            raise ValueError("max_invalid_output_attempts must be at least 1")
        if self.initial_interval_seconds < 0 or self.maximum_interval_seconds < 0:
            raise ValueError("backoff intervals cannot be negative")
        if self.backoff_coefficient < 1:
            raise ValueError("backoff_coefficient must be at least 1")

    def backoff_ceiling_seconds(self, failures: int) -> float:
        """The upper bound of the wait after the n-th failure (n >= 1)."""
        exponent = max(0, failures - 1)
        try:
            ceiling = self.initial_interval_seconds * self.backoff_coefficient**exponent
        except OverflowError:  # far past any maximum anyway
            return self.maximum_interval_seconds
        return min(self.maximum_interval_seconds, ceiling)


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    delay_seconds: float = 0.0
    reason: str = ""
    # Retry on the next fallback model, with fresh budgets, at once.
    fall_back: bool = False


def decide(
    policy: RetryPolicy,
    *,
    failure_class: FailureClass,
    failures: int,
    invalid_outputs: int,
    retry_after_seconds: float | None = None,
    rng: random.Random | None = None,
    has_fallback: bool = False,
    context_too_long: bool = False,
) -> RetryDecision:
    """Decide about a failure. ``failures``/``invalid_outputs`` include this one.

    The wait is full-jitter exponential backoff (uniform in [0, ceiling]); a
    throttled call waits at least as long as the provider's Retry-After asked.
    With ``has_fallback``, a model whose input is too long, or that stays throttled
    past its budget, hands the job on to the next fallback model, at once.
    """
    if has_fallback and context_too_long:
        return RetryDecision(retry=True, reason="fallback", fall_back=True)
    if failure_class not in RETRYABLE:
        return RetryDecision(retry=False, reason="not_retryable")
    if (
        failure_class is FailureClass.INVALID_OUTPUT
        and invalid_outputs >= policy.max_invalid_output_attempts
    ):
        return RetryDecision(retry=False, reason="invalid_output_exhausted")
    if failures >= policy.max_attempts:
        if has_fallback and failure_class is FailureClass.THROTTLED:
            return RetryDecision(retry=True, reason="fallback", fall_back=True)
        return RetryDecision(retry=False, reason="attempts_exhausted")
    delay = (rng or random).uniform(0.0, policy.backoff_ceiling_seconds(failures))
    if failure_class is FailureClass.THROTTLED and retry_after_seconds is not None:
        delay = max(delay, min(retry_after_seconds, policy.maximum_retry_after_seconds))
    return RetryDecision(retry=True, delay_seconds=delay, reason="retry")
