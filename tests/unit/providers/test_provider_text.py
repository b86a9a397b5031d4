"""What a provider sends that tenants read (request ids, the model that answered, why it
stopped, an error's identifiers) is bounded in length and charset: a broken or hostile
upstream cannot put megabytes, control characters or markup into an attempt row or a
job's error. Each bad value is dropped (null), never cut or cleaned into another id."""

from __future__ import annotations

import json

import boto3
import httpx
import pytest
from botocore.stub import Stubber
from sample_requests import VALID_TICKET, classify_request

from ferryman.core.errors import ProviderError, ProviderServerError
from ferryman.providers.anthropic import AnthropicProvider
from ferryman.providers.bedrock import BedrockProvider
from ferryman.providers.http_errors import PROVIDER_TOKEN_MAX_CHARS, provider_token
from ferryman.providers.openai import OpenAIProvider

LONG = "r" * (PROVIDER_TOKEN_MAX_CHARS + 1)
MEGABYTE = "x" * 1_000_000


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("req_01HZX3", "req_01HZX3"),
        ("chatcmpl-9f8e7d", "chatcmpl-9f8e7d"),
        ("  req_padded \t", "req_padded"),  # surrounding whitespace only
        ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "anthropic.claude-3-haiku-20240307-v1:0"),
        ("messages[0].content", "messages[0].content"),
        ("AbC+/d==", "AbC+/d=="),  # base64-like AWS ids
        ("r" * PROVIDER_TOKEN_MAX_CHARS, "r" * PROVIDER_TOKEN_MAX_CHARS),
        (400, "400"),  # vLLM's numeric error code
        (LONG, None),  # one character too long: dropped, not cut
        (MEGABYTE, None),
        ("", None),
        ("   ", None),
        ("req 123", None),  # a space inside
        ("req\x00id", None),
        ("req\nX-Injected: 1", None),
        ("req\x1b[31mred", None),
        ("réq_é", None),  # non-ASCII
        ("<script>alert(1)</script>", None),
        ('req"quoted"', None),
        (True, None),
        (None, None),
        (3.5, None),
        ({"id": "req_1"}, None),
        (["req_1"], None),
    ],
)
def test_what_each_value_from_a_provider_becomes(value, kept):
    assert provider_token(value) == kept


def test_error_identifiers_have_a_tighter_bound():
    assert provider_token("c" * 80, max_chars=80) == "c" * 80
    assert provider_token("c" * 81, max_chars=80) is None


def _openai(handler) -> OpenAIProvider:
    return OpenAIProvider(
        name="hostile",
        api_key="sk-test",
        base_url="http://hostile.fake/v1",
        stream=False,
        transport=httpx.MockTransport(handler),
    )


def _completion(*, model: object, completion_id: object, finish: object) -> dict:
    return {
        "id": completion_id,
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "message": {"content": VALID_TICKET}, "finish_reason": finish}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 3},
    }


async def test_an_openai_answer_keeps_only_well_formed_ids_model_and_finish():
    def handler(request: httpx.Request) -> httpx.Response:
        body = _completion(model=MEGABYTE, completion_id="chat\x07cmpl", finish="stop\r\nEVIL")
        return httpx.Response(200, json=body, headers={"x-request-id": LONG})

    provider = _openai(handler)
    try:
        response = await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert response.provider_request_id is None  # neither the header nor the body's id
    assert response.model == "served-model"  # the model asked for, not the megabyte
    assert response.finish_detail is None  # shown as the mapped reason, "other"
    assert (response.input_tokens, response.output_tokens) == (5, 3)


async def test_a_good_openai_completion_id_stands_in_for_a_bad_header():
    def handler(request: httpx.Request) -> httpx.Response:
        body = _completion(model="gpt-x", completion_id="chatcmpl-ok1", finish="stop")
        return httpx.Response(200, json=body, headers={"x-request-id": "bad id"})

    provider = _openai(handler)
    try:
        response = await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert response.provider_request_id == "chatcmpl-ok1"
    assert (response.model, response.finish_detail) == ("gpt-x", "stop")


async def test_an_openai_error_carries_neither_a_bad_id_nor_a_bad_code():
    def handler(request: httpx.Request) -> httpx.Response:
        error = {"error": {"type": "server_error\x00" + MEGABYTE, "code": "<b>c</b>"}}
        return httpx.Response(503, json=error, headers={"x-request-id": "req\x1bid"})

    provider = _openai(handler)
    try:
        with pytest.raises(ProviderServerError) as raised:
            await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert raised.value.provider_request_id is None
    assert raised.value.message == "openai provider 'hostile' answered HTTP 503"


async def test_an_anthropic_error_body_id_is_bounded_too():
    def handler(request: httpx.Request) -> httpx.Response:
        body = {"type": "error", "error": {"type": "api_error"}, "request_id": LONG}
        return httpx.Response(500, json=body)

    provider = AnthropicProvider(
        name="hostile",
        api_key="sk-ant",
        base_url="http://hostile.fake",
        stream=False,
        transport=httpx.MockTransport(handler),
    )
    try:
        with pytest.raises(ProviderError) as raised:
            await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert raised.value.provider_request_id is None
    assert "api_error" in raised.value.message


async def test_an_anthropic_message_keeps_only_well_formed_id_model_and_stop():
    def handler(request: httpx.Request) -> httpx.Response:
        message = {
            "type": "message",
            "id": MEGABYTE,
            "model": "claude\u202eevil",  # a right-to-left override
            "content": [{"type": "text", "text": VALID_TICKET}],
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 4, "output_tokens": 2},
        }
        return httpx.Response(200, json=message, headers={"request-id": "req_good"})

    provider = AnthropicProvider(
        name="hostile",
        api_key="sk-ant",
        base_url="http://hostile.fake",
        stream=False,
        transport=httpx.MockTransport(handler),
    )
    try:
        response = await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert response.provider_request_id == "req_good"
    assert response.model == "served-model"
    assert response.finish_detail == "end_turn"


def _bedrock() -> tuple[BedrockProvider, Stubber]:
    def client(service: str):
        return boto3.client(
            service, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        )

    runtime = client("bedrock-runtime")
    stub = Stubber(runtime)
    stub.activate()
    return BedrockProvider(name="hostile", client=runtime, control_client=client("bedrock")), stub


async def test_a_bedrock_error_code_and_request_id_are_bounded():
    provider, stub = _bedrock()
    stub.add_client_error(
        "converse",
        service_error_code="Weird\nCode" + MEGABYTE,
        http_status_code=503,
        response_meta={"RequestId": "id with spaces"},
    )
    try:
        with pytest.raises(ProviderServerError) as raised:
            await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert raised.value.provider_request_id is None
    assert raised.value.message == "bedrock provider 'hostile' answered an error (HTTP 503)"


async def test_a_bedrock_answer_keeps_only_a_well_formed_request_id_and_stop():
    provider, stub = _bedrock()
    tool = {"toolUseId": "t1", "name": "classify_ticket_answer", "input": json.loads(VALID_TICKET)}
    stub.add_response(
        "converse",
        {
            "output": {"message": {"role": "assistant", "content": [{"toolUse": tool}]}},
            "stopReason": "tool_use",
            "usage": {"inputTokens": 2, "outputTokens": 1, "totalTokens": 3},
            "metrics": {"latencyMs": 1},
            "ResponseMetadata": {"RequestId": LONG, "HTTPStatusCode": 200},
        },
    )
    try:
        response = await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert response.provider_request_id is None
    assert response.finish_detail == "tool_use"
