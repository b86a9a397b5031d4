"""Anthropic's Messages API (``POST /v1/messages``) over httpx.

Structured output goes through one tool: its ``input_schema`` is the task's output
schema and ``tool_choice: {"type": "tool", "name": ...}`` makes the model call it, so
the tool call's input *is* the answer (its JSON text goes back to the worker, which
validates it). A model that answers in text instead is passed on as text, for the
worker to judge.

Streamed by default: the tool input arrives as ``input_json_delta`` pieces, and every
event (``ping`` included) counts as progress. ``stop_reason`` maps as follows:
``tool_use``/``end_turn``/``stop_sequence`` are a complete answer, ``max_tokens`` and
``model_context_window_exceeded`` a cut-off one (FinishReason.LENGTH, the partial
input kept as text), ``refusal`` a SafetyRejectedError.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

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
    schema_name,
    tool_answer_from_json_text,
    tool_answer_text,
    tool_input_schema,
)

if TYPE_CHECKING:
    import httpx

    from ferryman.ports.provider import ModelRequest
    from ferryman.providers.sse import SseEvent

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
# The Messages API requires max_tokens; a task that sets none gets this many.
DEFAULT_MAX_TOKENS = 4096
_CHECK_TIMEOUT_SECONDS = 10.0
_FINISH = {
    "tool_use": FinishReason.COMPLETE,
    "end_turn": FinishReason.COMPLETE,
    "stop_sequence": FinishReason.COMPLETE,
    "max_tokens": FinishReason.LENGTH,
    "model_context_window_exceeded": FinishReason.LENGTH,
}


class AnthropicProvider:
    """A ModelProvider for Anthropic's Messages API."""

    def __init__(
        self,
        *,
        name: str,
        api_key: str,
        base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        stream: bool = True,
        max_connections: int = 64,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._name = name
        self._label = f"anthropic provider {name!r}"
        self._api = HttpApi(
            provider=self._label,
            base_url=base_url.rstrip("/") + "/v1",
            headers={"x-api-key": api_key, "anthropic-version": ANTHROPIC_VERSION},
            request_id_header="request-id",
            max_connections=max_connections,
            transport=transport,
        )
        self._stream = stream
        self._default_max_tokens = default_max_tokens

    @property
    def name(self) -> str:
        return self._name

    async def aclose(self) -> None:
        await self._api.aclose()

    async def check(self) -> None:
        """``GET /v1/models``: reachable, and the key is taken."""
        await self._api.get("models", timeout_seconds=_CHECK_TIMEOUT_SECONDS)

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        schema, wrapped = tool_input_schema(request.output_schema)
        tool = schema_name(request.task)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or self._default_max_tokens,
            "messages": [{"role": "user", "content": request.prompt}],
            "tools": [
                {
                    "name": tool,
                    "description": "Give your answer as this tool's input.",
                    "input_schema": schema,
                }
            ],
            "tool_choice": {"type": "tool", "name": tool},
        }
        if request.system:
            body["system"] = request.system
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if self._stream:
            body["stream"] = True
        reader = _MessageReader(self._label, tool=tool, wrapped=wrapped)
        answer = await self._api.post(
            "messages",
            body,
            timeout_seconds=timeout_seconds,
            sink=reader.feed if self._stream else None,
        )
        if answer.body is not None:
            reader.read_whole(answer.body, answer.request_id)
        elif not reader.stopped:
            raise ProviderServerError(
                f"{self._label}: the stream ended before message_stop",
                provider_request_id=answer.request_id or reader.message_id,
            )
        return reader.response(request, answer)


@dataclass(slots=True)
class _MessageReader:
    """Gathers one message, from stream events or from a whole body."""

    label: str
    tool: str
    wrapped: bool
    message_id: str | None = None
    model: str | None = None
    stop_reason: str | None = None
    # None until the answer reports them (unknown if it never does, never 0).
    input_tokens: int | None = None
    output_tokens: int | None = None
    # Per content block index: its type and its text (tool input JSON, or plain text).
    kinds: dict[int, str] = field(default_factory=dict)
    parts: dict[int, list[str]] = field(default_factory=dict)
    answer: str | None = None
    stopped: bool = False

    def feed(self, event: SseEvent) -> None:
        data = json_event(event, self.label, None)
        kind = data.get("type", event.event)
        if kind == "error":
            raise error_for_type(
                parse_error_body(event.data.encode("utf-8"))[0],
                provider=self.label,
                request_id=None,
            )
        if kind == "message_start":
            self._start(data.get("message"))
        elif kind == "content_block_start":
            block = data.get("content_block") or {}
            self.kinds[_index(data)] = block.get("type", "") if isinstance(block, dict) else ""
            self.parts.setdefault(_index(data), [])
        elif kind == "content_block_delta":
            self._delta(_index(data), data.get("delta"))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]
            self._usage(data.get("usage"))
        elif kind == "message_stop":
            self.stopped = True
        # ping, content_block_stop and event types added later carry nothing we need.

    def _start(self, message: Any) -> None:
        if not isinstance(message, dict):
            raise malformed(self.label, "message_start without a message", None)
        self.message_id = provider_token(message.get("id"))
        self.model = provider_token(message.get("model"))
        self._usage(message.get("usage"))

    def _delta(self, index: int, delta: Any) -> None:
        if not isinstance(delta, dict):
            raise malformed(self.label, "a content_block_delta without a delta", None)
        piece = delta.get("partial_json") if delta.get("type") == "input_json_delta" else None
        if piece is None and delta.get("type") == "text_delta":
            piece = delta.get("text")
        if isinstance(piece, str):
            self.parts.setdefault(index, []).append(piece)

    def _usage(self, usage: Any) -> None:
        # Counts in message_delta are cumulative, so the latest one is the total.
        if isinstance(usage, dict):
            for key in ("input_tokens", "output_tokens"):
                value = usage.get(key)
                if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
                    setattr(self, key, value)

    def read_whole(self, body: dict[str, Any], request_id: str | None) -> None:
        content = body.get("content")
        if body.get("type") != "message" or not isinstance(content, list):
            raise malformed(self.label, "not a message with content", request_id)
        self._start(body)
        self.stop_reason = (
            body.get("stop_reason") if isinstance(body.get("stop_reason"), str) else None
        )
        texts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and block.get("name") == self.tool:
                self.answer = tool_answer_text(block.get("input", {}), wrapped=self.wrapped)
                break
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                texts.append(block["text"])
        if self.answer is None:
            self.answer = "".join(texts)
        self.stopped = True

    def _streamed_answer(self) -> str:
        tool_blocks = [i for i, kind in sorted(self.kinds.items()) if kind == "tool_use"]
        if tool_blocks:
            raw = "".join(self.parts.get(tool_blocks[0], [])) or "{}"
            if self.stop_reason in ("max_tokens", "model_context_window_exceeded"):
                return raw  # cut off: kept exactly as it came, for the worker to keep
            return tool_answer_from_json_text(raw, wrapped=self.wrapped)
        return "".join(
            "".join(self.parts.get(i, []))
            for i, kind in sorted(self.kinds.items())
            if kind == "text"
        )

    def response(self, request: ModelRequest, answer: Answer) -> ModelResponse:
        request_id = answer.request_id or self.message_id
        if self.stop_reason == "refusal":
            raise SafetyRejectedError(
                f"{self.label}: the model declined (stop_reason refusal)",
                provider_request_id=request_id,
            )
        text = self.answer if self.answer is not None else self._streamed_answer()
        reason = _FINISH.get(self.stop_reason or "", FinishReason.OTHER)
        return ModelResponse(
            text=text,
            input_tokens=self.input_tokens,
            output_tokens=self.output_tokens,
            provider_request_id=request_id,
            model=self.model or request.model,
            finish_reason=reason,
            finish_detail=provider_token(self.stop_reason),
        )


def _index(data: dict[str, Any]) -> int:
    index = data.get("index", 0)
    return index if isinstance(index, int) else 0
