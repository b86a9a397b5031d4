"""Amazon Bedrock's Converse API through boto3 (the optional extra ``ferryman[aws]``).

Structured output goes through ``toolConfig``: one tool whose ``inputSchema.json`` is
the task's output schema, forced with ``toolChoice: {"tool": {"name": ...}}``. Some
Bedrock models refuse ``toolChoice`` (a ValidationException naming it); for those the
tool is offered unforced, with an instruction to use it, and the provider remembers
the model for the life of the process.

boto3 is synchronous, so each call runs on a small thread pool of this provider's own
(as many threads as the provider's max_concurrency), never on the event loop and never
competing with the loop's default executor. The call is bounded as a whole by the
timeout (Converse is not streamed). botocore's own retries are off: whether to try
again is ferryman's decision (core/retry.py), and it needs to see every throttle.

Region: the ``region`` setting, else the AWS SDK's own configuration (AWS_REGION,
~/.aws/config). Credentials: the SDK's usual chain (environment, profile, role).
``check()`` lists the foundation models (``bedrock:ListFoundationModels``), which
proves the region is reachable and the credentials are taken.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core.errors import (
    FerrymanError,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderUnauthorizedError,
    SafetyRejectedError,
    ThrottledError,
)
from ferryman.ports.provider import FinishReason, ModelResponse
from ferryman.providers.http_errors import malformed, provider_token
from ferryman.providers.structured import (
    schema_name,
    tool_answer_text,
    tool_input_schema,
    with_instruction,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.ports.provider import ModelRequest

log = structlog.get_logger("ferryman.providers")

_CHECK_TIMEOUT_SECONDS = 10.0
_LENGTH_STOPS = frozenset({"max_tokens", "model_context_window_exceeded"})
_SAFETY_STOPS = frozenset({"content_filtered", "guardrail_intervened"})
_COMPLETE_STOPS = frozenset({"end_turn", "tool_use", "stop_sequence"})
# Error codes by what they mean (the exceptions of Converse, and the SDK-wide ones).
_ERROR_CLASSES: dict[str, type[ProviderError]] = {
    "ThrottlingException": ThrottledError,
    "ServiceQuotaExceededException": ThrottledError,
    "TooManyRequestsException": ThrottledError,
    "ModelTimeoutException": ProviderTimeoutError,
    "RequestTimeout": ProviderTimeoutError,
    "RequestTimeoutException": ProviderTimeoutError,
    # A model still loading (imported models scale from zero): wait and try again, but
    # it says nothing about our request rate, so it must not shrink the AIMD window.
    "ModelNotReadyException": ProviderServerError,
    "InternalServerException": ProviderServerError,
    "ServiceUnavailableException": ProviderServerError,
    "ModelErrorException": ProviderServerError,
    "ModelStreamErrorException": ProviderServerError,
    "ValidationException": ProviderBadRequestError,
    "ResourceNotFoundException": ProviderBadRequestError,
    "AccessDeniedException": ProviderUnauthorizedError,
    "UnrecognizedClientException": ProviderUnauthorizedError,
    "ExpiredTokenException": ProviderUnauthorizedError,
    "InvalidSignatureException": ProviderUnauthorizedError,
    "IncompleteSignature": ProviderUnauthorizedError,
}
_USE_THE_TOOL = "Give your answer by calling the tool {name}, and in no other way."


class BedrockUnavailableError(FerrymanError):
    """The Bedrock provider cannot be set up here."""

    code = "invalid_configuration"


class BedrockProvider:
    """A ModelProvider for Bedrock's Converse API."""

    def __init__(
        self,
        *,
        name: str,
        region: str | None = None,
        timeout_seconds: float = 60.0,
        max_connections: int = 64,
        client: Any = None,
        control_client: Any = None,
    ) -> None:
        self._name = name
        self._label = f"bedrock provider {name!r}"
        if client is None or control_client is None:
            made = _clients(region, timeout_seconds, max_connections)
            client = client or made[0]
            control_client = control_client or made[1]
        self._client = client
        self._control = control_client
        self._executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max_connections, thread_name_prefix=f"bedrock-{name}"
        )
        # Models that refused a forced toolChoice: they are offered the tool unforced.
        self._unforced: set[str] = set()

    @property
    def name(self) -> str:
        return self._name

    async def aclose(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)

    async def check(self) -> None:
        """List the foundation models: reachable, and the credentials are taken."""
        await self._run(
            functools.partial(self._control.list_foundation_models, byOutputModality="TEXT"),
            _CHECK_TIMEOUT_SECONDS,
        )

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        schema, wrapped = tool_input_schema(request.output_schema)
        tool = schema_name(request.task)
        forced = request.model not in self._unforced
        try:
            result = await self._converse(request, schema, tool, forced, timeout_seconds)
        except _ToolChoiceRefused:
            self._unforced.add(request.model)
            log.warning(
                "provider.request_form_weakened",
                provider=self._name,
                change="the answer tool offered unforced (the model refused toolChoice)",
            )
            result = await self._converse(request, schema, tool, False, timeout_seconds)
        return self._response(request, result, tool=tool, wrapped=wrapped)

    async def _converse(
        self,
        request: ModelRequest,
        schema: dict[str, Any],
        tool: str,
        forced: bool,
        timeout_seconds: float,
    ) -> dict[str, Any]:
        system = request.system
        if not forced:
            system = with_instruction(system, _USE_THE_TOOL.format(name=tool))
        tool_config: dict[str, Any] = {
            "tools": [
                {
                    "toolSpec": {
                        "name": tool,
                        "description": "Give your answer as this tool's input.",
                        "inputSchema": {"json": schema},
                    }
                }
            ]
        }
        if forced:
            tool_config["toolChoice"] = {"tool": {"name": tool}}
        arguments: dict[str, Any] = {
            "modelId": request.model,
            "messages": [{"role": "user", "content": [{"text": request.prompt}]}],
            "toolConfig": tool_config,
        }
        if system:
            arguments["system"] = [{"text": system}]
        inference: dict[str, Any] = {}
        if request.max_tokens is not None:
            inference["maxTokens"] = request.max_tokens
        if request.temperature is not None:
            inference["temperature"] = request.temperature
        if inference:
            arguments["inferenceConfig"] = inference
        call = functools.partial(self._client.converse, **arguments)
        return await self._run(call, timeout_seconds, tool_choice_sent=forced)

    async def _run(
        self, call: Callable[[], Any], timeout_seconds: float, *, tool_choice_sent: bool = False
    ) -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout_seconds):
                result = await loop.run_in_executor(self._executor, call)
        except TimeoutError:
            raise ProviderTimeoutError(
                f"{self._label} did not answer within the timeout ({timeout_seconds:g} s)"
            ) from None
        except Exception as exc:  # every SDK error is translated right here
            raise _translate(exc, self._label, tool_choice_sent=tool_choice_sent) from exc
        if not isinstance(result, dict):
            raise malformed(self._label, "an answer that is not a document", None)
        return result

    def _response(
        self, request: ModelRequest, result: dict[str, Any], *, tool: str, wrapped: bool
    ) -> ModelResponse:
        request_id = provider_token((result.get("ResponseMetadata") or {}).get("RequestId"))
        stop = result.get("stopReason")
        message = (result.get("output") or {}).get("message")
        if not isinstance(stop, str) or not isinstance(message, dict):
            raise malformed(self._label, "no output message or stopReason", request_id)
        if stop in _SAFETY_STOPS:
            raise SafetyRejectedError(
                f"{self._label}: the model's answer was blocked (stopReason {stop})",
                provider_request_id=request_id,
            )
        text = _answer_text(message.get("content") or [], tool=tool, wrapped=wrapped)
        usage = result.get("usage") or {}
        if stop in _LENGTH_STOPS:
            reason = FinishReason.LENGTH
        elif stop in _COMPLETE_STOPS:
            reason = FinishReason.COMPLETE
        else:
            reason = FinishReason.OTHER
        return ModelResponse(
            text=text,
            input_tokens=_count(usage.get("inputTokens")),
            output_tokens=_count(usage.get("outputTokens")),
            provider_request_id=request_id,
            # Converse does not name a snapshot: the model asked for is the one that answered.
            model=request.model,
            finish_reason=reason,
            finish_detail=provider_token(stop),
        )


class _ToolChoiceRefused(Exception):  # a signal inside this module, never raised outside
    """The model does not take a forced toolChoice."""


def _answer_text(content: list[Any], *, tool: str, wrapped: bool) -> str:
    texts = []
    for block in content:
        if not isinstance(block, dict):
            continue
        use = block.get("toolUse")
        if isinstance(use, dict) and use.get("name") == tool:
            return tool_answer_text(use.get("input", {}), wrapped=wrapped)
        if isinstance(block.get("text"), str):
            texts.append(block["text"])
    return "".join(texts)


def _count(value: Any) -> int | None:
    # An answer without usage: unknown, not 0.
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _translate(exc: Exception, label: str, *, tool_choice_sent: bool) -> Exception:
    """The ProviderError for an SDK exception (codes and exception names only)."""
    from botocore import exceptions as boto  # the import succeeded when the client was made

    if isinstance(exc, boto.ClientError):
        error = exc.response.get("Error", {})
        # What the service sent is shown in the job's error: identifiers only, bounded.
        code = provider_token(error.get("Code")) or ""
        meta = exc.response.get("ResponseMetadata", {})
        request_id = provider_token(meta.get("RequestId"))
        status = meta.get("HTTPStatusCode")
        if not isinstance(status, int) or isinstance(status, bool):
            status = None
        if (
            tool_choice_sent
            and code == "ValidationException"
            and "toolchoice" in str(error.get("Message", "")).lower()
        ):
            return _ToolChoiceRefused()
        kind = _ERROR_CLASSES.get(code) or _class_for_status(status)
        return kind(
            f"{label} answered {code or 'an error'}" + (f" (HTTP {status})" if status else ""),
            provider_request_id=request_id,
        )
    name = type(exc).__name__
    if isinstance(exc, boto.ReadTimeoutError | boto.ConnectTimeoutError):
        return ProviderTimeoutError(f"{label} did not answer in time ({name})")
    if isinstance(exc, boto.NoCredentialsError | boto.PartialCredentialsError):
        return ProviderUnauthorizedError(f"{label} has no usable AWS credentials ({name})")
    if isinstance(exc, boto.ParamValidationError):
        return ProviderBadRequestError(f"{label}: the SDK refused the request ({name})")
    return ProviderServerError(f"{label} could not be reached or failed ({name})")


def _class_for_status(status: Any) -> type[ProviderError]:
    if status == 429:
        return ThrottledError
    if status in (401, 403):
        return ProviderUnauthorizedError
    if isinstance(status, int) and 400 <= status < 500 and status not in (408, 409):
        return ProviderBadRequestError
    return ProviderServerError


def _clients(region: str | None, timeout_seconds: float, max_connections: int) -> tuple[Any, Any]:
    """The runtime and control-plane clients, or a clear BedrockUnavailableError."""
    try:
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError
    except ImportError:
        raise BedrockUnavailableError(
            "kind 'bedrock' needs boto3: install ferryman with the aws extra "
            "(pip install 'ferryman[aws]')"
        ) from None
    config = Config(
        connect_timeout=timeout_seconds,
        read_timeout=timeout_seconds,
        max_pool_connections=max_connections,
        retries={"mode": "standard", "total_max_attempts": 1},
    )
    try:
        session = boto3.session.Session(region_name=region)
        return session.client("bedrock-runtime", config=config), session.client(
            "bedrock", config=config
        )
    except BotoCoreError as exc:  # NoRegionError above all
        raise BedrockUnavailableError(
            f"cannot set up Bedrock ({type(exc).__name__}): set region in the provider's "
            "settings or AWS_REGION"
        ) from None
