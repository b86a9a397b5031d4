"""How an output is stored: the JSON the stdlib wrote, or its very error."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.services.result_records import result_json as _result_json


def stdlib(output: Any) -> bytes:
    """What the worker stored before orjson wrote it."""
    return json.dumps(output, separators=(",", ":"), ensure_ascii=False).encode()


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()  # past 64 bits too
    | st.floats()  # inf and nan too
    | st.text(st.characters(exclude_categories=())),  # lone surrogates, control characters
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(st.text(max_size=4) | st.integers(), children, max_size=4)
    ),
    max_leaves=12,
)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, list):
        return any(_has_float(v) for v in value)
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    return False


@given(JSON_VALUES)
def test_an_output_is_stored_as_the_stdlib_stored_it_or_fails_as_it_did(value: Any) -> None:
    output = {"value": value}
    try:
        expected = stdlib(output)
    except Exception as exc:  # noqa: BLE001 - whichever it was, ours must be the same
        with pytest.raises(type(exc)):
            _result_json(output)
        return
    stored = _result_json(output)
    # The same values (repr: nan as nan); the same bytes unless a float is written
    # in another form of the same number.
    assert repr(json.loads(stored)) == repr(json.loads(expected))
    if not _has_float(value):
        assert stored == expected


def test_a_lone_surrogate_is_an_error_never_bytes() -> None:
    with pytest.raises(UnicodeEncodeError):
        _result_json({"text": "half a pair: \ud800"})


@pytest.mark.parametrize(
    "output",
    [{"n": 2**70}, {"x": float("inf")}, {"x": float("nan")}, {"none": None}, {1: "key"}],
)
def test_what_orjson_would_refuse_or_change_is_written_as_before(output: Any) -> None:
    assert _result_json(output) == stdlib(output)


def test_non_ascii_text_is_stored_as_itself() -> None:
    assert _result_json({"text": "é 日本 \u2028 \n"}) == '{"text":"é 日本 \u2028 \\n"}'.encode()
