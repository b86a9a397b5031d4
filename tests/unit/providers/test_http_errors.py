"""The pieces every HTTP provider shares: rate-limit hints, error bodies, event streams."""

from __future__ import annotations

import datetime as dt

import pytest

from ferryman.providers.http_errors import (
    ErrorBody,
    error_for_status,
    parse_error_body,
    ratelimit_reset_seconds,
    retry_after_seconds,
)
from ferryman.providers.sse import SseEvent, sse_events

NOW = dt.datetime(2025, 1, 1, 12, 0, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "0.5"}, 0.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),  # the finer one wins
        ({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, 0.0),  # already past
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({"retry-after": "nan"}, None),
        ({}, None),
    ],
)
def test_retry_after(headers, expected):
    assert retry_after_seconds(headers, now=NOW) == expected


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "1m30.5s"}, 90.5),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "20ms"}, 0.02),
        ({"x-ratelimit-remaining-requests": "3", "x-ratelimit-reset-requests": "1s"}, None),
        ({"x-ratelimit-remaining-requests": "0", "x-ratelimit-reset-requests": "later"}, None),
    ],
)
def test_openai_ratelimit_reset(headers, expected):
    got = ratelimit_reset_seconds(headers)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


@pytest.mark.parametrize(
    ("raw", "body"),
    [
        (
            b'{"error": {"message": "m", "type": "t", "code": "c", "param": "p"}}',
            ErrorBody("t", "c", "p"),
        ),
        (
            b'{"type": "error", "error": {"type": "overloaded_error", "message": "m"}}',
            ErrorBody("overloaded_error"),
        ),
        (
            b'{"object": "error", "message": "m", "type": "BadRequestError", "code": 400}',
            ErrorBody("BadRequestError", "400"),
        ),
        (b'{"error": "model not found"}', ErrorBody()),
        (b"<html>oops</html>", ErrorBody()),
        (b'{"error": {"type": "a type with the prompt in it: hello"}}', ErrorBody()),
    ],
)
def test_error_bodies_yield_identifiers_only(raw, body):
    assert parse_error_body(raw)[0] == body


def test_an_unknown_status_is_judged_by_its_range():
    assert error_for_status(418, ErrorBody(), provider="x", request_id=None).code == "bad_request"
    assert error_for_status(599, ErrorBody(), provider="x", request_id=None).code == "server_error"


async def _lines(*lines: str):
    for line in lines:
        yield line


async def test_sse_events_join_data_and_skip_comments():
    events = [
        e
        async for e in sse_events(
            _lines(
                ": keep-alive",
                "event: ping",
                "data: {}",
                "",
                "data: a",
                "data: b",
                "",
                "data: [DONE]",
                "",
            )
        )
    ]
    assert events == [SseEvent("ping", "{}"), SseEvent(None, "a\nb"), SseEvent(None, "[DONE]")]


async def test_an_event_cut_off_before_its_blank_line_is_still_seen():
    events = [e async for e in sse_events(_lines("data: partial"))]
    assert events == [SseEvent(None, "partial")]
