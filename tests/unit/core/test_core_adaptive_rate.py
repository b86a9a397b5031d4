"""core.adaptive_rate: a rate learned from throttles converges near the provider's limit."""

from __future__ import annotations

import collections
import heapq

import pytest

from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.ratelimit import TokenBucket


def test_nothing_is_paced_until_the_first_throttle():
    rate = AdaptiveRate()
    for t in range(10):
        rate.admitted(t / 10)
        rate.on_success(t / 10)
    assert rate.rate is None


def test_the_first_throttle_sets_the_rate_under_what_was_being_sent():
    rate = AdaptiveRate(decrease_factor=0.8)
    epoch = 0
    for n in range(100):  # 100 calls in the last second
        epoch = rate.admitted(10.0 + n / 100)
    assert rate.on_throttle(11.0, epoch) is True
    assert rate.rate == pytest.approx(80.0, rel=0.02)


def test_a_burst_of_throttles_lowers_the_rate_once():
    rate = AdaptiveRate(decrease_factor=0.5, rate=100.0)
    admitted = rate.admitted(0.0)
    assert rate.on_throttle(1.0, admitted) is True
    assert [rate.on_throttle(1.0, admitted) for _ in range(5)] == [False] * 5
    assert rate.rate == 50.0


def test_the_rate_climbs_back_fast_well_under_the_overload_and_gently_near_it():
    rate = AdaptiveRate(increase_per_second=0.1, recovery_per_second=0.5, rate=100.0)
    rate.on_throttle(0.0, rate.admitted(0.0))  # 85, under the 100 it was throttled at
    assert (rate.rate, rate.ceiling) == (85.0, 100.0)
    rate.on_success(0.1)
    assert rate.rate == pytest.approx(85.0 * 1.5**0.1)  # recovering
    rate.rate = 96.0  # near the ceiling now
    rate.on_success(2.1)
    assert rate.rate == pytest.approx(96.0 * 1.1**2)  # probing


def test_a_trickle_rate_grows_by_at_least_the_floor():
    rate = AdaptiveRate(increase_per_second=0.05, increase_floor_per_second=0.5, rate=1.0)
    rate.on_throttle(0.0, rate.admitted(0.0))  # throttled at 1 a second: 0.85
    rate.rate = 0.99  # near the ceiling, where 5% a second would be 0.05
    rate.on_success(2.0)
    assert rate.rate == pytest.approx(1.99)


def test_an_overload_is_measured_by_what_the_provider_accepted():
    rate = AdaptiveRate(decrease_factor=0.9)
    epoch = 0
    for n in range(200):  # sending 200 a second ...
        epoch = rate.admitted(5.0 + n / 200)
    for n in range(149):  # ... of which 150 came back throttled at once: it accepted 50
        rate.on_throttle(5.0 + n / 150, epoch - 1)  # (admitted earlier: no decrease yet)
    assert rate.on_throttle(5.999, epoch) is True
    assert rate.rate == pytest.approx(45.0)
    assert rate.accepted_rate(5.999) == 50.0


def test_successes_do_not_measure_an_overload_since_they_lag_by_the_latency():
    rate = AdaptiveRate(decrease_factor=0.5)
    for n in range(80):  # 80 calls in the last second, none answered yet
        rate.admitted(1.0 + n / 80)
    rate.on_success(1.9)
    assert rate.on_throttle(1.99, rate.epoch) is True
    assert rate.rate == pytest.approx(39.5)  # half of the 79 it accepted, not of 1


def test_a_provider_that_accepted_nothing_halves_the_rate_it_was_at():
    rate = AdaptiveRate(decrease_factor=0.5, rate=40.0)
    for n in range(10):
        rate.on_throttle(0.5, rate.admitted(0.4 + n / 100) - 1)
    assert rate.on_throttle(0.6, rate.epoch) is True
    assert rate.rate == 20.0


def test_throttles_right_after_a_decrease_are_its_echo():
    rate = AdaptiveRate(rate=100.0, quiet_seconds=1.0)
    rate.on_throttle(10.0, rate.epoch)
    assert rate.on_throttle(10.5, rate.admitted(10.2)) is False
    assert rate.on_throttle(11.5, rate.admitted(11.2)) is True


def test_the_rate_never_falls_below_its_minimum():
    rate = AdaptiveRate(decrease_factor=0.5, minimum=2.0, rate=3.0)
    for t in range(5):
        rate.on_throttle(float(t), rate.epoch)
    assert rate.rate == 2.0


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({"decrease_factor": 1.0}, "decrease_factor must be within (0, 1)"),
        ({"decrease_factor": 0.0}, "decrease_factor must be within (0, 1)"),
        ({"increase_per_second": 0}, "need 0 < increase_per_second <= recovery_per_second"),
        (
            {"increase_per_second": 0.5, "recovery_per_second": 0.1},
            "need 0 < increase_per_second <= recovery_per_second",
        ),
        ({"minimum": 0}, "minimum must be positive"),
        ({"increase_floor_per_second": -1}, "increase_floor_per_second must not be negative"),
    ],
)
def test_nonsense_is_refused(bad, message):
    with pytest.raises(ValueError) as refused:
        AdaptiveRate(**bad)
    assert str(refused.value) == message


def test_the_edges_of_the_valid_settings_are_accepted():
    AdaptiveRate(increase_per_second=0.2, recovery_per_second=0.2)
    AdaptiveRate(increase_floor_per_second=0.0)


def test_each_decrease_starts_a_new_epoch():
    rate = AdaptiveRate(rate=100.0, quiet_seconds=1.0)
    assert rate.on_throttle(0.0, rate.epoch) is True
    assert rate.epoch == 1
    assert rate.on_throttle(1.0, rate.epoch) is True  # quiet ends at exactly 1.0
    assert rate.epoch == 2


def test_a_rate_given_before_any_change_is_not_grown_by_successes():
    rate = AdaptiveRate(rate=50.0)  # e.g. restored: nothing known of when it was set
    rate.on_success(10.0)
    assert rate.rate == 50.0


def test_at_exactly_the_near_mark_the_rate_probes_gently():
    rate = AdaptiveRate(increase_per_second=0.1, recovery_per_second=0.5, rate=100.0)
    rate.on_throttle(0.0, rate.admitted(0.0))  # ceiling: 1 accepted a second, rate 0.85
    rate.ceiling = 100.0
    rate.rate = 95.0  # exactly 0.95 of the ceiling
    rate.on_success(1.0)
    assert rate.rate == pytest.approx(95.0 * 1.1)


def test_a_provider_that_accepted_one_call_sets_the_rate_under_one():
    rate = AdaptiveRate(decrease_factor=0.5)
    rate.admitted(0.1)
    epoch = rate.admitted(0.2)
    assert rate.on_throttle(0.3, epoch) is True  # 2 admitted, 1 throttled: 1 accepted
    assert rate.rate == 0.5


def test_the_measure_keeps_calls_exactly_one_second_old():
    rate = AdaptiveRate()
    rate.admitted(5.0)
    assert rate.sending_rate(6.0) == 1.0
    assert rate.sending_rate(6.001) == 0.0


@pytest.mark.parametrize("limit", [20, 100, 400])
@pytest.mark.parametrize(("latency", "throttle_latency"), [(0.05, 0.05), (0.3, 0.002)])
def test_against_a_provider_limiting_requests_per_second_the_rate_converges_near_it(
    limit, latency, throttle_latency
):
    """A simulated minute: the client sends as fast as it is let; the provider answers
    429 above ``limit`` requests in any second (after ``throttle_latency``), and
    accepted calls after ``latency``."""
    step, duration = 0.001, 60.0
    rate = AdaptiveRate()
    bucket = TokenBucket(rate_per_second=10_000, burst=1)
    accepted: collections.deque[float] = collections.deque()
    answers: list[tuple[float, bool, int]] = []  # (when, throttled, admitted epoch)
    counts = collections.Counter()
    now = 0.0
    while now < duration:
        while answers and answers[0][0] <= now:
            at, throttled, epoch = heapq.heappop(answers)
            if throttled:
                rate.on_throttle(at, epoch)
            else:
                rate.on_success(at)
        if rate.rate is not None:  # as services/limiter.py paces: 50 ms worth at once
            bucket.rate_per_second = rate.rate
            bucket.burst = max(1, int(rate.rate * 0.05))
        if bucket.take(now) == 0:
            epoch = rate.admitted(now)
            while accepted and accepted[0] <= now - 1.0:
                accepted.popleft()
            throttled = len(accepted) >= limit
            if not throttled:
                accepted.append(now)
            if now >= 10.0:  # after learning
                counts["throttled" if throttled else "ok"] += 1
            answered = now + (throttle_latency if throttled else latency)
            heapq.heappush(answers, (answered, throttled, epoch))
        now += step

    goodput = counts["ok"] / (limit * (duration - 10.0))
    throttled_share = counts["throttled"] / (counts["ok"] + counts["throttled"])
    assert goodput >= 0.9, goodput
    assert throttled_share <= 0.05, throttled_share


def test_an_adopted_rate_grows_from_the_moment_it_was_adopted():
    rate = AdaptiveRate(increase_per_second=0.05, increase_floor_per_second=0)
    rate.adopt(40.0, now=10.0)
    assert rate.rate == 40.0
    rate.on_success(11.0)  # one second later: one second's growth, near its own mark
    assert rate.rate == pytest.approx(40.0 * 1.05)


def test_an_adopted_rate_is_floored_at_the_minimum():
    rate = AdaptiveRate(minimum=0.5)
    rate.adopt(0.01, now=0.0)
    assert rate.rate == 0.5


def test_an_adopted_rate_below_the_last_overload_climbs_back_fast():
    # The mark is the rate of the last overload, learned here: adopting a lower share
    # (more processes now) does not move it, so growth is the fast kind until near it.
    rate = AdaptiveRate(decrease_factor=0.8, increase_floor_per_second=0)
    epoch = 0
    for n in range(100):
        epoch = rate.admitted(10.0 + n / 100)
    assert rate.on_throttle(11.0, epoch)
    assert rate.ceiling == pytest.approx(100.0, rel=0.02)
    rate.adopt(40.0, now=12.0)
    rate.on_success(13.0)
    assert rate.rate == pytest.approx(40.0 * 1.5)  # recovery_per_second, not 1.05


def test_the_first_adopted_rate_is_the_mark_a_later_lower_one_climbs_back_to():
    rate = AdaptiveRate(increase_floor_per_second=0)
    rate.adopt(100.0, now=0.0)
    assert rate.ceiling == 100.0
    rate.adopt(40.0, now=1.0)  # a smaller share: fast growth back towards 100
    assert rate.ceiling == 100.0
    rate.on_success(2.0)
    assert rate.rate == pytest.approx(40.0 * 1.5)
