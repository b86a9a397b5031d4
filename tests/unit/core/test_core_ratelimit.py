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


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_nonsense_settings_are_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate_per_second=rate, burst=burst)


def test_each_key_has_its_own_bucket() -> None:
    limiter = KeyedRateLimiter(rate_per_second=1.0, burst=1)

    assert limiter.take("acme", T0) == 0.0
    assert limiter.take("acme", T0) > 0.0
    assert limiter.take("globex", T0) == 0.0
