"""The token bucket behind the per-tenant limit (pure: explicit times, no sleeping)."""

from __future__ import annotations

import pytest

from ferryman.core.ratelimit import KeyedRateLimiter, TokenBucket

T0 = 1_000.0


def test_a_burst_is_allowed_then_the_wait_is_reported() -> None:
    bucket = TokenBucket(rate_per_second=2.0, burst=3)

    assert [bucket.take(T0) for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.take(T0) == pytest.approx(0.5)
    # A refused take spends nothing: asking again says the same.
    assert bucket.take(T0) == pytest.approx(0.5)


def test_tokens_refill_with_time_up_to_the_burst() -> None:
    bucket = TokenBucket(rate_per_second=1.0, burst=2)
    bucket.take(T0)
    bucket.take(T0)

    assert bucket.take(T0 + 0.25) == pytest.approx(0.75)
    assert bucket.take(T0 + 1.0) == 0.0
    # A long idle period refills to the burst, not beyond it.
    assert [bucket.take(T0 + 100.0) for _ in range(3)] == [0.0, 0.0, pytest.approx(1.0)]


def test_a_clock_stepping_back_mints_no_tokens() -> None:
    bucket = TokenBucket(rate_per_second=1.0, burst=1)
    bucket.take(T0 + 10.0)

    assert bucket.take(T0) > 0.0
    assert bucket.take(T0 + 10.5) == pytest.approx(0.5)
    assert bucket.take(T0 + 11.0) == 0.0


def test_adjust_spends_or_gives_back_after_the_fact_never_above_the_burst() -> None:
    bucket = TokenBucket(rate_per_second=1.0, burst=10)
    assert bucket.take(T0, 4.0) == 0.0  # 6 left
    bucket.adjust(T0, 3.0)  # the call used 3 more than it reserved
    assert bucket.remaining == 3
    bucket.adjust(T0 + 2.0, -100.0)  # two seconds refilled first, then a refund: capped
    assert bucket.remaining == 10
    bucket.adjust(T0 + 2.0, 15.0)  # into debt: 5 short, so 6 seconds until one token
    assert bucket.take(T0 + 2.0) == pytest.approx(6.0)


@pytest.mark.parametrize(
    ("rate", "burst", "message"),
    [
        (0.0, 1, "rate_per_second must be positive"),
        (-1.0, 1, "rate_per_second must be positive"),
        (1.0, 0, "burst must be at least 1"),
    ],
)
def test_nonsense_settings_are_refused_naming_the_setting(
    rate: float, burst: int, message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        TokenBucket(rate_per_second=rate, burst=burst)
    assert str(refused.value) == message


def test_each_key_has_its_own_bucket() -> None:
    limiter = KeyedRateLimiter(rate_per_second=1.0, burst=1)

    assert limiter.take("acme", T0) == 0.0
    assert limiter.take("acme", T0) > 0.0
    assert limiter.take("globex", T0) == 0.0


@pytest.mark.parametrize("rate", [0.5, 4.0, 8.0])
def test_tokens_come_back_at_the_bucket_rate(rate: float) -> None:
    bucket = TokenBucket(rate_per_second=rate, burst=1)
    bucket.take(T0)

    # The wait for the next token is one token's worth of time at this rate...
    assert bucket.take(T0) == pytest.approx(1.0 / rate)
    # ...half of it later, half a token has come back...
    assert bucket.take(T0 + 0.5 / rate) == pytest.approx(0.5 / rate)
    # ...and once it has passed, the token is there.
    assert bucket.take(T0 + 1.0 / rate) == 0.0


def test_remaining_counts_whole_requests_left() -> None:
    bucket = TokenBucket(rate_per_second=4.0, burst=3)
    assert bucket.remaining == 3
    bucket.take(T0)
    bucket.take(T0)
    assert bucket.remaining == 1
    bucket.take(T0)
    assert bucket.remaining == 0
    # 0.375 s at 4/s is 1.5 tokens: one whole request.
    bucket.take(T0 + 0.375)
    assert bucket.remaining == 0
    bucket.take(T0 + 0.375 + 0.5)
    assert bucket.remaining == 1


def test_seconds_until_full_is_the_missing_tokens_at_the_rate() -> None:
    bucket = TokenBucket(rate_per_second=2.0, burst=4)
    assert bucket.seconds_until_full == 0.0
    bucket.take(T0)
    bucket.take(T0)
    bucket.take(T0)
    assert bucket.seconds_until_full == pytest.approx(1.5)
    bucket.take(T0 + 0.5)  # one token back, one spent
    assert bucket.seconds_until_full == pytest.approx(1.5)


def test_a_keyed_limiter_refills_each_key_at_its_rate() -> None:
    limiter = KeyedRateLimiter(rate_per_second=4.0, burst=2)
    assert [limiter.take("acme", T0) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.25)]

    assert limiter.take("acme", T0 + 0.25) == 0.0
    assert limiter.take("acme", T0 + 0.25) == pytest.approx(0.25)
    # A long pause refills the key's bucket up to its burst.
    assert [limiter.take("acme", T0 + 60) for _ in range(3)] == [0.0, 0.0, pytest.approx(0.25)]


def test_a_key_keeps_its_one_bucket_with_the_limiter_settings() -> None:
    limiter = KeyedRateLimiter(rate_per_second=3.0, burst=5)
    bucket = limiter.bucket("acme")
    assert limiter.bucket("acme") is bucket
    assert (bucket.rate_per_second, bucket.burst) == (3.0, 5)
    limiter.take("acme", T0)
    assert bucket.remaining == 4
