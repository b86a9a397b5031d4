"""The one time format of the API (http/timestamps.py): written and read."""

from __future__ import annotations

import re

import pytest

from ferryman.core.errors import InvalidRequestError
from ferryman.http.timestamps import PATTERN, epoch_seconds, rfc3339


@pytest.mark.parametrize(
    ("epoch", "written"),
    [
        (1_700_000_000.0, "2023-11-14T22:13:20.000000Z"),
        (1_700_000_000.123456, "2023-11-14T22:13:20.123456Z"),
        (0.5, "1970-01-01T00:00:00.500000Z"),
        # strftime would write year 319 as "319": every time has the same shape.
        (-52_700_000_000.0, "0300-01-02T07:06:40.000000Z"),
    ],
)
def test_times_are_written_in_one_shape(epoch: float, written: str) -> None:
    assert rfc3339(epoch) == written
    assert re.fullmatch(PATTERN, written)


def test_no_time_stays_null() -> None:
    assert rfc3339(None) is None


@pytest.mark.parametrize(
    ("text", "epoch"),
    [
        ("2023-11-14T22:13:20Z", 1_700_000_000.0),
        ("2023-11-14t23:13:20.5+01:00", 1_700_000_000.5),
        ("2023-11-14T22:13:20.000000z", 1_700_000_000.0),
        (None, None),
    ],
)
def test_a_request_time_is_rfc3339_with_its_offset(text: str | None, epoch: float | None) -> None:
    assert epoch_seconds(text, loc=["query", "from"]) == epoch


@pytest.mark.parametrize(
    "text",
    [
        "1700000000",
        "2023-11-14",
        "2023-11-14T22:13:20",
        "2023-11-14 22:13:20Z",
        "2023-13-01T00:00:00Z",
        "",
    ],
)
def test_anything_else_is_refused_at_its_field(text: str) -> None:
    with pytest.raises(InvalidRequestError) as refused:
        epoch_seconds(text, loc=["query", "from"])
    assert refused.value.errors[0]["loc"] == ["query", "from"]
