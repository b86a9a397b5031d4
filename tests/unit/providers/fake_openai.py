"""A local server speaking OpenAI's Chat Completions wire format, scripted per call.

Shapes follow OpenAI's API reference: a ``chat.completion`` object (choices[].message
with content and refusal, finish_reason, usage, id, model), ``chat.completion.chunk``
events ended by ``data: [DONE]`` (usage in a last chunk with no choices when
``stream_options.include_usage`` is set), errors as ``{"error": {"message", "type",
"param", "code"}}`` with ``x-request-id``, and 429s with ``retry-after``,
``retry-after-ms`` and ``x-ratelimit-*`` headers.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

Reply = Callable[[dict[str, Any]], Response]
SERVED_MODEL = "gpt-4o-mini-2024-07-18"


def _headers(extra: dict[str, str] | None = None) -> dict[str, str]:
    return {"x-request-id": f"req_{uuid.uuid4().hex[:16]}", **(extra or {})}


def _sse(payloads: list[Any]) -> list[bytes]:
    return [f"data: {p if isinstance(p, str) else json.dumps(p)}\n\n".encode() for p in payloads]


def _stream(
    parts: list[bytes],
    *,
    gap: float = 0.0,
    stall_after: int | None = None,
    fail_after: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for i, part in enumerate(parts):
            if stall_after is not None and i == stall_after:
                await asyncio.Event().wait()  # never set: the server stalls
            if fail_after is not None and i == fail_after:
                raise ConnectionResetError("connection reset by peer")
            if gap:
                await asyncio.sleep(gap)
            yield part

    return StreamingResponse(body(), media_type="text/event-stream", headers=_headers(headers))


def answer(
    content: str | None = '{"ok": true}',
    *,
    finish: str = "stop",
    refusal: str | None = None,
    usage: tuple[int, int] | None = (11, 7),
    gap: float = 0.0,
    stall_after: int | None = None,
    fail_after: int | None = None,
    drop_end: bool = False,
    pieces: int = 3,
) -> Reply:
    """A successful answer, streamed when the request asked for a stream. ``usage``
    None: a server that reports no usage (no ``usage`` in its body, no usage chunk)."""

    def reply(body: dict[str, Any]) -> Response:
        completion_id = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        usage_block = (
            None
            if usage is None
            else {
                "prompt_tokens": usage[0],
                "completion_tokens": usage[1],
                "total_tokens": usage[0] + usage[1],
            }
        )
        if not body.get("stream"):
            message = {"role": "assistant", "content": content, "refusal": refusal}
            return JSONResponse(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": 1,
                    "model": SERVED_MODEL,
                    "choices": [
                        {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
                    ],
                    **({} if usage_block is None else {"usage": usage_block}),
                },
                headers=_headers(),
            )
        base = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": 1,
            "model": SERVED_MODEL,
        }
        chunks: list[Any] = [
            {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "finish_reason": None,
                    }
                ],
            }
        ]
        text = refusal if refusal is not None else (content or "")
        key = "refusal" if refusal is not None else "content"
        size = max(1, -(-len(text) // pieces))
        for start in range(0, len(text), size):
            chunks.append(
                {
                    **base,
                    "choices": [
                        {
                            "index": 0,
                            "delta": {key: text[start : start + size]},
                            "finish_reason": None,
                        }
                    ],
                }
            )
        if not drop_end:
            chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
            if usage_block is not None and (body.get("stream_options") or {}).get("include_usage"):
                chunks.append({**base, "choices": [], "usage": usage_block})
            chunks.append("[DONE]")
        return _stream(_sse(chunks), gap=gap, stall_after=stall_after, fail_after=fail_after)

    return reply


def error(
    status: int,
    type_: str | None,
    code: str | None = None,
    *,
    param: str | None = None,
    message: str = "error",
    headers: dict[str, str] | None = None,
) -> Reply:
    def reply(body: dict[str, Any]) -> Response:
        payload = {"error": {"message": message, "type": type_, "param": param, "code": code}}
        return JSONResponse(payload, status_code=status, headers=_headers(headers))

    return reply


def stream_error(type_: str, code: str | None = None) -> Reply:
    """A stream that starts well and then carries an error object."""

    def reply(body: dict[str, Any]) -> Response:
        base = {
            "id": "chatcmpl-x",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": SERVED_MODEL,
        }
        first = {
            **base,
            "choices": [{"index": 0, "delta": {"content": "{"}, "finish_reason": None}],
        }
        err = {
            "error": {
                "message": "The server had an error",
                "type": type_,
                "param": None,
                "code": code,
            }
        }
        return _stream(_sse([first, err]))

    return reply


def stall() -> Reply:
    """A server that takes the request and never answers."""

    def reply(body: dict[str, Any]) -> Response:
        async def never() -> AsyncIterator[bytes]:
            await asyncio.Event().wait()
            yield b""

        if body.get("stream"):
            return _stream(_sse([{"choices": []}]), stall_after=0)
        return StreamingResponse(never(), media_type="application/json", headers=_headers())

    return reply


def raw(status: int, content: bytes, media_type: str = "text/html") -> Reply:
    def reply(body: dict[str, Any]) -> Response:
        return Response(content, status_code=status, media_type=media_type, headers=_headers())

    return reply


@dataclass
class FakeOpenAI:
    """The server: each call takes the next scripted reply (the default one when none)."""

    replies: list[Reply] = field(default_factory=list)
    default: Reply = field(default_factory=answer)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    models_reply: Reply | None = None

    def then(self, *replies: Reply) -> FakeOpenAI:
        self.replies.extend(replies)
        return self

    def app(self, prefix: str = "/v1") -> Starlette:
        async def completions(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            self.headers.append(dict(request.headers))
            reply = self.replies.pop(0) if self.replies else self.default
            return reply(body)

        async def models(request: Request) -> Response:
            self.headers.append(dict(request.headers))
            if self.models_reply is not None:
                return self.models_reply({})
            return JSONResponse(
                {
                    "object": "list",
                    "data": [
                        {"id": SERVED_MODEL, "object": "model", "created": 1, "owned_by": "system"}
                    ],
                },
                headers=_headers(),
            )

        return Starlette(
            routes=[
                Route(f"{prefix}/chat/completions", completions, methods=["POST"]),
                Route(f"{prefix}/models", models, methods=["GET"]),
            ]
        )
