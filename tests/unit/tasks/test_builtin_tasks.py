from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ferryman.core.errors import InvalidOutputError, InvalidRequestError
from ferryman.core.idempotency import canonical_json
from ferryman.tasks import PromptParts, TaskDefinition, TaskRegistry, builtin_tasks

REGISTRY = builtin_tasks()
GENERATE = REGISTRY.get("generate")
CLASSIFY = REGISTRY.get("classify_ticket")


def locs(exc: InvalidRequestError) -> list[list[Any]]:
    return [error["loc"] for error in exc.errors]


# --- registry ----------------------------------------------------------------


def test_builtin_registry_knows_every_builtin_with_sim_as_default_model() -> None:
    assert REGISTRY.names() == ["classify_ticket", "extract", "generate", "summarize"]
    assert GENERATE.name == "generate"
    assert CLASSIFY.name == "classify_ticket"
    assert all(task.default_model == "sim" for task in REGISTRY)
    assert "generate" in REGISTRY


def test_unknown_task_is_an_invalid_request_naming_the_known_tasks() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        REGISTRY.get("summarise")
    assert "generate" in caught.value.message
    assert "classify_ticket" in caught.value.message
    assert locs(caught.value) == [["body", "task"]]
    assert caught.value.errors[0]["msg"]


def test_registering_a_name_twice_is_refused_naming_both_definitions() -> None:
    registry = TaskRegistry()
    registry.register(GENERATE)
    other = TaskDefinition(
        name="generate",
        inputs=GENERATE._inputs,
        outputs=GENERATE._outputs,
        render=lambda given: PromptParts(system=None, prompt="x"),
        origin="myapp.tasks.generate",
    )
    with pytest.raises(ValueError, match="already registered") as caught:
        registry.register(other)
    assert "built in" in str(caught.value)
    assert "myapp.tasks.generate" in str(caught.value)
    assert registry.get("generate") is GENERATE


def test_registering_the_same_definition_again_changes_nothing() -> None:
    # A task module may re-export a builtin: that is not a second definition.
    registry = builtin_tasks()
    registry.register(GENERATE)
    assert registry.get("generate") is GENERATE


def test_builtin_tasks_returns_a_fresh_registry_each_time() -> None:
    assert builtin_tasks() is not builtin_tasks()


# --- generate input ----------------------------------------------------------


def test_generate_input_is_normalised_without_absent_optionals() -> None:
    assert GENERATE.validate_input({"prompt": "hi", "system": None}) == {"prompt": "hi"}
    full = {"prompt": "hi", "system": "be brief", "max_tokens": 10}
    assert GENERATE.validate_input(full) == full


def test_normalised_input_is_canonical_json_ready() -> None:
    normalised = GENERATE.validate_input({"prompt": "hi", "simulate": {"script": ["throttle"]}})
    assert json.loads(canonical_json(normalised)) == normalised
    assert normalised["simulate"] == {
        "latency_ms": 0,
        "script": ["throttle"],
        "retry_after_seconds": 1.0,
    }


@pytest.mark.parametrize(
    ("raw", "loc"),
    [
        ({}, ["body", "input", "prompt"]),
        ({"prompt": ""}, ["body", "input", "prompt"]),
        ({"prompt": "x" * 100_001}, ["body", "input", "prompt"]),
        ({"prompt": 5}, ["body", "input", "prompt"]),
        ({"prompt": "hi", "max_tokens": 0}, ["body", "input", "max_tokens"]),
        ({"prompt": "hi", "max_tokens": 32_001}, ["body", "input", "max_tokens"]),
        ({"prompt": "hi", "max_tokens": "5"}, ["body", "input", "max_tokens"]),
        ({"prompt": "hi", "max_tokens": True}, ["body", "input", "max_tokens"]),
        ({"prompt": "hi", "system": 3}, ["body", "input", "system"]),
        ({"prompt": "hi", "temperature": 0.2}, ["body", "input", "temperature"]),
        ("just a string", ["body", "input"]),
        (None, ["body", "input"]),
    ],
)
def test_generate_rejects_bad_input_at_the_exact_field(raw: object, loc: list[Any]) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        GENERATE.validate_input(raw)
    assert locs(caught.value) == [loc]
    assert all(error["msg"] for error in caught.value.errors)


def test_generate_accepts_the_limits() -> None:
    assert GENERATE.validate_input({"prompt": "x" * 100_000, "max_tokens": 32_000})
    assert GENERATE.validate_input({"prompt": "x", "max_tokens": 1})


def test_input_errors_never_quote_the_input() -> None:
    secret = "SECRET-PROMPT-VALUE-1234"
    with pytest.raises(InvalidRequestError) as caught:
        GENERATE.validate_input({"prompt": secret, "max_tokens": secret})
    assert secret not in caught.value.message
    assert secret not in json.dumps(caught.value.errors)
    assert caught.value.__suppress_context__


# --- simulate block ----------------------------------------------------------


@pytest.mark.parametrize(
    ("simulate", "loc"),
    [
        ({"script": ["ok", "throttel"]}, ["body", "input", "simulate", "script", 1]),
        ({"script": []}, ["body", "input", "simulate", "script"]),
        ({"script": ["ok"] * 101}, ["body", "input", "simulate", "script"]),
        ({"latency_ms": -1}, ["body", "input", "simulate", "latency_ms"]),
        ({"latency_ms": 600_001}, ["body", "input", "simulate", "latency_ms"]),
        ({"latency_ms": 1.5}, ["body", "input", "simulate", "latency_ms"]),
        ({"retry_after_seconds": -0.1}, ["body", "input", "simulate", "retry_after_seconds"]),
        ({"retry_after_seconds": 3600.5}, ["body", "input", "simulate", "retry_after_seconds"]),
        ({"scrip": ["ok"]}, ["body", "input", "simulate", "scrip"]),
        ("ok", ["body", "input", "simulate"]),
    ],
)
@pytest.mark.parametrize(
    ("task", "base"),
    [(GENERATE, {"prompt": "hi"}), (CLASSIFY, {"ticket": "my card was charged twice"})],
)
def test_a_bad_simulate_block_is_rejected_at_intake(
    task: Any, base: dict[str, Any], simulate: object, loc: list[Any]
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        task.validate_input({**base, "simulate": simulate})
    assert locs(caught.value) == [loc]


def test_every_script_entry_is_accepted() -> None:
    script = [
        "ok",
        "throttle",
        "timeout",
        "server_error",
        "malformed",
        "invalid_schema",
        "refuse",
        "bad_request",
    ]
    simulate = {"latency_ms": 600_000, "script": script, "retry_after_seconds": 0}
    normalised = GENERATE.validate_input({"prompt": "hi", "simulate": simulate})
    assert normalised["simulate"] == {**simulate, "retry_after_seconds": 0.0}


# --- classify_ticket input ---------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "loc"),
    [
        ({}, ["body", "input", "ticket"]),
        ({"ticket": ""}, ["body", "input", "ticket"]),
        ({"ticket": "x" * 20_001}, ["body", "input", "ticket"]),
        ({"ticket": "help", "prompt": "hi"}, ["body", "input", "prompt"]),
        ({"ticket": "help", "max_tokens": 0}, ["body", "input", "max_tokens"]),
    ],
)
def test_classify_rejects_bad_input_at_the_exact_field(raw: object, loc: list[Any]) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        CLASSIFY.validate_input(raw)
    assert locs(caught.value) == [loc]


# --- build_request -----------------------------------------------------------


def test_generate_request_carries_prompt_system_and_max_tokens() -> None:
    stored = GENERATE.validate_input({"prompt": "hi", "system": "terse", "max_tokens": 7})
    request = GENERATE.build_request(stored, model="sim", attempt_no=3, job_id="gen_1")
    assert (request.prompt, request.system, request.max_tokens) == ("hi", "terse", 7)
    assert (request.model, request.task, request.attempt_no, request.job_id) == (
        "sim",
        "generate",
        3,
        "gen_1",
    )
    assert request.output_schema == GENERATE.output_schema
    assert request.extras == {}


def test_the_simulate_block_goes_to_extras_never_into_the_prompt() -> None:
    stored = GENERATE.validate_input(
        {"prompt": "hi", "simulate": {"latency_ms": 5, "script": ["refuse"]}}
    )
    request = GENERATE.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    assert request.prompt == "hi"
    assert "refuse" not in request.prompt
    assert request.extras == {
        "simulate": {"latency_ms": 5, "script": ["refuse"], "retry_after_seconds": 1.0}
    }


def test_classify_request_embeds_the_ticket_and_asks_for_the_json_fields() -> None:
    stored = CLASSIFY.validate_input({"ticket": "I cannot log in since Tuesday"})
    request = CLASSIFY.build_request(stored, model="sim", attempt_no=1, job_id="gen_1")
    assert request.prompt.endswith("I cannot log in since Tuesday")
    for word in ("category", "priority", "summary", "billing", "technical", "account", "JSON"):
        assert word in request.prompt
    assert request.system
    assert request.max_tokens is not None
    assert request.max_tokens > 0


def test_a_stored_input_that_no_longer_fits_is_refused() -> None:
    with pytest.raises(InvalidRequestError):
        GENERATE.build_request({"prompt": ""}, model="sim", attempt_no=1, job_id="gen_1")


# --- output schema and parse_output ------------------------------------------


def test_output_schemas_describe_the_outputs() -> None:
    schema = CLASSIFY.output_schema
    assert schema["type"] == "object"
    assert set(schema["required"]) == {"category", "priority", "summary"}
    assert schema["properties"]["category"]["enum"] == ["billing", "technical", "account"]
    assert schema["properties"]["priority"]["enum"] == ["low", "medium", "high"]
    assert schema["properties"]["summary"]["maxLength"] == 500
    assert GENERATE.output_schema["required"] == ["text"]


def test_output_schema_is_a_copy() -> None:
    CLASSIFY.output_schema["required"].clear()
    assert CLASSIFY.output_schema["required"]


def test_parse_output_accepts_valid_json() -> None:
    assert GENERATE.parse_output('{"text": "hello"}') == {"text": "hello"}
    answer = {"category": "billing", "priority": "high", "summary": "Charged twice."}
    assert CLASSIFY.parse_output(json.dumps(answer)) == answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "not JSON"),
        ('{"text": "hel', "not JSON"),
        ("Sure! Here is the answer", "not JSON"),
        ('{"text": NaN}', "NaN"),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"text": ""}', "text"),
        ('{"txt": "hello"}', "text"),
        ('{"text": 5}', "text"),
        ('["hello"]', "JSON object"),
        ('{"text": "hi", "extra": 1}', "unexpected field"),
    ],
)
def test_generate_rejects_broken_output_saying_what_is_wrong(text: str, expected: str) -> None:
    with pytest.raises(InvalidOutputError) as caught:
        GENERATE.parse_output(text)
    assert expected in caught.value.message


@pytest.mark.parametrize(
    ("answer", "field"),
    [
        ({"category": "sales", "priority": "low", "summary": "s"}, "category"),
        ({"category": "billing", "priority": "urgent", "summary": "s"}, "priority"),
        ({"category": "billing", "priority": "low", "summary": ""}, "summary"),
        ({"category": "billing", "priority": "low", "summary": "s" * 501}, "summary"),
        ({"category": "billing", "priority": "low"}, "summary"),
    ],
)
def test_classify_rejects_schema_breaking_output_naming_the_field(
    answer: dict[str, Any], field: str
) -> None:
    with pytest.raises(InvalidOutputError) as caught:
        CLASSIFY.parse_output(json.dumps(answer))
    assert field in caught.value.message


SECRET = "ZQX-customer-secret-5521"


@given(
    shape=st.sampled_from(
        [
            '{{"category": "{s}", "priority": "low", "summary": "x"}}',
            '{{"category": "billing", "priority": "{s}", "summary": "x"}}',
            '{{"category": "billing", "priority": "low", "summary": "{s}{pad}"}}',
            '{{"category": "billing", "priority": "low", "summary": "x", "{s}": 1}}',
            '{{"{s}": {{"category": "billing"}}}}',
            '{{"category": "billing", "priority": "low", "summary": "{s}',
            "{s} is my answer",
            '["{s}"]',
            '"{s}"',
        ]
    ),
    noise=st.text(alphabet=st.characters(codec="ascii", exclude_characters='"\\'), max_size=20),
)
def test_invalid_output_messages_never_contain_the_model_text(shape: str, noise: str) -> None:
    text = shape.format(s=SECRET + noise, pad="p" * 500)
    with pytest.raises(InvalidOutputError) as caught:
        CLASSIFY.parse_output(text)
    assert SECRET not in caught.value.message
    assert SECRET not in str(caught.value)
    # Not chained: a logged traceback would print pydantic's input_value.
    assert caught.value.__cause__ is None
    assert caught.value.__suppress_context__
