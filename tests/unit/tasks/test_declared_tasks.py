"""Tasks declared in TOML: JSON Schema input and output, prompt templates, startup errors."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.errors import InvalidOutputError, InvalidRequestError
from ferryman.providers.simulated import SimulatedProvider
from ferryman.tasks import TaskDefinitionError, declared_task
from ferryman.tasks.templates import PromptTemplate, TemplateError

INPUT = {
    "type": "object",
    "required": ["email"],
    "properties": {
        "email": {"type": "string", "minLength": 1, "maxLength": 2000},
        "customer": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "maxLength": 100},
                "tier": {"enum": ["free", "pro"]},
            },
        },
        "urgent": {"type": "boolean"},
        "labels": {"type": "array", "items": {"$ref": "#/$defs/Label"}, "maxItems": 3},
    },
    "$defs": {"Label": {"type": "string", "maxLength": 20}},
}
OUTPUT = {
    "type": "object",
    "required": ["queue", "confidence"],
    "properties": {
        "queue": {"enum": ["sales", "support", "billing"]},
        "confidence": {"type": "number", "minimum": 0, "maximum": 1},
        "reply": {"type": "string", "maxLength": 300},
    },
    "additionalProperties": False,
}


def triage(**overrides: Any) -> Any:
    options: dict[str, Any] = {
        "name": "triage",
        "origin": "[tasks.triage] in the configuration",
        "prompt": "Route this email from {{ input.customer.name }} ({{input.customer.tier}}):\n"
        "{{ input.email }}\nUrgent: {{ input.urgent }}. Labels: {{ input.labels }}",
        "system": "You route emails for {{ input.customer.tier }} customers.",
        "input_schema": INPUT,
        "output_schema": OUTPUT,
        "model": "fast",
        "max_attempts": 3,
        "max_invalid_output_attempts": 1,
        "max_tokens": 200,
        "temperature": 0.0,
        "description": "Route an email.",
    }
    options.update(overrides)
    return declared_task(**options)


TRIAGE = triage()


def locs(exc: InvalidRequestError) -> list[list[Any]]:
    return [error["loc"] for error in exc.errors]


def test_a_declared_task_carries_its_defaults() -> None:
    assert TRIAGE.name == "triage"
    assert TRIAGE.default_model == "fast"
    assert (TRIAGE.max_attempts, TRIAGE.max_invalid_output_attempts) == (3, 1)
    assert (TRIAGE.max_tokens, TRIAGE.temperature) == (200, 0.0)
    assert TRIAGE.description == "Route an email."
    assert triage(model=None).default_model == "sim"


def test_the_published_input_schema_is_closed_and_carries_simulate() -> None:
    schema = TRIAGE.input_schema
    assert schema["additionalProperties"] is False
    assert "simulate" in schema["properties"]
    assert "SimulateOptions" in schema["$defs"]
    assert schema["properties"]["email"] == INPUT["properties"]["email"]


def test_the_prompt_is_rendered_from_the_input() -> None:
    stored = TRIAGE.validate_input(
        {
            "email": "My card was charged twice",
            "customer": {"name": "Ann", "tier": "pro"},
            "urgent": True,
            "labels": ["a", "b"],
        }
    )
    request = TRIAGE.build_request(stored, model="gpt", attempt_no=1, job_id="gen_1")
    assert request.prompt == (
        "Route this email from Ann (pro):\nMy card was charged twice\n"
        'Urgent: true. Labels: ["a", "b"]'
    )
    assert request.system == "You route emails for pro customers."
    assert (request.max_tokens, request.temperature) == (200, 0.0)
    assert request.output_schema == OUTPUT


def test_absent_optional_fields_render_as_nothing() -> None:
    stored = TRIAGE.validate_input({"email": "hi"})
    request = TRIAGE.build_request(stored, model="gpt", attempt_no=1, job_id="gen_1")
    assert request.prompt == "Route this email from  ():\nhi\nUrgent: . Labels: "


def test_an_input_value_is_never_read_as_a_template() -> None:
    stored = TRIAGE.validate_input(
        {"email": "{{ input.customer.name }}", "customer": {"name": "X"}}
    )
    request = TRIAGE.build_request(stored, model="gpt", attempt_no=1, job_id="gen_1")
    assert "\n{{ input.customer.name }}\n" in request.prompt


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ({}, [(["body", "input", "email"], "Field required")]),
        ({"email": ""}, [(["body", "input", "email"], "String should have at least 1 characters")]),
        ({"email": "x" * 2001}, [(["body", "input", "email"], "String should have at most 2000")]),
        (
            {"email": "x", "extra": 1},
            [(["body", "input", "extra"], "Extra inputs are not permitted")],
        ),
        ({"email": 5}, [(["body", "input", "email"], "Input should be of type string")]),
        (
            {"email": "x", "customer": {"tier": "gold"}},
            [(["body", "input", "customer", "tier"], 'Input should be one of "free", "pro"')],
        ),
        (
            {"email": "x", "labels": ["ok", "y" * 21]},
            [(["body", "input", "labels", 1], "at most 20")],
        ),
        ("text", [(["body", "input"], "Input should be a JSON object")]),
        (
            {"email": "x", "simulate": {"script": ["oops"]}},
            [(["body", "input", "simulate", "script", 0], "Input should be")],
        ),
        (
            {"simulate": {"latency_ms": -1}},
            [
                (["body", "input", "email"], "Field required"),
                (["body", "input", "simulate", "latency_ms"], "greater than or equal"),
            ],
        ),
    ],
)
def test_bad_input_is_refused_at_the_exact_field(
    raw: object, expected: list[tuple[list[Any], str]]
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        TRIAGE.validate_input(raw)
    assert locs(caught.value) == [loc for loc, _ in expected]
    for error, (_, msg) in zip(caught.value.errors, expected, strict=True):
        assert msg in error["msg"], error["msg"]


def test_the_simulate_block_is_normalised_and_goes_to_extras() -> None:
    stored = TRIAGE.validate_input({"email": "hi", "simulate": {"script": ["refuse"]}})
    assert stored["simulate"] == {"latency_ms": 0, "script": ["refuse"], "retry_after_seconds": 1.0}
    request = TRIAGE.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    assert request.extras == {"simulate": stored["simulate"]}
    assert "refuse" not in request.prompt
    assert TRIAGE.validate_input({"email": "hi", "simulate": None}) == {"email": "hi"}


SECRET = "ZZQ-customer-secret-4409"


@given(
    raw=st.sampled_from(
        [
            {"email": 5, "customer": {"tier": SECRET}},
            {"email": SECRET * 200},
            {"email": "x", "urgent": SECRET},
            {"email": "x", "labels": [SECRET * 2]},
            {"email": ["x", SECRET]},
        ]
    )
)
def test_input_errors_never_quote_the_input(raw: dict[str, Any]) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        TRIAGE.validate_input(raw)
    assert SECRET not in json.dumps(caught.value.errors)
    assert SECRET not in caught.value.message


def test_a_stored_input_that_no_longer_fits_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        TRIAGE.build_request({"email": ""}, model="sim", attempt_no=1, job_id="gen_1")


def test_output_is_checked_against_the_output_schema() -> None:
    answer = {"queue": "sales", "confidence": 0.5}
    assert TRIAGE.parse_output(json.dumps(answer)) == answer
    for bad, described in [
        ({"queue": "sales"}, "confidence: Field required"),
        ({"queue": "hr", "confidence": 0.5}, "queue: Input should be one of"),
        (
            {"queue": "sales", "confidence": 2},
            "confidence: Input should be less than or equal to 1",
        ),
        ({"queue": "sales", "confidence": 1, "x": 1}, "(top level): unexpected field"),
        ([1], "(top level): Input should be a JSON object"),
    ]:
        with pytest.raises(InvalidOutputError) as caught:
            TRIAGE.parse_output(json.dumps(bad))
        assert described in caught.value.message, caught.value.message
        assert "'triage'" in caught.value.message


@given(
    shape=st.sampled_from(
        [
            '{{"queue": "{s}", "confidence": 0.1}}',
            '{{"queue": "sales", "confidence": "{s}"}}',
            '{{"queue": "sales", "confidence": 0.1, "{s}": 1}}',
            '{{"queue": "sales", "confidence": 0.1, "reply": "{s}{pad}"}}',
            '{{"queue": "sales", "confidence": 0.1, "reply": "{s}',
            "{s}",
        ]
    )
)
def test_output_errors_never_quote_the_model_text(shape: str) -> None:
    with pytest.raises(InvalidOutputError) as caught:
        TRIAGE.parse_output(shape.format(s=SECRET, pad="p" * 300))
    assert SECRET not in str(caught.value)
    assert caught.value.__suppress_context__


def test_the_sim_answers_a_declared_task_with_a_valid_output() -> None:
    stored = TRIAGE.validate_input({"email": "Please refund my last invoice"})
    request = TRIAGE.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    response = asyncio.run(SimulatedProvider().invoke(request, timeout_seconds=5.0))
    answer = TRIAGE.parse_output(response.text)
    assert answer["queue"] in ("sales", "support", "billing")


# --- startup errors -----------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (
            {"input_schema": {"type": "object", "properties": {"a": {"type": "strin"}}}},
            "input_schema: not a valid JSON Schema at properties.a.type",
        ),
        (
            {"output_schema": {"type": "object", "required": "queue"}},
            "output_schema: not a valid JSON Schema at required",
        ),
        (
            {"output_schema": {"type": "array"}},
            'output_schema: the top level must be "type": "object"',
        ),
        (
            {"input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "maximum length (max_length / maxLength): a",
        ),
        (
            {
                "input_schema": {
                    "type": "object",
                    "properties": {"a": {"type": "array", "items": {"type": ["string", "null"]}}},
                }
            },
            "maxLength): a",
        ),
        (
            {"input_schema": {"type": "object", "properties": {"a": {"$ref": "other.json"}}}},
            "input_schema: at properties.a: $ref must name",
        ),
        (
            {"input_schema": {"type": "object", "properties": {"simulate": {"type": "boolean"}}}},
            "'simulate' is ferryman's own",
        ),
        (
            {
                "input_schema": {
                    "type": "object",
                    "properties": {"p": {"type": "string", "maxLength": 3, "pattern": "(["}},
                }
            },
            "not a valid JSON Schema at properties.p.pattern",
        ),
        (
            {"prompt": "Hello {{ input.emial }}"},
            "prompt: {{ input.emial }} names no field of the input schema",
        ),
        ({"prompt": "Hello {{ input.customer.age }}"}, "names no field"),
        ({"prompt": "Hello {{ input.simulate }}"}, "names no field"),
        ({"prompt": "Hello {{ email }}"}, "prompt: line 1 column 7: '{{' opens no placeholder"),
        ({"system": "ok\nthen {{ input.email | upper }}"}, "system: line 2 column 6"),
        ({"prompt": "{% for x in input %}{{ input.email }}{% endfor %}"}, None),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"name": "bad name"}, "task name"),
    ],
)
def test_a_task_that_cannot_be_defined_is_a_startup_error_naming_it(
    overrides: dict[str, Any], expected: str | None
) -> None:
    if expected is None:
        # Not jinja: {% %} is plain text here, and the placeholder still renders.
        task = triage(**overrides)
        request = task.build_request({"email": "E"}, model="m", attempt_no=1, job_id="g")
        assert request.prompt == "{% for x in input %}E{% endfor %}"
        return
    if "input_schema" in overrides:
        # Templates that name no field of the schema under test.
        overrides = {"prompt": "Go", "system": None, **overrides}
    with pytest.raises(TaskDefinitionError) as caught:
        triage(**overrides)
    message = str(caught.value)
    assert expected in message, message
    assert "[tasks.triage] in the configuration" in message


# --- the template language alone ----------------------------------------------


def test_templates_parse_into_text_and_fields() -> None:
    template = PromptTemplate.parse("a {{input.x}} b {{   input.y.z   }}}} c")
    assert template.fields() == [("x",), ("y", "z")]
    assert template.render({"x": 1, "y": {"z": "Z"}}) == "a 1 b Z}} c"
    assert PromptTemplate.parse("").render({}) == ""
    assert PromptTemplate.parse('{"json": {"nested": 1}}').render({}) == '{"json": {"nested": 1}}'


@pytest.mark.parametrize(
    "text", ["{{", "{{ input }}", "{{ input. }}", "x {{ input.a", "{{ 1 + 1 }}"]
)
def test_anything_but_a_placeholder_after_double_braces_does_not_parse(text: str) -> None:
    with pytest.raises(TemplateError, match="opens no placeholder"):
        PromptTemplate.parse(text)


@given(st.text(max_size=200))
def test_rendering_inserts_values_verbatim(value: str) -> None:
    template = PromptTemplate.parse("[{{ input.v }}]")
    assert template.render({"v": value}) == f"[{value}]"


def test_nested_objects_refuse_unknown_fields_as_the_top_level_does() -> None:
    with pytest.raises(InvalidRequestError) as refused:
        TRIAGE.validate_input({"email": "hi", "customer": {"name": "Ann", "vip": True}})

    assert locs(refused.value) == [["body", "input", "customer", "vip"]]
    assert TRIAGE.input_schema["properties"]["customer"]["additionalProperties"] is False


def test_a_nested_object_that_says_otherwise_stays_open() -> None:
    schema = {
        "type": "object",
        "properties": {
            "open": {"type": "object", "additionalProperties": True},
            "tags": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 9}},
        },
    }
    task = triage(input_schema=schema, prompt="{{ input.open }}", system=None)

    stored = task.validate_input({"open": {"anything": 1}, "tags": {"a": "b"}})

    assert stored == {"open": {"anything": 1}, "tags": {"a": "b"}}


def test_objects_in_arrays_definitions_and_alternatives_are_closed() -> None:
    schema = {
        "type": "object",
        "properties": {
            "items": {"type": "array", "maxItems": 3, "items": {"$ref": "#/$defs/Item"}},
            "either": {
                "anyOf": [
                    {"type": "object", "properties": {"a": {"type": "integer"}}},
                    {"type": "null"},
                ]
            },
        },
        "$defs": {"Item": {"type": "object", "properties": {"n": {"type": "integer"}}}},
    }
    task = triage(input_schema=schema, prompt="{{ input.items }}", system=None)

    assert task.validate_input({"items": [{"n": 1}], "either": {"a": 1}})
    with pytest.raises(InvalidRequestError) as refused:
        task.validate_input({"items": [{"n": 1, "x": 2}]})
    assert locs(refused.value) == [["body", "input", "items", 0, "x"]]
    with pytest.raises(InvalidRequestError):
        task.validate_input({"either": {"a": 1, "b": 2}})


def test_an_object_composed_with_all_of_keeps_every_parts_fields_and_no_others() -> None:
    schema = {
        "type": "object",
        "properties": {
            "who": {
                "type": "object",
                "allOf": [
                    {"$ref": "#/$defs/Named"},
                    {"properties": {"age": {"type": "integer"}}},
                ],
            }
        },
        "$defs": {
            "Named": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 9}}}
        },
    }
    task = triage(input_schema=schema, prompt="{{ input.who }}", system=None)

    assert task.validate_input({"who": {"name": "Ann", "age": 3}})
    with pytest.raises(InvalidRequestError) as refused:
        task.validate_input({"who": {"name": "Ann", "age": 3, "x": 1}})
    assert locs(refused.value)[0][:3] == ["body", "input", "who"]
