from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ferryman.core.errors import (
    InvalidOutputError,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    SafetyRejectedError,
    ThrottledError,
)
from ferryman.ports.provider import ModelProvider, ModelRequest
from ferryman.providers import SimulatedProvider
from ferryman.providers.simulated import SchemaSynthesizer
from ferryman.tasks import builtin_tasks

TASKS = builtin_tasks()
TIMEOUT = 30.0


class RecordingSleep:
    """Records requested sleeps instead of waiting."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


@pytest.fixture
def sleep() -> RecordingSleep:
    return RecordingSleep()


@pytest.fixture
def sim(sleep: RecordingSleep) -> SimulatedProvider:
    return SimulatedProvider(sleep=sleep)


def request_for(task: str, job_input: dict[str, Any], *, attempt_no: int = 1) -> ModelRequest:
    definition = TASKS.get(task)
    stored = definition.validate_input(job_input)
    return definition.build_request(stored, model="sim", attempt_no=attempt_no, job_id="gen_x")


def scripted(
    *script: str, task: str = "generate", attempt_no: int = 1, **extra: Any
) -> ModelRequest:
    base = {"prompt": "hello world"} if task == "generate" else {"ticket": "charged twice"}
    simulate = {"script": list(script), **extra}
    return request_for(task, {**base, "simulate": simulate}, attempt_no=attempt_no)


async def test_it_is_a_model_provider_named_sim(sim: SimulatedProvider) -> None:
    provider: ModelProvider = sim
    assert provider.name == "sim"
    assert sim.name == "sim"
    await sim.check()


async def test_generate_echoes_the_prompt(sim: SimulatedProvider) -> None:
    response = await sim.invoke(
        request_for("generate", {"prompt": "hello there"}), timeout_seconds=TIMEOUT
    )
    assert json.loads(response.text) == {"text": "echo: hello there"}
    assert response.provider_request_id is not None
    assert response.provider_request_id.startswith("sim-")


async def test_generate_echo_is_trimmed_to_max_tokens_words(sim: SimulatedProvider) -> None:
    request = request_for("generate", {"prompt": "one two three four", "max_tokens": 3})
    response = await sim.invoke(request, timeout_seconds=TIMEOUT)
    assert json.loads(response.text) == {"text": "echo: one two"}


async def test_classify_ticket_gets_a_valid_answer_from_the_schema(sim: SimulatedProvider) -> None:
    request = request_for("classify_ticket", {"ticket": "I was billed twice this month"})
    response = await sim.invoke(request, timeout_seconds=TIMEOUT)
    answer = TASKS.get("classify_ticket").parse_output(response.text)
    assert answer["category"] in ("billing", "technical", "account")
    assert answer["priority"] in ("low", "medium", "high")
    assert "billed twice" in answer["summary"]


@settings(max_examples=50, deadline=None)
@given(ticket=st.text(min_size=1, max_size=2_000))
def test_sim_answers_to_any_ticket_pass_the_output_schema(ticket: str) -> None:
    request = request_for("classify_ticket", {"ticket": ticket})
    response = asyncio.run(SimulatedProvider().invoke(request, timeout_seconds=TIMEOUT))
    TASKS.get("classify_ticket").parse_output(response.text)


@settings(max_examples=50, deadline=None)
@given(prompt=st.text(min_size=1, max_size=500), max_tokens=st.none() | st.integers(1, 50))
def test_sim_answers_to_any_prompt_pass_the_output_schema(
    prompt: str, max_tokens: int | None
) -> None:
    job_input: dict[str, Any] = {"prompt": prompt}
    if max_tokens is not None:
        job_input["max_tokens"] = max_tokens
    response = asyncio.run(
        SimulatedProvider().invoke(request_for("generate", job_input), timeout_seconds=TIMEOUT)
    )
    TASKS.get("generate").parse_output(response.text)


async def test_the_enum_choice_varies_with_the_prompt(sim: SimulatedProvider) -> None:
    seen = set()
    for n in range(40):
        request = request_for("classify_ticket", {"ticket": f"ticket number {n}"})
        seen.add(json.loads((await sim.invoke(request, timeout_seconds=TIMEOUT)).text)["category"])
    assert seen == {"billing", "technical", "account"}


async def test_output_is_deterministic_but_request_ids_are_unique(sim: SimulatedProvider) -> None:
    request = request_for("classify_ticket", {"ticket": "The app crashes on start"})
    first = await sim.invoke(request, timeout_seconds=TIMEOUT)
    second = await SimulatedProvider().invoke(request, timeout_seconds=TIMEOUT)
    assert first.text == second.text
    assert first.provider_request_id != second.provider_request_id


async def test_usage_is_word_counts_of_input_and_output(sim: SimulatedProvider) -> None:
    request = request_for("generate", {"prompt": "a b  c\nd", "system": "be  brief"})
    response = await sim.invoke(request, timeout_seconds=TIMEOUT)
    assert response.input_tokens == 2 + 4
    assert response.output_tokens == len(response.text.split())


# --- the script --------------------------------------------------------------

FAILURES: list[tuple[str, type[ProviderError]]] = [
    ("throttle", ThrottledError),
    ("server_error", ProviderServerError),
    ("refuse", SafetyRejectedError),
    ("bad_request", ProviderBadRequestError),
]


@pytest.mark.parametrize(("entry", "error"), FAILURES)
async def test_failure_entries_raise_their_provider_error(
    sim: SimulatedProvider, entry: str, error: type[ProviderError]
) -> None:
    with pytest.raises(error) as caught:
        await sim.invoke(scripted(entry), timeout_seconds=TIMEOUT)
    assert type(caught.value) is error
    assert caught.value.provider_request_id is not None
    assert caught.value.provider_request_id.startswith("sim-")


async def test_throttle_carries_the_scripted_retry_after(sim: SimulatedProvider) -> None:
    with pytest.raises(ThrottledError) as caught:
        await sim.invoke(scripted("throttle"), timeout_seconds=TIMEOUT)
    assert caught.value.retry_after_seconds == 1.0
    with pytest.raises(ThrottledError) as caught:
        await sim.invoke(scripted("throttle", retry_after_seconds=7.5), timeout_seconds=TIMEOUT)
    assert caught.value.retry_after_seconds == 7.5


async def test_timeout_waits_the_timeout_then_raises(
    sim: SimulatedProvider, sleep: RecordingSleep
) -> None:
    with pytest.raises(ProviderTimeoutError):
        await sim.invoke(scripted("timeout"), timeout_seconds=12.5)
    assert sleep.calls == [12.5]


@pytest.mark.parametrize("task", ["generate", "classify_ticket"])
async def test_malformed_is_not_json(sim: SimulatedProvider, task: str) -> None:
    response = await sim.invoke(scripted("malformed", task=task), timeout_seconds=TIMEOUT)
    with pytest.raises(InvalidOutputError, match="not JSON"):
        TASKS.get(task).parse_output(response.text)


@pytest.mark.parametrize("task", ["generate", "classify_ticket"])
async def test_invalid_schema_is_json_that_breaks_the_schema(
    sim: SimulatedProvider, task: str
) -> None:
    response = await sim.invoke(scripted("invalid_schema", task=task), timeout_seconds=TIMEOUT)
    json.loads(response.text)
    with pytest.raises(InvalidOutputError, match="schema"):
        TASKS.get(task).parse_output(response.text)


async def test_ok_entry_answers(sim: SimulatedProvider) -> None:
    response = await sim.invoke(scripted("ok"), timeout_seconds=TIMEOUT)
    assert json.loads(response.text) == {"text": "echo: hello world"}


async def outcome(sim: SimulatedProvider, request: ModelRequest) -> str:
    try:
        await sim.invoke(request, timeout_seconds=TIMEOUT)
    except ProviderError as exc:
        return type(exc).__name__
    return "ok"


async def test_attempt_n_follows_entry_n_and_the_last_entry_repeats(
    sim: SimulatedProvider,
) -> None:
    script = ("throttle", "server_error", "ok")
    seen = [await outcome(sim, scripted(*script, attempt_no=n)) for n in range(1, 7)]
    assert seen == ["ThrottledError", "ProviderServerError", "ok", "ok", "ok", "ok"]
    last_fails = [await outcome(sim, scripted("ok", "refuse", attempt_no=n)) for n in (1, 2, 9)]
    assert last_fails == ["ok", "SafetyRejectedError", "SafetyRejectedError"]


async def test_no_script_means_ok(sim: SimulatedProvider) -> None:
    request = request_for("generate", {"prompt": "hi", "simulate": {"latency_ms": 10}})
    assert await outcome(sim, request) == "ok"


# --- latency -----------------------------------------------------------------


async def test_latency_is_slept_before_answering(
    sim: SimulatedProvider, sleep: RecordingSleep
) -> None:
    request = request_for("generate", {"prompt": "hi", "simulate": {"latency_ms": 2_500}})
    await sim.invoke(request, timeout_seconds=TIMEOUT)
    assert sleep.calls == [2.5]


async def test_no_latency_no_sleep(sim: SimulatedProvider, sleep: RecordingSleep) -> None:
    await sim.invoke(request_for("generate", {"prompt": "hi"}), timeout_seconds=TIMEOUT)
    assert sleep.calls == []


@pytest.mark.parametrize("latency_ms", [10_000, 60_000])
async def test_latency_at_or_over_the_timeout_is_a_timeout(
    sim: SimulatedProvider, sleep: RecordingSleep, latency_ms: int
) -> None:
    request = request_for("generate", {"prompt": "hi", "simulate": {"latency_ms": latency_ms}})
    with pytest.raises(ProviderTimeoutError):
        await sim.invoke(request, timeout_seconds=10.0)
    assert sleep.calls == [10.0]


async def test_latency_applies_to_scripted_failures_too(
    sim: SimulatedProvider, sleep: RecordingSleep
) -> None:
    with pytest.raises(ProviderServerError):
        await sim.invoke(scripted("server_error", latency_ms=300), timeout_seconds=TIMEOUT)
    assert sleep.calls == [0.3]


async def test_real_sleep_is_cancellable_and_cheap() -> None:
    # Many concurrent slow calls are plain coroutines: cancelling them is immediate.
    sim = SimulatedProvider()
    request = request_for("generate", {"prompt": "hi", "simulate": {"latency_ms": 600_000}})
    calls = [asyncio.create_task(sim.invoke(request, timeout_seconds=900)) for _ in range(2_000)]
    await asyncio.sleep(0)
    for call in calls:
        call.cancel()
    results = await asyncio.gather(*calls, return_exceptions=True)
    assert all(isinstance(r, asyncio.CancelledError) for r in results)


# --- schema synthesis --------------------------------------------------------


def test_synthesis_covers_the_json_schema_subset_pydantic_writes() -> None:
    schema = {
        "$defs": {"Inner": {"type": "object", "properties": {"n": {"type": "integer"}}}},
        "type": "object",
        "properties": {
            "inner": {"$ref": "#/$defs/Inner"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 3}]},
            "flag": {"type": "boolean"},
            "score": {"type": "number", "minimum": 0.5, "maximum": 0.9},
            "count": {"type": "integer", "minimum": 3, "maximum": 1_000},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
            "kind": {"const": "fixed"},
            "padded": {"type": "string", "minLength": 50},
        },
    }
    value = SchemaSynthesizer(schema, "some prompt words").value()
    assert isinstance(value["inner"]["n"], int)
    assert isinstance(value["maybe"], str)
    assert len(value["maybe"]) <= 3
    assert isinstance(value["flag"], bool)
    assert 0.5 <= value["score"] <= 0.9
    assert 3 <= value["count"] <= 1_000
    assert len(value["tags"]) == 2
    assert value["kind"] == "fixed"
    assert len(value["padded"]) >= 50


def test_boolean_subschemas_are_understood_not_a_crash() -> None:
    """A tenant's extract schema may say true (anything) or false (nothing) anywhere."""
    schema = {
        "type": "object",
        "properties": {"anything": True, "tags": {"type": "array", "items": False, "maxItems": 0}},
    }
    value = SchemaSynthesizer(schema, "a prompt").value()
    assert value["anything"] == "sim"


@settings(max_examples=200, deadline=None)
@given(st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=40))
def test_the_generate_answer_is_the_text_json_dumps_writes(prompt: str) -> None:
    # The answer's text, not only its value, is what its tokens are counted from.
    request = request_for("generate", {"prompt": prompt})
    response = asyncio.run(SimulatedProvider().invoke(request, timeout_seconds=TIMEOUT))
    assert response.text == json.dumps({"text": json.loads(response.text)["text"]})
    assert response.text == json.dumps({"text": "echo: " + request.prompt})


async def test_every_call_has_a_request_id_of_its_own(sim: SimulatedProvider) -> None:
    request = request_for("generate", {"prompt": "hi"})
    ids = [
        (await sim.invoke(request, timeout_seconds=TIMEOUT)).provider_request_id for _ in range(500)
    ]
    assert all(re.fullmatch(r"sim-[0-9a-f]{32}", i or "") for i in ids)
    assert len(set(ids)) == len(ids)
