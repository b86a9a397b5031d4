"""OpenAI-compatible Chat Completions: OpenAI, Azure OpenAI's v1 endpoint, vLLM, Ollama,
llama.cpp's server, LiteLLM's proxy and any other server that speaks the same API.

One call is one ``POST {base_url}/chat/completions`` (streamed by default, with
``stream_options.include_usage`` so the last event carries the token counts). The
answer must be JSON matching the task's output schema, asked for in the strongest way
the server takes, weakest last:

1. ``response_format: {"type": "json_schema", ...}`` (``strict`` when the schema
   allows it; the worker validates every keyword either way);
2. ``response_format: {"type": "json_object"}`` plus the schema in the system prompt;
3. the schema in the system prompt alone.

A server that refuses a way (HTTP 400/422 naming ``response_format`` or ``json_schema``)
is asked again at once the next way, and the provider remembers it for the life of the
process. The same goes for the name of the output-token limit (``max_completion_tokens``
for OpenAI and Azure, ``max_tokens`` elsewhere, swapped when a server refuses one) and
for ``stream_options``. Such a refusal costs nothing: the server refused before
generating.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import structlog

from ferryman.core.errors import ProviderServerError, SafetyRejectedError
from ferryman.ports.provider import FinishReason, ModelResponse
from ferryman.providers.http_api import Answer, HttpApi, json_event
from ferryman.providers.http_errors import (
    error_for_type,
    malformed,
    parse_error_body,
    provider_token,
)
from ferryman.providers.structured import (
    schema_instruction,
    schema_name,
    strict_compatible,
    with_instruction,
)

if TYPE_CHECKING:
    import httpx

    from ferryman.ports.provider import ModelRequest
    from ferryman.providers.http_errors import ErrorBody
    from ferryman.providers.sse import SseEvent

log = structlog.get_logger("ferryman.providers")

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
_LABEL = "openai"
_CHECK_TIMEOUT_SECONDS = 10.0
# Hosts that know max_completion_tokens (and refuse max_tokens for reasoning models).
_AZURE_HOST = ".openai.azure.com"
_COMPLETION_TOKENS_HOSTS = ("api.openai.com", _AZURE_HOST)
_UNSUPPORTED_WORDS = ("unsupported", "not supported", "unrecognized", "extra inputs", "unknown")
_FINISH = {"stop": FinishReason.COMPLETE, "length": FinishReason.LENGTH}


class OutputMode(enum.IntEnum):
    """How the answer's JSON is asked for, strongest first (the fallback order)."""

    JSON_SCHEMA = 0
    JSON_OBJECT = 1
    PROMPT = 2


@dataclass(frozen=True, slots=True)
class _Form:
    """The request settings a server may refuse, as one call sent them."""

    mode: OutputMode
    tokens_param: str
    stream_options: bool


class _AskAgain(Exception):  # a signal inside this module, never raised outside
    """The server refused a form of the request that the provider has now changed."""


class OpenAIProvider:
    """A ModelProvider for an OpenAI-compatible Chat Completions server."""

    def __init__(
        self,
        *,
        name: str,
        api_key: str | None,
        base_url: str = DEFAULT_OPENAI_BASE_URL,
        structured_output: str = "json_schema",
        stream: bool = True,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = name
        host = urlsplit(base_url).hostname or ""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if api_key and host.endswith(_AZURE_HOST):
            headers["api-key"] = api_key  # Azure's own header, beside the bearer its v1 takes
        self._api = HttpApi(
            provider=f"{_LABEL} provider {name!r}",
            base_url=base_url,
            headers=headers,
            request_id_header="x-request-id",
            max_connections=max_connections,
            transport=transport,
        )
        self._stream = stream
        schema_mode = structured_output != "json_object"
        # What this server has shown it takes; only ever weakened, never strengthened.
        self._form = _Form(
            mode=OutputMode.JSON_SCHEMA if schema_mode else OutputMode.JSON_OBJECT,
            tokens_param=(
                "max_completion_tokens" if host.endswith(_COMPLETION_TOKENS_HOSTS) else "max_tokens"
            ),
            stream_options=True,
        )

    @property
    def name(self) -> str:
        return self._name

    @property
    def output_mode(self) -> OutputMode:
        return self._form.mode

    async def aclose(self) -> None:
        await self._api.aclose()

    async def check(self) -> None:
        """``GET {base_url}/models``: reachable, and the key is taken."""
        await self._api.get("models", timeout_seconds=_CHECK_TIMEOUT_SECONDS)

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        # Each refusal weakens one setting for good, so this ends within a few rounds.
        for _ in range(len(OutputMode) + 3):
            try:
                return await self._invoke_once(request, timeout_seconds)
            except _AskAgain:
                continue
        raise malformed(self._api_label, "a refusal of every form of the request", None)

    @property
    def _api_label(self) -> str:
        return f"{_LABEL} provider {self._name!r}"

    async def _invoke_once(self, request: ModelRequest, timeout_seconds: float) -> ModelResponse:
        form = self._form
        reader = _ChatReader(self._api_label)
        answer = await self._api.post(
            "chat/completions",
            self._body(request, form),
            timeout_seconds=timeout_seconds,
            sink=reader.feed if self._stream else None,
            on_rejected=functools.partial(self._on_rejected, form),
        )
        if answer.body is not None:
            reader.read_whole(answer.body, answer.request_id)
        elif not reader.finished:
            raise ProviderServerError(
                f"{self._api_label}: the stream ended before the answer did",
                provider_request_id=answer.request_id or reader.completion_id,
            )
        return reader.response(request, answer)

    def _body(self, request: ModelRequest, form: _Form) -> dict[str, Any]:
        system = request.system
        if form.mode is not OutputMode.JSON_SCHEMA:
            system = with_instruction(system, schema_instruction(request.output_schema))
        messages: list[dict[str, str]] = []
        if system:
            messages.append({"role": "system", "content": system})
        messages.append({"role": "user", "content": request.prompt})
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.max_tokens is not None:
            body[form.tokens_param] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if form.mode is OutputMode.JSON_SCHEMA:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request.task),
                    "schema": request.output_schema,
                    "strict": strict_compatible(request.output_schema),
                },
            }
        elif form.mode is OutputMode.JSON_OBJECT:
            body["response_format"] = {"type": "json_object"}
        if self._stream:
            body["stream"] = True
            if form.stream_options:
                body["stream_options"] = {"include_usage": True}
        return body

    def _on_rejected(
        self, sent: _Form, status: int, body: ErrorBody, text: str
    ) -> Exception | None:
        """Weaken the one setting a refusal names, if it names one we can do without.

        ``sent`` is the form the refused call used: calls running at once that are all
        refused for the same reason weaken the setting once, not once each.
        """
        if status not in (400, 422):
            return None
        said = f"{body.param or ''} {body.code or ''} {text}"
        refused = any(word in said for word in _UNSUPPORTED_WORDS)
        if self._stream and sent.stream_options and "stream_options" in said:
            return self._weaken(stream_options=False)
        if refused and sent.tokens_param in said:
            other = "max_tokens" if sent.tokens_param != "max_tokens" else "max_completion_tokens"
            return self._weaken(tokens_param=other)
        if ("response_format" in said or "json_schema" in said) and (
            sent.mode is not OutputMode.PROMPT
        ):
            return self._weaken(mode=max(self._form.mode, OutputMode(sent.mode + 1)))
        return None

    def _weaken(self, **change: Any) -> _AskAgain:
        weaker = dataclasses.replace(self._form, **change)
        if weaker != self._form:
            self._form = weaker
            # Identifiers only: which provider, what changed. Never the request.
            log.warning(
                "provider.request_form_weakened",
                provider=self._name,
                change=", ".join(f"{k}={getattr(weaker, k)!s}" for k in change),
            )
        return _AskAgain()


@dataclass(slots=True)
class _ChatReader:
    """Gathers one answer, from stream events or from a whole body."""

    label: str
    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    finish: str | None = None
    model: str | None = None
    completion_id: str | None = None
    usage: dict[str, Any] = field(default_factory=dict)
    done: bool = False

    @property
    def finished(self) -> bool:
        return self.done or self.finish is not None

    def feed(self, event: SseEvent) -> None:
        if event.data.strip() == "[DONE]":
            self.done = True
            return
        chunk = json_event(event, self.label, None)
        if chunk.get("error"):
            raise error_for_type(
                parse_error_body(event.data.encode("utf-8"))[0],
                provider=self.label,
                request_id=None,
            )
        self._note_identity(chunk)
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        choices = chunk.get("choices") or []
        if not isinstance(choices, list):
            raise malformed(self.label, "choices is not a list", None)
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._take_delta(choice)

    def _take_delta(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise malformed(self.label, "a delta that is not an object", None)
        if isinstance(delta.get("content"), str):
            self.text.append(delta["content"])
        if isinstance(delta.get("refusal"), str):
            self.refusal.append(delta["refusal"])
        if isinstance(choice.get("finish_reason"), str):
            self.finish = choice["finish_reason"]

    def read_whole(self, body: dict[str, Any], request_id: str | None) -> None:
        choices = body.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise malformed(self.label, "no choices", request_id)
        message = choices[0].get("message")
        if not isinstance(message, dict):
            raise malformed(self.label, "a choice without a message", request_id)
        self._note_identity(body)
        content = message.get("content")
        if isinstance(content, list):  # some servers answer in content parts
            content = "".join(
                p.get("text", "")
                for p in content
                if isinstance(p, dict) and p.get("type") == "text"
            )
        if content is not None and not isinstance(content, str):
            raise malformed(self.label, "message content that is not text", request_id)
        self.text = [content or ""]
        if isinstance(message.get("refusal"), str):
            self.refusal = [message["refusal"]]
        finish = choices[0].get("finish_reason")
        self.finish = finish if isinstance(finish, str) else None
        usage = body.get("usage")
        self.usage = usage if isinstance(usage, dict) else {}
        self.done = True

    def _note_identity(self, chunk: dict[str, Any]) -> None:
        if self.model is None:
            self.model = provider_token(chunk.get("model"))
        if self.completion_id is None:
            self.completion_id = provider_token(chunk.get("id"))

    def response(self, request: ModelRequest, answer: Answer) -> ModelResponse:
        request_id = answer.request_id or self.completion_id
        if "".join(self.refusal).strip() or self.finish == "content_filter":
            # The refusal's wording is model output: it is not repeated here.
            what = "a refusal" if self.refusal else "finish_reason content_filter"
            raise SafetyRejectedError(
                f"{self.label}: the model declined ({what})", provider_request_id=request_id
            )
        reason = _FINISH.get(self.finish or "", FinishReason.OTHER)
        return ModelResponse(
            text="".join(self.text),
            input_tokens=_tokens(self.usage, "prompt_tokens"),
            output_tokens=_tokens(self.usage, "completion_tokens"),
            provider_request_id=request_id,
            model=self.model or request.model,
            finish_reason=reason,
            finish_detail=provider_token(self.finish),
        )


def _tokens(usage: dict[str, Any], key: str) -> int | None:
    # A server that reports no usage (no include_usage support): unknown, not 0.
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None
