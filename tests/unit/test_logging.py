"""Logging never shows customer data, never forges a line, never blocks its caller.

Rules pinned here (issue 5, items 1 and 2): an exception is logged as its type,
frames and cause types, with its message only when it is a FerrymanError; no format
renders local variables; every string is escaped to printable characters; stdlib
records (uvicorn, asyncio) follow the same rules; a stalled stream drops lines
and counts them instead of stalling the logger.
"""

from __future__ import annotations

import io
import json
import logging
import re
import threading
from typing import TYPE_CHECKING

import pytest

from ferryman.core.errors import InvalidRequestError
from ferryman.observability.log_output import LineWriter
from ferryman.observability.logging import (
    configure_logging,
    enabled,
    escape_text,
    flush_logs,
    get_logger,
    reset_logging,
)

if TYPE_CHECKING:
    from collections.abc import Iterator

SECRET = "tell-no-one-7f3a"
FORMATS = [pytest.param(False, id="console"), pytest.param(True, id="json")]


@pytest.fixture
def logs(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    yield capsys
    flush_logs()
    reset_logging()


def written(capsys: pytest.CaptureFixture[str]) -> str:
    assert flush_logs()
    out, err = capsys.readouterr()
    assert out == ""
    return err


def fail_with_a_prompt_in_scope(prompt: str) -> None:
    request_body = {"input": {"prompt": prompt}}  # a local, as in a route handler
    raise ValueError(f"cannot handle {request_body}")


def caught() -> ValueError:
    try:
        fail_with_a_prompt_in_scope(SECRET)
    except ValueError as exc:
        return exc
    raise AssertionError("unreachable")


@pytest.mark.parametrize("as_json", FORMATS)
def test_an_exception_shows_its_type_and_frames_never_its_message_or_locals(
    logs: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", json=as_json)

    try:
        fail_with_a_prompt_in_scope(SECRET)
    except ValueError:
        get_logger("ferryman.test").error("unhandled error", exc_info=True, job_id="gen_1")

    err = written(logs)
    assert SECRET not in err
    assert "request_body" not in err  # no locals-style output
    assert "Traceback" not in err
    (line,) = err.splitlines()
    assert "ValueError" in line
    assert "test_logging.py" in line
    assert "fail_with_a_prompt_in_scope" in line
    assert "gen_1" in line


@pytest.mark.parametrize("as_json", FORMATS)
def test_a_ferryman_error_keeps_its_message(
    logs: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", json=as_json)

    try:
        raise InvalidRequestError("unknown task; known tasks: generate")
    except InvalidRequestError as exc:
        get_logger("ferryman.test").warning("refused", exc_info=exc)

    err = written(logs)
    assert "unknown task; known tasks: generate" in err
    assert "InvalidRequestError" in err


@pytest.mark.parametrize("as_json", FORMATS)
def test_non_printable_characters_are_escaped_in_every_field(
    logs: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", json=as_json)
    path = "/v1/\x1b[31mred\x1b[0m\nforged line level=error\u202e"

    get_logger("ferryman.test").info("request", route=path, detail={"nested": [path]})

    err = written(logs)
    assert "\x1b" not in err
    assert "\u202e" not in err
    (line,) = err.splitlines()  # the newline did not forge a second line
    if as_json:
        entry = json.loads(line)
        assert entry["route"] == "/v1/\\x1b[31mred\\x1b[0m\\nforged line level=error\\u202e"
        assert entry["detail"] == {"nested": [entry["route"]]}
    else:
        assert "\\x1b[31mred" in line


def test_objects_are_named_not_shown(logs: pytest.CaptureFixture[str]) -> None:
    class Body:
        def __repr__(self) -> str:
            return f"Body(prompt={SECRET!r})"

    configure_logging("info", json=True)

    get_logger("ferryman.test").info("oops", body=Body())

    err = written(logs)
    assert SECRET not in err
    assert json.loads(err)["body"] == "<Body>"


@pytest.mark.parametrize("as_json", FORMATS)
def test_stdlib_records_follow_the_same_rules(
    logs: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", json=as_json)

    # What uvicorn does with an exception that escaped the app, and how asyncio
    # reports a failed task: the second line is a repr holding the task's arguments.
    logging.getLogger("uvicorn.error").error("Exception in ASGI application\n", exc_info=caught())
    logging.getLogger("asyncio").error(f"Task exception was never retrieved\nfuture: <{SECRET}>")

    err = written(logs)
    assert SECRET not in err
    uvicorn_line, asyncio_line = err.splitlines()
    assert "Exception in ASGI application" in uvicorn_line
    assert "ValueError" in uvicorn_line
    assert "uvicorn.error" in uvicorn_line
    assert "Task exception was never retrieved" in asyncio_line


def test_stdlib_records_below_the_level_are_dropped(logs: pytest.CaptureFixture[str]) -> None:
    configure_logging("warning", json=True)

    logging.getLogger("uvicorn.error").info("Started server process")
    logging.getLogger("uvicorn.error").warning("Invalid HTTP request received.")

    (line,) = written(logs).splitlines()
    assert json.loads(line)["event"] == "Invalid HTTP request received."


def test_escape_text_leaves_printable_text_alone() -> None:
    assert escape_text("héllo wörld 日本") == "héllo wörld 日本"
    assert escape_text("a\tb\x00c") == "a\\tb\\x00c"


class StalledStream(io.StringIO):
    """A stderr whose reader stopped reading: every write waits until released."""

    def __init__(self) -> None:
        super().__init__()
        self.released = threading.Event()

    def write(self, text: str) -> int:
        self.released.wait()
        return super().write(text)


def test_a_stalled_stream_drops_and_counts_lines_instead_of_blocking() -> None:
    stream = StalledStream()
    writer = LineWriter(capacity=10, stream=lambda: stream)

    def write_all() -> None:
        for n in range(2000):
            writer.write(f"line {n}")

    writing = threading.Thread(target=write_all)
    writing.start()
    writing.join(timeout=60)

    # Every write returned while the stream still took nothing: none waited on it.
    assert not writing.is_alive()
    assert not stream.released.is_set()
    assert writer.dropped > 0
    lost = writer.dropped
    stream.released.set()
    assert writer.flush(timeout_seconds=10)
    text = stream.getvalue()
    # Every dropped line is reported (in one line or several, as the drops came).
    reported = [int(n) for n in re.findall(r"dropped (\d+) log lines", text)]
    assert sum(reported) == lost
    assert "line 0" in text


def test_flush_waits_for_every_line_queued_before_it() -> None:
    stream = io.StringIO()
    writer = LineWriter(stream=lambda: stream)

    for n in range(500):
        writer.write(f"line {n}")

    assert writer.flush(timeout_seconds=10)
    assert stream.getvalue().splitlines() == [f"line {n}" for n in range(500)]
    assert writer.dropped == 0


def test_a_closed_stream_is_not_an_error() -> None:
    stream = io.StringIO()
    stream.close()
    writer = LineWriter(stream=lambda: stream)

    writer.write("nobody reads this")

    assert writer.flush(timeout_seconds=10)
    assert writer.dropped == 1


def test_libraries_only_warn(logs: pytest.CaptureFixture[str]) -> None:
    configure_logging("info", json=True)

    logging.getLogger("httpx").info("HTTP Request: POST http://example/v1/generations")
    get_logger("ferryman.test").info("ours")

    (line,) = written(logs).splitlines()
    assert json.loads(line)["event"] == "ours"


def test_enabled_says_which_levels_the_configured_logger_writes(
    logs: pytest.CaptureFixture[str],
) -> None:
    assert enabled(logging.DEBUG)  # structlog's defaults write every level
    configure_logging("warning", json=True)
    assert [enabled(level) for level in (logging.DEBUG, logging.INFO, logging.WARNING)] == [
        False,
        False,
        True,
    ]
    configure_logging("debug", json=True)
    assert enabled(logging.DEBUG)
    configure_logging("warning", json=True)
    reset_logging()
    assert enabled(logging.DEBUG)
