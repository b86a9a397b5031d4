"""A body is parsed and its text checked exactly as json.loads (with the hooks) and a
walk of every string would: the decoder made once (http/bodies.py) and the skip of the
walk when the text shows no lone surrogate or NUL change no answer."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from starlette.requests import Request

from ferryman.core.errors import InvalidRequestError
from ferryman.http.batch_bodies import parse_batch
from ferryman.http.bodies import (
    JSON_DECODER,
    GenerationRequest,
    first_invalid_text,
    json_text,
    read_body,
)


def _reference(raw: bytes) -> tuple[str, Any]:
    """What the body gets by the plain route: json.loads, then the walk."""

    def constant(name: str) -> Any:
        raise ValueError(name)

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(text)
        return value

    try:
        data = json.loads(raw, parse_constant=constant, parse_float=finite)
    except (ValueError, RecursionError):
        return "not json", None
    bad = first_invalid_text(data)
    if bad is not None:
        return "bad text", bad[0]
    return "ok", data


def _request(raw: bytes) -> Request:
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return Request({"type": "http", "method": "POST", "headers": [], "query_string": b""}, receive)


async def _ours(raw: bytes) -> tuple[str, Any]:
    try:
        await read_body(_request(raw), GenerationRequest)
    except InvalidRequestError as exc:
        loc = exc.errors[0]["loc"] if exc.errors else None
        if loc == ["body"] and "not valid JSON" in str(exc.errors[0]["msg"]):
            return "not json", None
        if "valid text" in str(exc.errors[0]["msg"]):
            return "bad text", loc[1:]
        return "ok", JSON_DECODER.decode(json_text(raw))
    return "ok", JSON_DECODER.decode(json_text(raw))


def _body(prompt_json: str) -> bytes:
    return ('{"task": "generate", "input": {"prompt": ' + prompt_json + "}}").encode()


BODIES = [
    _body('"plain"'),
    _body('"caf\u00e9 \u2603"'),
    _body('"line\\nbreak \\"quoted\\""'),
    _body('"\\u0000"'),
    _body('"\\ud800"'),
    _body('"\\ud83d\\ude00"'),  # a valid pair
    _body('"\\\\u0000"'),  # a backslash, then the text u0000: fine
    _body('"ok", "\\u0000key": 1'),
    _body('"a"').replace(b'"a"', b'"\xed\xa0\x80"'),  # a raw surrogate (surrogatepass)
    _body('"a"').replace(b'"a"', b'"\xff"'),  # not UTF-8
    _body("NaN"),
    _body("1e400"),
    _body("1.5"),
    b"\xef\xbb\xbf" + _body('"bom"'),  # UTF-8 with a BOM: json.loads takes it
    _body('"utf16"').decode().encode("utf-16-le"),
    _body('"utf16"').decode().encode("utf-16"),
    _body('"utf32"').decode().encode("utf-32"),
    b"",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"task": "generate"',
]


@pytest.mark.parametrize("raw", BODIES)
async def test_a_body_gets_what_json_loads_and_the_walk_give(raw: bytes) -> None:
    assert await _ours(raw) == _reference(raw)


def _as_batch_item(raw: bytes) -> tuple[str, Any]:
    """What the same body gets as the one job of a batch (read item by item)."""
    try:
        (item,) = parse_batch(b'{"jobs": [' + raw + b"]}", 1_000_000)
    except InvalidRequestError as exc:
        return ("not json" if exc.errors[0]["loc"] == ["body"] else "envelope"), None
    if isinstance(item, InvalidRequestError) and "valid text" in str(item.errors[0]["msg"]):
        return "bad text", item.errors[0]["loc"][3:]
    return "ok", None


# The bodies that can be one job of a batch as they are: UTF-8 JSON objects.
BATCHABLE = [raw for raw in BODIES if raw.startswith(b"{") and raw[1:2] != b"\x00"]


@pytest.mark.parametrize("raw", BATCHABLE)
async def test_a_batch_job_gets_what_its_body_alone_gets(raw: bytes) -> None:
    expected, where = _reference(raw)

    got, at = _as_batch_item(raw)

    assert got == expected
    if expected == "bad text":
        assert at == where
