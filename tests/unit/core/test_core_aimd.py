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


def test_a_throttle_halves_the_window() -> None:
    window = AimdWindow(maximum=16)
    window.on_throttle()
    assert window.limit == 8.0
    window.on_throttle()
    assert window.limit == 4.0


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
    events=st.lists(st.booleans(), max_size=60),
)
def test_the_window_stays_within_its_bounds(maximum: int, events: list[bool]) -> None:
    window = AimdWindow(maximum=maximum)
    for throttled in events:
        if throttled:
            window.on_throttle()
        else:
            window.on_success()
        assert window.minimum <= window.limit <= window.maximum
        assert 1 <= window.permits <= maximum


BOUNDS = "need 1 <= minimum <= maximum"
FACTOR = "decrease_factor must be within (0, 1)"


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
    ],
)
def test_the_edges_of_the_valid_settings_are_accepted(kwargs: dict[str, Any]) -> None:
    AimdWindow(**kwargs)
