"""core.aimd.AimdWindow: a throttle halves the window, each success widens it by 1/window."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.aimd import AimdWindow


def test_a_new_window_opens_at_its_maximum() -> None:
    window = AimdWindow(maximum=8)
    assert (window.limit, window.permits) == (8.0, 8)


def test_a_given_starting_limit_is_kept() -> None:
    assert AimdWindow(maximum=8, limit=3.0).limit == 3.0


def test_a_window_that_starts_narrow_doubles_each_round_trip_until_its_maximum() -> None:
    window = AimdWindow(maximum=20, start=4)
    assert (window.permits, window.slow_start) == (4, True)
    for _ in range(4):  # one round trip of 4 calls
        window.on_success()
    assert window.limit == 8.0
    for _ in range(8):
        window.on_success()
    assert window.limit == 16.0
    for _ in range(5):
        window.on_success()
    assert (window.limit, window.slow_start) == (20.0, False)
    window.on_throttle()
    window.on_success()
    assert window.limit == 10.0 + 1 / 10  # back to about one per round trip


def test_the_first_throttle_ends_slow_start() -> None:
    window = AimdWindow(maximum=64, start=8)
    for _ in range(8):
        window.on_success()
    assert window.on_throttle(window.epoch) is True
    assert (window.limit, window.slow_start) == (8.0, False)
    window.on_success()
    assert window.limit == 8.0 + 1 / 8


def test_a_window_that_starts_at_its_maximum_has_no_slow_start() -> None:
    assert AimdWindow(maximum=8, start=8).slow_start is False
    assert AimdWindow(maximum=8).slow_start is False


def test_a_throttle_halves_the_window() -> None:
    window = AimdWindow(maximum=16)
    window.on_throttle()
    assert (window.limit, window.epoch) == (8.0, 1)
    window.on_throttle()
    assert (window.limit, window.epoch) == (4.0, 2)  # each narrowing, its own epoch


def test_a_floor_keeps_the_window_from_narrowing_below_what_a_rate_needs() -> None:
    window = AimdWindow(maximum=64)
    assert window.on_throttle(floor=50.0) is True
    assert (window.limit, window.epoch) == (50.0, 1)
    window.on_throttle(floor=10.0)
    assert window.limit == 25.0  # a floor under the halving changes nothing
    window.on_throttle(floor=40.0)
    assert window.limit == 25.0  # nor does it ever widen the window
    window = AimdWindow(maximum=8)
    window.on_throttle(floor=100.0)
    assert window.limit == 8.0  # and it is bounded by the maximum


def test_the_decrease_factor_is_configurable() -> None:
    window = AimdWindow(maximum=10, decrease_factor=0.25)
    window.on_throttle()
    assert window.limit == 2.5
    assert window.permits == 2


def test_a_throttle_never_takes_the_window_below_its_minimum() -> None:
    window = AimdWindow(maximum=16, minimum=3)
    for _ in range(10):
        window.on_throttle()
    assert window.limit == 3.0
    assert window.permits == 3


def test_one_permit_always_remains() -> None:
    window = AimdWindow(maximum=4)
    for _ in range(10):
        window.on_throttle()
    assert (window.limit, window.permits) == (1.0, 1)


def test_a_success_widens_the_window_by_one_over_its_size() -> None:
    window = AimdWindow(maximum=100, limit=4.0)
    window.on_success()
    assert window.limit == pytest.approx(4.25)
    window = AimdWindow(maximum=100, limit=2.0)
    window.on_success()
    assert window.limit == pytest.approx(2.5)


def test_a_window_of_w_grows_by_about_one_per_w_successes() -> None:
    window = AimdWindow(maximum=100, limit=10.0)
    for _ in range(10):
        window.on_success()
    # Each step adds 1/limit with a growing limit: a little under one in all.
    assert 10.9 < window.limit < 11.0
    assert window.permits == 10


def test_growth_stops_at_the_maximum() -> None:
    window = AimdWindow(maximum=5, limit=4.9)
    window.on_success()
    assert window.limit == 5.0
    window.on_success()
    assert window.limit == 5.0


def test_permits_are_the_whole_part_of_the_window() -> None:
    assert AimdWindow(maximum=10, limit=3.99).permits == 3
    assert AimdWindow(maximum=10, limit=4.0).permits == 4


@given(
    maximum=st.integers(min_value=1, max_value=64),
    start_share=st.floats(min_value=0.0, max_value=1.0),
    events=st.lists(st.booleans(), max_size=60),
)
def test_the_window_stays_within_its_bounds(
    maximum: int, start_share: float, events: list[bool]
) -> None:
    window = AimdWindow(maximum=maximum, start=max(1.0, maximum * start_share))
    for throttled in events:
        if throttled:
            window.on_throttle()
        else:
            window.on_success()
        assert window.minimum <= window.limit <= window.maximum
        assert 1 <= window.permits <= maximum


BOUNDS = "need 1 <= minimum <= maximum"
FACTOR = "decrease_factor must be within (0, 1)"
START = "need minimum <= start <= maximum"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"maximum": 4, "minimum": 0.5}, BOUNDS),
        ({"maximum": 2, "minimum": 3}, BOUNDS),
        ({"maximum": 0.5}, BOUNDS),
        ({"maximum": 4, "decrease_factor": 0.0}, FACTOR),
        ({"maximum": 4, "decrease_factor": 1.0}, FACTOR),
        ({"maximum": 4, "decrease_factor": -0.5}, FACTOR),
        ({"maximum": 4, "decrease_factor": 1.5}, FACTOR),
        ({"maximum": 4, "start": 5}, START),
        ({"maximum": 4, "minimum": 2, "start": 1}, START),
    ],
)
def test_nonsense_windows_are_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        AimdWindow(**kwargs)
    assert str(refused.value) == message


@pytest.mark.parametrize(
    "kwargs",
    [
        {"maximum": 1},
        {"maximum": 3, "minimum": 3},
        {"maximum": 4, "minimum": 1},
        {"maximum": 4, "decrease_factor": 0.01},
        {"maximum": 4, "decrease_factor": 0.99},
        {"maximum": 4, "start": 4},
        {"maximum": 4, "minimum": 2, "start": 2},
    ],
)
def test_the_edges_of_the_valid_settings_are_accepted(kwargs: dict[str, Any]) -> None:
    AimdWindow(**kwargs)


def test_an_adopted_window_is_kept_within_its_bounds() -> None:
    window = AimdWindow(maximum=10, minimum=2)
    window.adopt(50)
    assert window.permits == 10
    window.adopt(0.5)
    assert window.permits == 2


def test_an_adopted_window_below_the_maximum_goes_on_with_slow_start() -> None:
    window = AimdWindow(maximum=10, start=2)
    window.adopt(4)
    window.on_success()
    assert (window.limit, window.slow_start) == (5.0, True)


def test_adopting_the_maximum_ends_slow_start_for_good() -> None:
    window = AimdWindow(maximum=10, start=2)
    window.adopt(10)
    assert (window.limit, window.slow_start) == (10.0, False)
    window.adopt(4)  # a smaller share later grows by 1/window, as after any slow start
    window.on_success()
    assert (window.limit, window.slow_start) == (4.25, False)
