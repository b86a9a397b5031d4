from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.errors import InvalidIdempotencyKeyError
from ferryman.core.idempotency import (
    IdempotencyEntry,
    canonical_json,
    request_fingerprint,
    validate_idempotency_key,
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=6)

BASE: dict[str, Any] = {
    "task": "generate",
    "input": {"prompt": "hi", "max_tokens": 5},
    "model": "sim",
    "options": {"metadata": {"a": 1}},
}


@given(data=json_objects)
def test_fingerprint_ignores_key_order(data: dict[str, Any]) -> None:
    reordered = dict(reversed(list(data.items())))
    assert request_fingerprint(task="t", input=data, model="m") == request_fingerprint(
        task="t", input=reordered, model="m"
    )


def test_fingerprint_ignores_nested_key_order() -> None:
    one = {"a": {"x": 1, "y": [{"p": 1, "q": 2}]}, "b": 2}
    two = {"b": 2, "a": {"y": [{"q": 2, "p": 1}], "x": 1}}
    assert request_fingerprint(task="t", input=one, model="m") == request_fingerprint(
        task="t", input=two, model="m"
    )


@pytest.mark.parametrize(
    "change",
    [
        {"task": "classify_ticket"},
        {"model": "gpt"},
        {"input": {"prompt": "hi ", "max_tokens": 5}},
        {"input": {"prompt": "hi", "max_tokens": 6}},
        {"input": {"prompt": "hi", "max_tokens": 5, "system": "s"}},
        {"input": {"prompt": "hi"}},
        {"options": {"metadata": {"a": 2}}},
        {"options": None},
    ],
)
def test_fingerprint_differs_on_any_field_change(change: dict[str, Any]) -> None:
    assert request_fingerprint(**BASE) != request_fingerprint(**{**BASE, **change})


def test_no_options_and_empty_options_are_the_same_request() -> None:
    base = {k: v for k, v in BASE.items() if k != "options"}
    assert request_fingerprint(**base) == request_fingerprint(**base, options={})


def test_fingerprint_is_sha256_hex() -> None:
    fingerprint = request_fingerprint(**BASE)
    assert len(fingerprint) == 64
    int(fingerprint, 16)


@given(data=json_objects)
def test_canonical_json_round_trips_and_is_stable(data: dict[str, Any]) -> None:
    text = canonical_json(data)
    assert json.loads(text) == data
    assert canonical_json(json.loads(text)) == text


def test_canonical_json_is_compact_sorted_utf8() -> None:
    assert canonical_json({"b": 1, "a": [1, 2], "é": "ü"}) == '{"a":[1,2],"b":1,"é":"ü"}'


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_canonical_json_rejects_nan_and_infinity(bad: float) -> None:
    with pytest.raises(ValueError):
        canonical_json({"x": bad})


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "x" * 255,
        " ",
        "~",
        "order-2024-01-01T00:00:00Z/1",
        "".join(map(chr, range(32, 127)))[:255],
    ],
)
def test_valid_idempotency_keys(key: str) -> None:
    assert validate_idempotency_key(key) == key


@given(
    key=st.text(
        alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), min_size=1, max_size=255
    )
)
def test_any_printable_ascii_key_up_to_255_is_valid(key: str) -> None:
    assert validate_idempotency_key(key) == key


@pytest.mark.parametrize(
    "key",
    ["", "x" * 256, "clé", "tab\there", "new\nline", "nul\x00", "del\x7f", "emoji-🙂", "\u00a0"],
)
def test_invalid_idempotency_keys(key: str) -> None:
    with pytest.raises(InvalidIdempotencyKeyError):
        validate_idempotency_key(key)


def test_entries_are_live_until_they_expire() -> None:
    entry = IdempotencyEntry(
        tenant_id="acme", key="k", job_id="gen_1", request_hash="h", expires_at=100.0
    )
    assert entry.live(99.999)
    assert not entry.live(100.0)
    assert not entry.live(101.0)


# Known answers. Every stored job and Idempotency-Key entry carries a fingerprint made
# this way: if one of these changes, keys stored before an upgrade stop matching their
# own requests after it (a replayed POST would get a 422 instead of its job).
GOLDEN = [
    (
        {"task": "generate", "input": {"prompt": "hi"}, "model": "sim"},
        '{"input":{"prompt":"hi"},"model":"sim","options":{},"task":"generate"}',
        "b0687278a4b14982102d155a3aed9b36ee5ac1729bb7a79dfe16e9cece7df9ae",
    ),
    (
        {
            "task": "classify_ticket",
            "input": {"ticket": "I was charged twice", "lang": "en"},
            "model": "sim",
            "options": {"metadata": {"order": 42}},
        },
        '{"input":{"lang":"en","ticket":"I was charged twice"},"model":"sim",'
        '"options":{"metadata":{"order":42}},"task":"classify_ticket"}',
        "6015edf76fbf42e042c54d7dfb994f255783c39536c15b680cf73753e1e36dff",
    ),
    (
        {
            "task": "generate",
            "input": {
                "prompt": "héllo ✓",
                "max_tokens": 5,
                "temperature": 0.5,
                "stop": None,
                "stream": False,
            },
            "model": "gpt",
        },
        '{"input":{"max_tokens":5,"prompt":"héllo ✓","stop":null,"stream":false,'
        '"temperature":0.5},"model":"gpt","options":{},"task":"generate"}',
        "90c9638bdfdff25a0d0dbe19296c60214bfeeb1afa1b7b1a60f8528dfe8f0314",
    ),
]


@pytest.mark.parametrize(("request_", "canonical", "fingerprint"), GOLDEN)
def test_fingerprints_of_known_requests_never_change(
    request_: dict[str, Any], canonical: str, fingerprint: str
) -> None:
    fields = {"options": {}, **request_}
    assert canonical_json(fields) == canonical
    assert hashlib.sha256(canonical.encode("utf-8")).hexdigest() == fingerprint
    assert request_fingerprint(**request_) == fingerprint
