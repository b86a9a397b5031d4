"""The OpenAI-compatible provider against a local server speaking Chat Completions."""

from __future__ import annotations

import asyncio
import json

import fake_openai as fake
import httpx
import pytest
from asgi_streaming import StreamingASGITransport
from sample_requests import SECRET_PROMPT, VALID_TICKET, classify_request

from ferryman.core.errors import (
    AccountRefusedError,
    ContextLengthExceededError,
    FailureClass,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderUnauthorizedError,
    SafetyRejectedError,
    ThrottledError,
)
from ferryman.ports.provider import FinishReason
from ferryman.providers.openai import OutputMode

STREAMING = pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])


@STREAMING
async def test_a_structured_answer_comes_back_as_json_text(openai_server, openai_provider, stream):
    openai_server.then(fake.answer(VALID_TICKET, usage=(40, 12)))
    provider = openai_provider(stream=stream)
    response = await provider.invoke(classify_request(max_tokens=300), timeout_seconds=5)
    assert json.loads(response.text) == json.loads(VALID_TICKET)
    assert (response.input_tokens, response.output_tokens) == (40, 12)
    assert response.model == fake.SERVED_MODEL
    assert response.provider_request_id.startswith("req_")
    assert response.finish_reason is FinishReason.COMPLETE
    assert response.finish_detail == "stop"
    sent = openai_server.requests[0]
    assert sent["model"] == "served-model"
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["response_format"]["json_schema"]["schema"]["required"] == [
        "category",
        "priority",
        "summary",
    ]
    # maxLength is outside what strict mode takes: sent with strict off, validated by the worker.
    assert sent["response_format"]["json_schema"]["strict"] is False
    assert sent["max_tokens"] == 300  # not api.openai.com: the widely known name
    assert openai_server.headers[0]["authorization"] == "Bearer sk-test-key"
    assert bool(sent.get("stream")) is stream


async def test_openai_itself_gets_max_completion_tokens(openai_server, openai_provider):
    provider = openai_provider(base_url="https://api.openai.com/v1")
    await provider.invoke(classify_request(max_tokens=50), timeout_seconds=5)
    assert openai_server.requests[0]["max_completion_tokens"] == 50
    assert "max_tokens" not in openai_server.requests[0]


async def test_a_server_that_streams_nothing_but_answers_whole_is_understood(
    openai_server, openai_provider
):
    def whole(body):
        return fake.answer(VALID_TICKET)({**body, "stream": False})

    openai_server.then(whole)
    response = await openai_provider(stream=True).invoke(classify_request(), timeout_seconds=5)
    assert json.loads(response.text)["category"] == "billing"


@STREAMING
async def test_truncation_returns_the_raw_text_marked_length(
    openai_server, openai_provider, stream
):
    openai_server.then(fake.answer('{"category": "bil', finish="length"))
    response = await openai_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert response.finish_reason is FinishReason.LENGTH
    assert response.finish_detail == "length"
    assert response.text == '{"category": "bil'


@STREAMING
@pytest.mark.parametrize(
    "reply",
    [
        fake.answer(None, refusal="I can't help with that."),
        fake.answer("", finish="content_filter"),
    ],
    ids=["refusal", "content_filter"],
)
async def test_refusals_are_safety_rejections(openai_server, openai_provider, stream, reply):
    openai_server.then(reply)
    with pytest.raises(SafetyRejectedError) as raised:
        await openai_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert "can't help" not in raised.value.message  # the model's words are not repeated
    assert raised.value.provider_request_id


# Each error the API documents, and the class it must land in.
ERRORS = [
    (
        fake.error(429, "requests", "rate_limit_exceeded", headers={"retry-after": "7"}),
        ThrottledError,
        7.0,
    ),
    (
        fake.error(429, "tokens", "rate_limit_exceeded", headers={"retry-after-ms": "1500"}),
        ThrottledError,
        1.5,
    ),
    (
        fake.error(
            429,
            "requests",
            "rate_limit_exceeded",
            headers={
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "6m0s",
                "x-ratelimit-remaining-tokens": "100",
                "x-ratelimit-reset-tokens": "1s",
            },
        ),
        ThrottledError,
        360.0,
    ),
    # A 429 no wait mends: the account, not the key (it pauses the provider at once).
    (fake.error(429, "insufficient_quota", "insufficient_quota"), AccountRefusedError, None),
    (fake.error(500, "server_error"), ProviderServerError, None),
    (fake.error(502, None), ProviderServerError, None),
    (fake.error(503, "server_error", headers={"retry-after": "2"}), ProviderServerError, 2.0),
    (fake.error(408, "timeout"), ProviderTimeoutError, None),
    (
        fake.error(400, "invalid_request_error", "context_length_exceeded", param="messages"),
        ContextLengthExceededError,
        None,
    ),
    (
        fake.error(404, "invalid_request_error", "model_not_found", param="model"),
        ProviderBadRequestError,
        None,
    ),
    (fake.error(413, "invalid_request_error"), ProviderBadRequestError, None),
    (fake.error(422, "invalid_request_error"), ProviderBadRequestError, None),
    (fake.error(401, "invalid_request_error", "invalid_api_key"), ProviderUnauthorizedError, None),
    (
        fake.error(403, "invalid_request_error", "unsupported_country_region_territory"),
        ProviderUnauthorizedError,
        None,
    ),
    (fake.error(400, None, "content_filter", param="prompt"), SafetyRejectedError, None),
    (fake.raw(200, b"<html>gateway</html>"), ProviderServerError, None),
    (fake.raw(502, b"<html>bad gateway</html>"), ProviderServerError, None),
]


@pytest.mark.parametrize(("reply", "kind", "retry_after"), ERRORS)
async def test_every_documented_error_lands_in_its_class(
    openai_server, openai_provider, reply, kind, retry_after
):
    openai_server.then(reply)
    with pytest.raises(ProviderError) as raised:
        await openai_provider().invoke(classify_request(), timeout_seconds=5)
    assert type(raised.value) is kind
    assert raised.value.retry_after_seconds == retry_after
    assert raised.value.provider_request_id.startswith("req_")
    assert SECRET_PROMPT not in str(raised.value)
    assert "sk-test-key" not in str(raised.value)


async def test_retry_after_as_an_http_date_is_honoured(openai_server, openai_provider):
    openai_server.then(
        fake.error(429, "requests", headers={"retry-after": "Wed, 21 Oct 2099 07:28:00 GMT"})
    )
    with pytest.raises(ThrottledError) as raised:
        await openai_provider().invoke(classify_request(), timeout_seconds=5)
    assert raised.value.retry_after_seconds > 3600


async def test_the_error_code_is_kept_in_the_message(openai_server, openai_provider):
    openai_server.then(
        fake.error(
            400,
            "invalid_request_error",
            "context_length_exceeded",
            param="messages",
            message=f"too long: {SECRET_PROMPT}",
        )
    )
    with pytest.raises(ContextLengthExceededError) as raised:
        await openai_provider().invoke(classify_request(), timeout_seconds=5)
    # Its own class, so a job can move on to a fallback model with a longer context.
    assert isinstance(raised.value, ProviderBadRequestError)
    assert "context_length_exceeded" in raised.value.message
    assert "400" in raised.value.message
    assert SECRET_PROMPT not in raised.value.message  # the provider's own text is never kept
    assert raised.value.failure_class is FailureClass.INVALID_REQUEST


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (fake.stream_error("server_error"), ProviderServerError),
        (fake.stream_error("rate_limit_exceeded", "rate_limit_exceeded"), ThrottledError),
        (fake.answer(VALID_TICKET, fail_after=2), ProviderServerError),
        (fake.answer(VALID_TICKET, drop_end=True), ProviderServerError),
    ],
    ids=["error-event", "throttle-event", "reset-mid-stream", "ended-early"],
)
async def test_a_broken_stream_is_transient(openai_server, openai_provider, reply, kind):
    openai_server.then(reply)
    with pytest.raises(ProviderError) as raised:
        await openai_provider().invoke(classify_request(), timeout_seconds=5)
    assert type(raised.value) is kind
    assert raised.value.provider_request_id


async def test_an_unreachable_server_is_transient(openai_provider):
    def refuse(request):
        raise httpx.ConnectError("connection refused")

    provider = openai_provider(transport=httpx.MockTransport(refuse))
    with pytest.raises(ProviderServerError):
        await provider.invoke(classify_request(), timeout_seconds=5)


@STREAMING
async def test_a_stalled_server_is_a_timeout(openai_server, openai_provider, stream):
    openai_server.then(fake.stall())
    with pytest.raises(ProviderTimeoutError) as raised:
        await openai_provider(stream=stream).invoke(classify_request(), timeout_seconds=0.2)
    assert raised.value.failure_class is FailureClass.TRANSIENT


async def test_a_slow_stream_that_keeps_coming_is_not_cut_off(openai_server, openai_provider):
    # Each gap is well inside the timeout; all of them together are well past it.
    openai_server.then(fake.answer(VALID_TICKET, gap=0.05, pieces=30))
    response = await openai_provider().invoke(classify_request(), timeout_seconds=1.0)
    assert json.loads(response.text) == json.loads(VALID_TICKET)


async def test_a_server_without_json_schema_falls_back_once_for_good(
    openai_server, openai_provider
):
    openai_server.then(
        fake.error(
            400,
            "invalid_request_error",
            param="response_format",
            message="response_format json_schema is not supported",
        ),
        fake.answer(VALID_TICKET),
        fake.answer(VALID_TICKET),
    )
    provider = openai_provider()
    first = await provider.invoke(classify_request(), timeout_seconds=5)
    second = await provider.invoke(classify_request(), timeout_seconds=5)
    assert json.loads(first.text) == json.loads(second.text) == json.loads(VALID_TICKET)
    formats = [r.get("response_format", {}).get("type") for r in openai_server.requests]
    assert formats == ["json_schema", "json_object", "json_object"]
    assert provider.output_mode is OutputMode.JSON_OBJECT
    # JSON mode cannot carry the schema, so the system prompt does.
    system = openai_server.requests[1]["messages"][0]
    assert system["role"] == "system" and '"category"' in system["content"]


async def test_a_server_without_response_format_gets_the_schema_in_the_prompt(
    openai_server, openai_provider
):
    refuse = fake.error(400, "invalid_request_error", message="unknown field: response_format")
    openai_server.then(refuse, refuse, fake.answer(VALID_TICKET))
    provider = openai_provider()
    await provider.invoke(classify_request(), timeout_seconds=5)
    assert "response_format" not in openai_server.requests[-1]
    assert provider.output_mode is OutputMode.PROMPT


async def test_json_object_mode_from_the_settings(openai_server, openai_provider):
    await openai_provider(structured_output="json_object").invoke(
        classify_request(), timeout_seconds=5
    )
    assert openai_server.requests[0]["response_format"] == {"type": "json_object"}


async def test_a_refused_token_limit_name_is_swapped(openai_server, openai_provider):
    openai_server.then(
        fake.error(
            400,
            "invalid_request_error",
            "unsupported_parameter",
            param="max_tokens",
            message="Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
        ),
    )
    await openai_provider().invoke(classify_request(max_tokens=20), timeout_seconds=5)
    assert openai_server.requests[-1]["max_completion_tokens"] == 20


async def test_a_real_bad_request_is_not_retried_in_another_form(openai_server, openai_provider):
    openai_server.then(fake.error(400, "invalid_request_error", "context_length_exceeded"))
    with pytest.raises(ProviderBadRequestError):
        await openai_provider().invoke(classify_request(), timeout_seconds=5)
    assert len(openai_server.requests) == 1


async def test_check_lists_models_with_the_key(openai_server, openai_provider):
    await openai_provider().check()
    assert openai_server.headers[0]["authorization"] == "Bearer sk-test-key"


async def test_check_reports_a_refused_key(openai_server, openai_provider):
    openai_server.models_reply = fake.error(401, "invalid_request_error", "invalid_api_key")
    with pytest.raises(ProviderUnauthorizedError):
        await openai_provider().check()


async def test_a_local_server_needs_no_key(openai_server, openai_provider):
    await openai_provider(api_key=None).invoke(classify_request(), timeout_seconds=5)
    assert "authorization" not in openai_server.headers[0]


async def test_calls_refused_at_once_weaken_the_request_form_once(openai_server, openai_provider):
    def no_json_schema(body):
        if body.get("response_format", {}).get("type") == "json_schema":
            return fake.error(400, "invalid_request_error", param="response_format")(body)
        return fake.answer(VALID_TICKET)(body)

    openai_server.default = no_json_schema
    provider = openai_provider()
    answers = await asyncio.gather(
        *(provider.invoke(classify_request(), timeout_seconds=5) for _ in range(8))
    )
    assert all(json.loads(a.text) == json.loads(VALID_TICKET) for a in answers)
    # Eight refusals of json_schema step down to json_object, not past it.
    assert provider.output_mode is OutputMode.JSON_OBJECT
    sent = [r.get("response_format", {}).get("type") for r in openai_server.requests]
    assert sent.count("json_schema") == 8 and "json_object" in sent
    assert None not in sent


async def test_azure_gets_its_key_header_and_max_completion_tokens(openai_server, openai_provider):
    provider = openai_provider(
        base_url="https://acme.openai.azure.com/openai/v1",
        transport=StreamingASGITransport(openai_server.app(prefix="/openai/v1")),
    )
    await provider.invoke(classify_request(max_tokens=30), timeout_seconds=5)
    assert openai_server.headers[0]["api-key"] == "sk-test-key"
    assert openai_server.requests[0]["max_completion_tokens"] == 30
