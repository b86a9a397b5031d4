"""The built-ins summarize and extract: their limits, prompts, and extract's per-job schema."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from ferryman.core.errors import InvalidOutputError, InvalidRequestError
from ferryman.providers.simulated import SimulatedProvider
from ferryman.tasks import builtin_tasks
from ferryman.tasks.extract import MAX_SCHEMA_BYTES, job_schema_problem

REGISTRY = builtin_tasks()
SUMMARIZE = REGISTRY.get("summarize")
EXTRACT = REGISTRY.get("extract")

PERSON = {
    "type": "object",
    "required": ["name", "age"],
    "properties": {
        "name": {"type": "string", "maxLength": 100},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": ["string", "null"]},
        "tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "maxItems": 5},
    },
    "additionalProperties": False,
    "$defs": {"Tag": {"enum": ["vip", "new"]}},
}


def locs(exc: InvalidRequestError) -> list[list[Any]]:
    return [error["loc"] for error in exc.errors]


def sim_answer(request: Any) -> str:
    response = asyncio.run(SimulatedProvider().invoke(request, timeout_seconds=5.0))
    return response.text


# --- summarize ---------------------------------------------------------------


def test_summarize_asks_for_the_summary_within_the_word_limit() -> None:
    stored = SUMMARIZE.validate_input({"text": "A long story.", "max_words": 30})
    assert stored == {"text": "A long story.", "max_words": 30}
    request = SUMMARIZE.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    assert request.prompt.endswith("A long story.")
    assert "at most 30 words" in request.prompt
    assert '"summary"' in request.prompt
    # Room for 30 words and the JSON around them.
    assert request.max_tokens is not None and request.max_tokens >= 30 * 2
    plain = SUMMARIZE.build_request(
        SUMMARIZE.validate_input({"text": "x"}), model="sim", attempt_no=1, job_id="gen_1"
    )
    assert "words" not in plain.prompt
    assert plain.max_tokens is None


@pytest.mark.parametrize(
    ("raw", "loc"),
    [
        ({}, ["body", "input", "text"]),
        ({"text": ""}, ["body", "input", "text"]),
        ({"text": "x" * 100_001}, ["body", "input", "text"]),
        ({"text": "x", "max_words": 0}, ["body", "input", "max_words"]),
        ({"text": "x", "max_words": 5_001}, ["body", "input", "max_words"]),
        ({"text": "x", "words": 5}, ["body", "input", "words"]),
    ],
)
def test_summarize_rejects_bad_input_at_the_exact_field(raw: object, loc: list[Any]) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        SUMMARIZE.validate_input(raw)
    assert locs(caught.value) == [loc]


def test_summarize_output_is_one_summary() -> None:
    assert SUMMARIZE.parse_output('{"summary": "short"}') == {"summary": "short"}
    with pytest.raises(InvalidOutputError, match="summary"):
        SUMMARIZE.parse_output('{"summary": ""}')
    request = SUMMARIZE.build_request({"text": "hi"}, model="sim", attempt_no=1, job_id="g")
    assert SUMMARIZE.parse_output(sim_answer(request))["summary"]


# --- extract: the per-job schema ----------------------------------------------


def test_extract_keeps_the_schema_and_asks_the_model_for_it() -> None:
    stored = EXTRACT.validate_input(
        {"text": "Bob, 42", "schema": PERSON, "instructions": "Be exact."}
    )
    assert stored["schema"] == PERSON
    request = EXTRACT.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    assert request.output_schema == PERSON
    assert request.prompt.startswith("Be exact.")
    assert json.dumps(PERSON) in request.prompt
    assert request.prompt.endswith("Bob, 42")


def test_extract_checks_the_answer_against_the_jobs_own_schema() -> None:
    stored = EXTRACT.validate_input({"text": "Bob, 42", "schema": PERSON})
    request = EXTRACT.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    good = {"name": "Bob", "age": 42, "tags": ["vip"]}
    assert EXTRACT.parse_output(json.dumps(good), request=request) == good
    for bad, field in [
        ({"name": "Bob"}, "age: Field required"),
        ({"name": "Bob", "age": 200}, "age: Input should be less than or equal to 150"),
        ({"name": "Bob", "age": 4, "tags": ["gold"]}, "tags.0: Input should be one of"),
        ({"name": "Bob", "age": "4"}, "age: Input should be of type integer"),
        ({"name": "Bob", "age": 4, "nickname": "B"}, "(top level): unexpected field"),
    ]:
        with pytest.raises(InvalidOutputError) as caught:
            EXTRACT.parse_output(json.dumps(bad), request=request)
        assert field in caught.value.message, caught.value.message


def test_extract_without_the_request_can_only_check_for_an_object() -> None:
    assert EXTRACT.parse_output('{"anything": 1}') == {"anything": 1}
    with pytest.raises(InvalidOutputError, match="JSON object"):
        EXTRACT.parse_output("[1]")


def test_the_sim_answers_extract_with_what_the_jobs_schema_asks() -> None:
    stored = EXTRACT.validate_input({"text": "Ann is 30 and new here", "schema": PERSON})
    request = EXTRACT.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    answer = EXTRACT.parse_output(sim_answer(request), request=request)
    assert not list(Draft202012Validator(PERSON).iter_errors(answer))


SECRET = "QQX-customer-secret-7781"


def test_extract_output_errors_never_quote_the_answer_or_the_keys_it_made_up() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    stored = EXTRACT.validate_input({"text": "t", "schema": schema})
    request = EXTRACT.build_request(stored, model="sim", attempt_no=1, job_id="g")
    for answer in ({SECRET: "x"}, {"a": SECRET}, {SECRET: {SECRET: 1}}):
        with pytest.raises(InvalidOutputError) as caught:
            EXTRACT.parse_output(json.dumps(answer), request=request)
        assert SECRET not in str(caught.value)
        assert caught.value.__cause__ is None
        assert caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("schema", "expected"),
    [
        ({"type": "array"}, 'top level must be "type": "object"'),
        ({"type": "object", "properties": {"a": {"type": "strin"}}}, "properties.a.type"),
        ({"type": "object", "minProperties": -1}, "not a valid JSON Schema"),
        (
            {"type": "object", "properties": {"a": {"$ref": "https://example.com/s.json"}}},
            "$ref must name one of this schema's own $defs",
        ),
        ({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}, "$defs"),
        ({"type": "object", "properties": {"a": {"$ref": "#/properties/b"}}}, "$defs"),
        (
            {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a+)+$"}}},
            "pattern is not allowed",
        ),
        ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties"),
        ({"type": "object", "properties": {"a": {"$id": "https://x/y"}}}, "$id"),
        ({"type": "object", "$schema": "http://json-schema.org/draft-07/schema#"}, "2020-12"),
        ({"type": "object", "description": "x" * MAX_SCHEMA_BYTES}, "over the limit"),
        ({"type": "object", "properties": {"a": {"type": "object"}}}, None),
        (PERSON, None),
    ],
)
def test_a_jobs_schema_is_checked_at_intake(schema: dict[str, Any], expected: str | None) -> None:
    problem = job_schema_problem(schema)
    if expected is None:
        assert problem is None
        return
    assert problem is not None and expected in problem, problem
    with pytest.raises(InvalidRequestError) as caught:
        EXTRACT.validate_input({"text": "t", "schema": schema})
    assert locs(caught.value) == [["body", "input", "schema"]]


def test_a_schema_nested_too_deeply_is_refused() -> None:
    schema: dict[str, Any] = {"type": "object"}
    for _ in range(30):
        schema = {"type": "object", "properties": {"a": schema}}
    assert "nested more than" in (job_schema_problem(schema) or "")


@pytest.mark.parametrize(
    "schema",
    [
        # Lists of lists: each level multiplies the smallest answer.
        {
            "type": "object",
            "properties": {
                "a": {
                    "type": "array",
                    "minItems": 1000,
                    "items": {"type": "array", "minItems": 1000, "items": {"type": "integer"}},
                }
            },
        },
        {"type": "object", "properties": {"s": {"type": "string", "minLength": 10_000_000}}},
        # A definition that holds itself several times: exponential when expanded.
        {
            "type": "object",
            "properties": {"n": {"$ref": "#/$defs/N"}},
            "$defs": {
                "N": {
                    "type": "object",
                    "properties": {k: {"$ref": "#/$defs/N"} for k in "abcdefgh"},
                }
            },
        },
    ],
)
def test_a_schema_whose_smallest_answer_is_huge_is_refused(schema: dict[str, Any]) -> None:
    assert "too large" in (job_schema_problem(schema) or "")


def test_a_schema_problem_never_quotes_the_schemas_values() -> None:
    schema = {"type": "object", "properties": {"a": {"type": SECRET}}}
    with pytest.raises(InvalidRequestError) as caught:
        EXTRACT.validate_input({"text": "t", "schema": schema})
    assert SECRET not in json.dumps(caught.value.errors)
    assert SECRET not in caught.value.message


def test_extract_limits() -> None:
    for raw, loc in [
        ({"schema": PERSON}, ["body", "input", "text"]),
        ({"text": "t"}, ["body", "input", "schema"]),
        ({"text": "t", "schema": "{}"}, ["body", "input", "schema"]),
        (
            {"text": "t", "schema": PERSON, "instructions": "x" * 2_001},
            ["body", "input", "instructions"],
        ),
        ({"text": "x" * 100_001, "schema": PERSON}, ["body", "input", "text"]),
    ]:
        with pytest.raises(InvalidRequestError) as caught:
            EXTRACT.validate_input(raw)
        assert locs(caught.value) == [loc]
