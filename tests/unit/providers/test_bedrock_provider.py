"""The Bedrock provider through boto3, answered by botocore's Stubber.

The Stubber checks every request against the Converse operation's input shape and
every canned answer against its output shape, so these tests hold the provider to
the service model without pinning its exact parameters.
"""

from __future__ import annotations

import json
import threading

import boto3
import pytest
from botocore.exceptions import NoCredentialsError, ReadTimeoutError
from botocore.stub import Stubber
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
from ferryman.providers.bedrock import BedrockProvider

MODEL = "anthropic.claude-3-5-haiku-20241022-v1:0"


def _client(service: str):
    return boto3.client(
        service,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
async def bedrock():
    runtime, control = _client("bedrock-runtime"), _client("bedrock")
    stubs = Stubber(runtime), Stubber(control)
    for stub in stubs:
        stub.activate()
    provider = BedrockProvider(name="bedrock-fake", client=runtime, control_client=control)
    yield provider, stubs[0], stubs[1]
    await provider.aclose()
    for stub in stubs:
        stub.deactivate()


def converse_answer(
    answer: object | None = None, *, stop: str = "tool_use", text: str | None = None, tool=None
):
    content = []
    if text is not None:
        content.append({"text": text})
    if answer is not None:
        content.append({"toolUse": {"toolUseId": "tooluse_1", "name": tool, "input": answer}})
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": 25, "outputTokens": 11, "totalTokens": 36},
        "metrics": {"latencyMs": 420},
        "ResponseMetadata": {"RequestId": "bedrock-req-1", "HTTPStatusCode": 200},
    }


TOOL = "classify_ticket_answer"


async def test_the_forced_tool_call_is_the_answer(bedrock):
    provider, stub, _ = bedrock
    stub.add_response("converse", converse_answer(json.loads(VALID_TICKET), tool=TOOL))
    response = await provider.invoke(
        classify_request(model=MODEL, max_tokens=300), timeout_seconds=5
    )
    stub.assert_no_pending_responses()
    assert json.loads(response.text) == json.loads(VALID_TICKET)
    assert (response.input_tokens, response.output_tokens) == (25, 11)
    assert response.provider_request_id == "bedrock-req-1"
    assert response.model == MODEL
    assert response.finish_reason is FinishReason.COMPLETE
    assert response.finish_detail == "tool_use"


async def test_the_request_forces_the_answer_tool(bedrock):
    provider, stub, _ = bedrock
    stub.add_response(
        "converse",
        converse_answer(json.loads(VALID_TICKET), tool=TOOL),
        expected_params={
            "modelId": MODEL,
            "messages": [{"role": "user", "content": [{"text": classify_request().prompt}]}],
            "system": [{"text": classify_request().system}],
            "inferenceConfig": {"maxTokens": 400},
            "toolConfig": {
                "tools": [
                    {
                        "toolSpec": {
                            "name": TOOL,
                            "description": "Give your answer as this tool's input.",
                            "inputSchema": {"json": classify_request().output_schema},
                        }
                    }
                ],
                "toolChoice": {"tool": {"name": TOOL}},
            },
        },
    )
    await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    stub.assert_no_pending_responses()


async def test_a_model_refusing_tool_choice_is_asked_unforced_and_remembered(bedrock):
    provider, stub, _ = bedrock
    stub.add_client_error(
        "converse",
        service_error_code="ValidationException",
        service_message="This model doesn't support the toolChoice field.",
        http_status_code=400,
    )
    stub.add_response("converse", converse_answer(json.loads(VALID_TICKET), tool=TOOL))
    stub.add_response("converse", converse_answer(json.loads(VALID_TICKET), tool=TOOL))
    first = await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    second = await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    assert json.loads(first.text) == json.loads(second.text)
    stub.assert_no_pending_responses()  # three calls: refused, unforced, unforced


async def test_truncation_is_marked_length(bedrock):
    provider, stub, _ = bedrock
    stub.add_response(
        "converse", converse_answer({"category": "billing"}, stop="max_tokens", tool=TOOL)
    )
    response = await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    assert response.finish_reason is FinishReason.LENGTH
    assert response.finish_detail == "max_tokens"


@pytest.mark.parametrize("stop", ["content_filtered", "guardrail_intervened"])
async def test_a_blocked_answer_is_a_safety_rejection(bedrock, stop):
    provider, stub, _ = bedrock
    stub.add_response("converse", converse_answer(text="blocked", stop=stop))
    with pytest.raises(SafetyRejectedError) as raised:
        await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    assert raised.value.provider_request_id == "bedrock-req-1"


ERRORS = [
    ("ThrottlingException", 429, ThrottledError),
    ("ServiceQuotaExceededException", 400, ThrottledError),
    ("ModelNotReadyException", 429, ProviderServerError),
    ("ModelTimeoutException", 408, ProviderTimeoutError),
    ("InternalServerException", 500, ProviderServerError),
    ("ServiceUnavailableException", 503, ProviderServerError),
    ("ModelErrorException", 424, ProviderServerError),
    ("ValidationException", 400, ProviderBadRequestError),
    ("ResourceNotFoundException", 404, ProviderBadRequestError),
    ("AccessDeniedException", 403, ProviderUnauthorizedError),
    ("UnrecognizedClientException", 403, ProviderUnauthorizedError),
    ("SomethingNewException", 503, ProviderServerError),
    ("SomethingNewException", 429, ThrottledError),
]


@pytest.mark.parametrize(("code", "status", "kind"), ERRORS)
async def test_every_documented_exception_lands_in_its_class(bedrock, code, status, kind):
    provider, stub, _ = bedrock
    stub.add_client_error(
        "converse",
        service_error_code=code,
        service_message=f"Input is too long: {SECRET_PROMPT}",
        http_status_code=status,
        response_meta={"RequestId": "bedrock-req-err"},
    )
    with pytest.raises(ProviderError) as raised:
        await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    assert type(raised.value) is kind
    assert code in raised.value.message
    assert raised.value.provider_request_id == "bedrock-req-err"
    assert SECRET_PROMPT not in str(raised.value)


class _FailingClient:
    """A runtime client whose call fails below the API (the network, the credentials)."""

    def __init__(self, error: Exception | None = None, block: threading.Event | None = None):
        self.error, self.block = error, block

    def converse(self, **arguments):
        if self.block is not None:
            self.block.wait(5)
        raise self.error or RuntimeError("released")


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (ReadTimeoutError(endpoint_url="https://bedrock-runtime"), ProviderTimeoutError),
        (NoCredentialsError(), ProviderUnauthorizedError),
        (ConnectionResetError("reset"), ProviderServerError),
    ],
)
async def test_failures_below_the_api_are_classified(error, kind):
    provider = BedrockProvider(name="b", client=_FailingClient(error), control_client=object())
    with pytest.raises(ProviderError) as raised:
        await provider.invoke(classify_request(model=MODEL), timeout_seconds=5)
    await provider.aclose()
    assert type(raised.value) is kind


async def test_a_call_past_the_timeout_is_given_up():
    release = threading.Event()
    provider = BedrockProvider(
        name="b", client=_FailingClient(block=release), control_client=object()
    )
    try:
        with pytest.raises(ProviderTimeoutError):
            await provider.invoke(classify_request(model=MODEL), timeout_seconds=0.1)
    finally:
        release.set()
        await provider.aclose()


async def test_check_lists_foundation_models(bedrock):
    provider, _, control = bedrock
    control.add_response("list_foundation_models", {"modelSummaries": []})
    await provider.check()
    control.assert_no_pending_responses()


async def test_check_reports_refused_credentials(bedrock):
    provider, _, control = bedrock
    control.add_client_error(
        "list_foundation_models", service_error_code="AccessDeniedException", http_status_code=403
    )
    with pytest.raises(ProviderUnauthorizedError):
        await provider.check()
