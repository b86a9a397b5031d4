from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.clock import FakeClock, SystemClock
from ferryman.core.lease import LeasePolicy

durations = st.floats(min_value=0.001, max_value=86_400, allow_nan=False)


@given(lease=durations, visibility=durations)
def test_heartbeat_is_at_most_a_third_of_lease_and_visibility(
    lease: float, visibility: float
) -> None:
    policy = LeasePolicy(lease_seconds=lease, visibility_timeout_seconds=visibility)
    assert 0 < policy.heartbeat_seconds <= lease / 3 + 1e-9
    assert policy.heartbeat_seconds <= visibility / 3 + 1e-9


def test_defaults_beat_every_twenty_seconds() -> None:
    assert LeasePolicy().heartbeat_seconds == 20.0


def test_a_configured_heartbeat_wins() -> None:
    assert LeasePolicy(heartbeat_interval_seconds=5).heartbeat_seconds == 5


def test_lease_until_is_now_plus_the_lease(clock: FakeClock) -> None:
    policy = LeasePolicy(lease_seconds=60)
    assert policy.lease_until(clock.now()) == clock.now() + 60
    clock.advance(10)
    assert policy.lease_until(clock.now()) == clock.now() + 60


def test_takeover_delay_reappears_just_after_the_lease(clock: FakeClock) -> None:
    policy = LeasePolicy(lease_seconds=60, visibility_timeout_seconds=45)
    now = clock.now()
    assert policy.takeover_delay_seconds(now + 30, now) == 31
    # An expired or nearly expired lease: look again in a second, never at once.
    assert policy.takeover_delay_seconds(now - 100, now) == 1.0
    assert policy.takeover_delay_seconds(now, now) == 1.0
    # Unknown lease: one visibility timeout.
    assert policy.takeover_delay_seconds(None, now) == 45


@given(remaining=st.floats(min_value=-1_000, max_value=1_000), now=st.floats(0, 2e9))
def test_takeover_delay_is_positive_and_past_the_lease(remaining: float, now: float) -> None:
    delay = LeasePolicy().takeover_delay_seconds(now + remaining, now)
    assert delay >= 1.0
    assert now + delay >= now + remaining


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"lease_seconds": 0}, "lease_seconds must be positive"),
        ({"lease_seconds": -1}, "lease_seconds must be positive"),
        ({"visibility_timeout_seconds": 0}, "visibility_timeout_seconds must be positive"),
    ],
)
def test_lease_policy_rejects_non_positive_durations(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        LeasePolicy(**kwargs)
    assert str(refused.value) == message


def test_fake_clock_moves_only_forward_when_told() -> None:
    clock = FakeClock(100.0)
    assert clock.now() == 100.0
    clock.advance(2.5)
    assert clock.now() == 102.5
    with pytest.raises(ValueError) as refused:
        clock.advance(-1)
    assert str(refused.value) == "a clock does not run backwards"
    clock.set(50.0)
    assert clock.now() == 50.0


def test_a_fake_clock_starts_at_a_known_instant() -> None:
    # 2023-11-14T22:13:20Z: tests that print times read the same on every run.
    assert FakeClock().now() == 1_700_000_000.0


def test_a_fake_clock_may_be_advanced_by_nothing() -> None:
    clock = FakeClock(100.0)
    clock.advance(0)
    assert clock.now() == 100.0


def test_the_system_clock_tells_epoch_seconds() -> None:
    before = time.time()
    now = SystemClock().now()
    assert before <= now <= time.time()
