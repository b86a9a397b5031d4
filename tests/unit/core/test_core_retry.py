from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.errors import FailureClass
from ferryman.core.retry import RETRYABLE, RetryDecision, RetryPolicy, decide

NON_RETRYABLE = [c for c in FailureClass if c not in RETRYABLE]
RETRYING = [FailureClass.THROTTLED, FailureClass.TRANSIENT, FailureClass.INVALID_OUTPUT]


def test_the_retryable_classes_are_the_documented_ones() -> None:
    assert set(RETRYABLE) == set(RETRYING)
    assert set(NON_RETRYABLE) == {
        FailureClass.INVALID_REQUEST,
        FailureClass.UNAUTHORIZED,
        FailureClass.SAFETY_REJECTED,
        FailureClass.DELIVERY,
    }


@given(
    failure_class=st.sampled_from(NON_RETRYABLE),
    failures=st.integers(1, 3),
    retry_after=st.none() | st.floats(0, 100),
)
def test_non_retryable_classes_never_retry(
    failure_class: FailureClass, failures: int, retry_after: float | None
) -> None:
    decision = decide(
        RetryPolicy(max_attempts=10),
        failure_class=failure_class,
        failures=failures,
        invalid_outputs=0,
        retry_after_seconds=retry_after,
    )
    assert decision.retry is False
    assert decision.reason == "not_retryable"


@pytest.mark.parametrize("failure_class", [FailureClass.THROTTLED, FailureClass.TRANSIENT])
def test_max_attempts_reached_gives_up(failure_class: FailureClass) -> None:
    policy = RetryPolicy(max_attempts=3)
    rng = random.Random(1)
    for failures in (1, 2):
        assert decide(
            policy, failure_class=failure_class, failures=failures, invalid_outputs=0, rng=rng
        ).retry
    exhausted = decide(policy, failure_class=failure_class, failures=3, invalid_outputs=0, rng=rng)
    assert (exhausted.retry, exhausted.reason) == (False, "attempts_exhausted")


def test_max_attempts_one_never_retries() -> None:
    decision = decide(
        RetryPolicy(max_attempts=1),
        failure_class=FailureClass.TRANSIENT,
        failures=1,
        invalid_outputs=0,
    )
    assert (decision.retry, decision.reason) == (False, "attempts_exhausted")


def test_invalid_output_has_its_own_smaller_budget() -> None:
    policy = RetryPolicy(max_attempts=5)
    assert policy.max_invalid_output_attempts == 2
    first = decide(policy, failure_class=FailureClass.INVALID_OUTPUT, failures=1, invalid_outputs=1)
    assert first.retry
    second = decide(
        policy, failure_class=FailureClass.INVALID_OUTPUT, failures=2, invalid_outputs=2
    )
    assert (second.retry, second.reason) == (False, "invalid_output_exhausted")


def test_invalid_outputs_do_not_spend_the_budget_of_other_classes() -> None:
    policy = RetryPolicy(max_attempts=5, max_invalid_output_attempts=2)
    decision = decide(policy, failure_class=FailureClass.TRANSIENT, failures=3, invalid_outputs=2)
    assert decision.retry


@given(
    failure_class=st.sampled_from([FailureClass.TRANSIENT, FailureClass.INVALID_OUTPUT]),
    failures=st.integers(1, 60),
    seed=st.integers(0, 2**32),
    initial=st.floats(0, 10),
    coefficient=st.floats(1, 4),
    maximum=st.floats(0, 1_000),
)
def test_full_jitter_stays_within_the_capped_ceiling(
    failure_class: FailureClass,
    failures: int,
    seed: int,
    initial: float,
    coefficient: float,
    maximum: float,
) -> None:
    policy = RetryPolicy(
        initial_interval_seconds=initial,
        backoff_coefficient=coefficient,
        maximum_interval_seconds=maximum,
        max_attempts=1_000,
        max_invalid_output_attempts=1_000,
    )
    ceiling = min(maximum, initial * coefficient ** (failures - 1))
    assert policy.backoff_ceiling_seconds(failures) == pytest.approx(ceiling)
    decision = decide(
        policy,
        failure_class=failure_class,
        failures=failures,
        invalid_outputs=1,
        rng=random.Random(seed),
    )
    assert decision.retry
    assert 0.0 <= decision.delay_seconds <= policy.backoff_ceiling_seconds(failures)
    assert decision.delay_seconds <= maximum


def test_ceiling_reaches_the_maximum_however_slowly_it_grows() -> None:
    policy = RetryPolicy(
        initial_interval_seconds=1, backoff_coefficient=1.05, maximum_interval_seconds=300
    )
    assert policy.backoff_ceiling_seconds(200) == 300


def test_ceiling_grows_exponentially_until_the_maximum() -> None:
    policy = RetryPolicy(
        initial_interval_seconds=1, backoff_coefficient=2, maximum_interval_seconds=10
    )
    ceilings = [policy.backoff_ceiling_seconds(n) for n in range(1, 7)]
    assert ceilings == [1, 2, 4, 8, 10, 10]
    assert policy.backoff_ceiling_seconds(10_000) == 10


def test_jitter_actually_spreads_the_delays() -> None:
    policy = RetryPolicy(initial_interval_seconds=10, max_attempts=10)
    rng = random.Random(7)
    delays = {
        decide(
            policy, failure_class=FailureClass.TRANSIENT, failures=3, invalid_outputs=0, rng=rng
        ).delay_seconds
        for _ in range(50)
    }
    assert len(delays) > 40
    assert min(delays) < 10 < max(delays) <= 40


@given(
    retry_after=st.floats(0, 10_000),
    failures=st.integers(1, 4),
    seed=st.integers(0, 2**32),
)
def test_throttled_waits_at_least_retry_after_capped(
    retry_after: float, failures: int, seed: int
) -> None:
    policy = RetryPolicy(maximum_retry_after_seconds=900, maximum_interval_seconds=60)
    decision = decide(
        policy,
        failure_class=FailureClass.THROTTLED,
        failures=failures,
        invalid_outputs=0,
        retry_after_seconds=retry_after,
        rng=random.Random(seed),
    )
    assert decision.retry
    assert decision.delay_seconds >= min(retry_after, 900)
    assert decision.delay_seconds <= max(min(retry_after, 900), 60)


def test_retry_after_is_ignored_for_other_classes() -> None:
    decision = decide(
        RetryPolicy(maximum_interval_seconds=1),
        failure_class=FailureClass.TRANSIENT,
        failures=1,
        invalid_outputs=0,
        retry_after_seconds=500,
    )
    assert decision.delay_seconds <= 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"max_invalid_output_attempts": 0}, "max_invalid_output_attempts must be at least 1"),
        ({"initial_interval_seconds": -1}, "backoff intervals cannot be negative"),
        ({"maximum_interval_seconds": -0.5}, "backoff intervals cannot be negative"),
        ({"backoff_coefficient": 0.5}, "backoff_coefficient must be at least 1"),
    ],
)
def test_retry_policy_rejects_bad_values_naming_the_setting(
    bad: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        RetryPolicy(**bad)
    assert str(refused.value) == message


def test_retry_policy_accepts_each_setting_at_its_bound() -> None:
    # One attempt, one invalid output, no wait, no growth: each the least it may be.
    policy = RetryPolicy(
        max_attempts=1,
        max_invalid_output_attempts=1,
        initial_interval_seconds=0,
        maximum_interval_seconds=0,
        backoff_coefficient=1,
    )
    assert (policy.max_attempts, policy.max_invalid_output_attempts) == (1, 1)
    assert policy.backoff_ceiling_seconds(5) == 0


def test_a_retry_after_is_capped_at_fifteen_minutes_by_default() -> None:
    policy = RetryPolicy()
    assert policy.maximum_retry_after_seconds == 900.0
    decision = decide(
        policy,
        failure_class=FailureClass.THROTTLED,
        failures=1,
        invalid_outputs=0,
        retry_after_seconds=86_400,
    )
    # The backoff ceiling (300 s by default) is below the cap: the cap is the wait.
    assert (decision.retry, decision.delay_seconds) == (True, 900.0)


def test_a_retry_after_below_the_cap_is_honoured_in_full() -> None:
    decision = decide(
        RetryPolicy(maximum_interval_seconds=1),
        failure_class=FailureClass.THROTTLED,
        failures=1,
        invalid_outputs=0,
        retry_after_seconds=42.0,
    )
    assert decision.delay_seconds == 42.0


def test_the_given_random_source_draws_the_jitter() -> None:
    # Replayable: the same seed gives the same wait, uniform in [0, ceiling].
    policy = RetryPolicy(initial_interval_seconds=10, max_attempts=10)
    decision = decide(
        policy,
        failure_class=FailureClass.TRANSIENT,
        failures=3,
        invalid_outputs=0,
        rng=random.Random(11),
    )
    assert decision.delay_seconds == random.Random(11).uniform(0.0, 40.0)
    assert decision.reason == "retry"


def test_a_ceiling_too_large_for_a_float_is_the_maximum() -> None:
    policy = RetryPolicy(
        initial_interval_seconds=1.0, backoff_coefficient=2.0, maximum_interval_seconds=30.0
    )
    assert policy.backoff_ceiling_seconds(5_000) == 30.0


def test_the_first_failure_waits_at_most_the_initial_interval() -> None:
    policy = RetryPolicy(initial_interval_seconds=3, backoff_coefficient=5)
    assert policy.backoff_ceiling_seconds(1) == 3
    assert policy.backoff_ceiling_seconds(2) == 15


def test_an_input_too_long_for_the_model_moves_to_the_fallback_at_once() -> None:
    policy = RetryPolicy(max_attempts=5)
    moved = decide(
        policy,
        failure_class=FailureClass.INVALID_REQUEST,
        failures=1,
        invalid_outputs=0,
        has_fallback=True,
        context_too_long=True,
    )
    assert moved == RetryDecision(retry=True, reason="fallback", fall_back=True)
    # Any other refused request is not the fallback's business; nor is one with no fallback.
    other = decide(
        policy,
        failure_class=FailureClass.INVALID_REQUEST,
        failures=1,
        invalid_outputs=0,
        has_fallback=True,
    )
    assert other == RetryDecision(retry=False, reason="not_retryable")
    alone = decide(
        policy,
        failure_class=FailureClass.INVALID_REQUEST,
        failures=1,
        invalid_outputs=0,
        context_too_long=True,
    )
    assert alone == RetryDecision(retry=False, reason="not_retryable")


def test_a_model_throttled_past_its_budget_hands_the_job_to_its_fallback() -> None:
    policy = RetryPolicy(max_attempts=3)
    handed_on = decide(
        policy,
        failure_class=FailureClass.THROTTLED,
        failures=3,
        invalid_outputs=0,
        retry_after_seconds=60.0,
        has_fallback=True,
    )
    assert handed_on == RetryDecision(retry=True, reason="fallback", fall_back=True)
    for failure_class, has_fallback in [
        (FailureClass.THROTTLED, False),
        (FailureClass.TRANSIENT, True),
    ]:
        spent = decide(
            policy,
            failure_class=failure_class,
            failures=3,
            invalid_outputs=0,
            has_fallback=has_fallback,
        )
        assert spent == RetryDecision(retry=False, reason="attempts_exhausted")
