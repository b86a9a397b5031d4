"""The Anthropic provider against a local server speaking the Messages API."""

from __future__ import annotations

import json

import fake_anthropic as fake
import pytest
from sample_requests import SECRET_PROMPT, VALID_TICKET, classify_request

from ferryman.core.errors import (
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderUnauthorizedError,
    SafetyRejectedError,
    ThrottledError,
)
from ferryman.ports.provider import FinishReason

STREAMING = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])


@STREAMING
async def test_the_forced_tool_call_is_the_answer(anthropic_server, anthropic_provider, stream):
    anthropic_server.then(fake.message(VALID_TICKET, usage=(33, 14)))
    response = await anthropic_provider(stream=stream).invoke(
        classify_request(max_tokens=300), timeout_seconds=5
    )
    assert json.loads(response.text) == json.loads(VALID_TICKET)
    assert (response.input_tokens, response.output_tokens) == (33, 14)
    assert response.model == fake.SERVED_MODEL
    assert response.provider_request_id.startswith("req_")
    assert response.finish_reason is FinishReason.COMPLETE
    assert response.finish_detail == "tool_use"
    sent = anthropic_server.requests[0]
    (tool,) = sent["tools"]
    assert sent["tool_choice"] == {"type": "tool", "name": tool["name"]}
    assert tool["input_schema"]["required"] == ["category", "priority", "summary"]
    assert sent["max_tokens"] == 300
    assert sent["system"].startswith("You triage")


async def test_max_tokens_is_always_sent(anthropic_server, anthropic_provider):
    await anthropic_provider().invoke(classify_request(max_tokens=None), timeout_seconds=5)
    assert anthropic_server.requests[0]["max_tokens"] > 0


async def test_text_before_the_tool_call_is_not_the_answer(anthropic_server, anthropic_provider):
    anthropic_server.then(fake.message(VALID_TICKET, text="Let me classify this."))
    response = await anthropic_provider().invoke(classify_request(), timeout_seconds=5)
    assert json.loads(response.text) == json.loads(VALID_TICKET)


@STREAMING
async def test_a_model_that_answers_in_text_is_passed_on(
    anthropic_server, anthropic_provider, stream
):
    anthropic_server.then(fake.message(None, text="I think billing.", stop_reason="end_turn"))
    response = await anthropic_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert response.text == "I think billing."  # the worker finds it is not the schema's JSON
    assert response.finish_detail == "end_turn"


async def test_a_cut_off_tool_input_comes_back_raw_marked_length(
    anthropic_server, anthropic_provider
):
    anthropic_server.then(fake.message('{"category": "bill', stop_reason="max_tokens"))
    response = await anthropic_provider().invoke(classify_request(), timeout_seconds=5)
    assert response.finish_reason is FinishReason.LENGTH
    assert response.text == '{"category": "bill'


@STREAMING
async def test_a_refusal_is_a_safety_rejection(anthropic_server, anthropic_provider, stream):
    anthropic_server.then(fake.message(None, stop_reason="refusal"))
    with pytest.raises(SafetyRejectedError) as raised:
        await anthropic_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert raised.value.provider_request_id


ERRORS = [
    (fake.error(429, "rate_limit_error", headers={"retry-after": "12"}), ThrottledError, 12.0),
    (fake.error(529, "overloaded_error"), ThrottledError, None),
    (fake.error(500, "api_error"), ProviderServerError, None),
    (fake.error(504, "timeout_error"), ProviderServerError, None),
    (fake.error(400, "invalid_request_error"), ProviderBadRequestError, None),
    (fake.error(404, "not_found_error"), ProviderBadRequestError, None),
    (fake.error(413, "request_too_large"), ProviderBadRequestError, None),
    (fake.error(401, "authentication_error"), ProviderUnauthorizedError, None),
    (fake.error(403, "permission_error"), ProviderUnauthorizedError, None),
]


@STREAMING
@pytest.mark.parametrize(("reply", "kind", "retry_after"), ERRORS)
async def test_every_documented_error_lands_in_its_class(
    anthropic_server, anthropic_provider, stream, reply, kind, retry_after
):
    anthropic_server.then(reply)
    with pytest.raises(ProviderError) as raised:
        await anthropic_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert type(raised.value) is kind
    assert raised.value.retry_after_seconds == retry_after
    assert raised.value.provider_request_id.startswith("req_")
    assert SECRET_PROMPT not in str(raised.value)
    assert "sk-ant-test-key" not in str(raised.value)


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (fake.stream_error("overloaded_error"), ThrottledError),
        (fake.stream_error("api_error"), ProviderServerError),
        (fake.message(VALID_TICKET, fail_after=4), ProviderServerError),
        (fake.message(VALID_TICKET, drop_end=True), ProviderServerError),
    ],
    ids=["overloaded-event", "api-error-event", "reset-mid-stream", "ended-early"],
)
async def test_a_broken_stream_is_transient_or_throttled(
    anthropic_server, anthropic_provider, reply, kind
):
    anthropic_server.then(reply)
    with pytest.raises(ProviderError) as raised:
        await anthropic_provider().invoke(classify_request(), timeout_seconds=5)
    assert type(raised.value) is kind
    assert raised.value.provider_request_id


async def test_a_stalled_stream_is_a_timeout(anthropic_server, anthropic_provider):
    anthropic_server.then(fake.stall())
    with pytest.raises(ProviderTimeoutError):
        await anthropic_provider().invoke(classify_request(), timeout_seconds=0.2)


async def test_a_slow_stream_that_keeps_coming_is_not_cut_off(anthropic_server, anthropic_provider):
    anthropic_server.then(fake.message(VALID_TICKET, gap=0.05))  # ~15 events, each well in time
    response = await anthropic_provider().invoke(classify_request(), timeout_seconds=0.6)
    assert json.loads(response.text) == json.loads(VALID_TICKET)


async def test_a_non_object_answer_schema_is_wrapped_and_unwrapped(
    anthropic_server, anthropic_provider
):
    schema = {"type": "array", "items": {"type": "string"}}
    anthropic_server.then(fake.message('{"answer": ["a", "b"]}'))
    response = await anthropic_provider().invoke(
        classify_request(output_schema=schema), timeout_seconds=5
    )
    assert json.loads(response.text) == ["a", "b"]
    assert anthropic_server.requests[0]["tools"][0]["input_schema"]["type"] == "object"


async def test_check_lists_models(anthropic_server, anthropic_provider):
    await anthropic_provider().check()


async def test_check_reports_a_refused_key(anthropic_server, anthropic_provider):
    anthropic_server.then(fake.error(401, "authentication_error"))
    with pytest.raises(ProviderUnauthorizedError):
        await anthropic_provider().check()
