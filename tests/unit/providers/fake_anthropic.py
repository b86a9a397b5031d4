"""A local server speaking Anthropic's Messages API wire format, scripted per call.

Shapes follow Anthropic's API reference: a ``message`` object with content blocks
(``tool_use`` with its parsed ``input``, ``text``), ``stop_reason`` and ``usage``
(input_tokens, output_tokens); the streaming events ``message_start``,
``content_block_start``, ``ping``, ``content_block_delta`` (``input_json_delta`` with
``partial_json``), ``content_block_stop``, ``message_delta`` (stop_reason, cumulative
usage), ``message_stop`` and ``error``; errors as ``{"type": "error", "error": {"type",
"message"}, "request_id"}`` with a ``request-id`` header; 429 and 529 with
``retry-after``. A request without ``x-api-key`` or ``anthropic-version`` is refused
the way the API refuses it.
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
SERVED_MODEL = "claude-sonnet-4-20250514"


def _request_id() -> str:
    return f"req_{uuid.uuid4().hex[:20]}"


def _event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _usage(reported: bool, **block: int) -> dict[str, Any]:
    """A ``usage`` entry, or nothing for a server that reports no usage."""
    return {"usage": block} if reported else {}


def message(
    answer: str | None = '{"ok": true}',
    *,
    stop_reason: str = "tool_use",
    usage: tuple[int, int] | None = (21, 9),
    text: str | None = None,
    gap: float = 0.0,
    stall_after: int | None = None,
    fail_after: int | None = None,
    drop_end: bool = False,
) -> Reply:
    """A message whose forced tool call carries ``answer`` (JSON text, possibly cut off).
    ``usage`` None: a server that reports no usage at all (every usage block left out)."""

    reported = usage is not None
    used = usage or (0, 0)

    def reply(body: dict[str, Any]) -> Response:
        tool = body["tool_choice"]["name"]
        message_id = f"msg_{uuid.uuid4().hex[:20]}"
        headers = {"request-id": _request_id()}
        if not body.get("stream"):
            content: list[dict[str, Any]] = []
            if text is not None:
                content.append({"type": "text", "text": text})
            if answer is not None:
                try:
                    parsed = json.loads(answer)
                except ValueError:
                    parsed = {}  # a cut-off input arrives as whatever parsed
                content.append(
                    {"type": "tool_use", "id": "toolu_01", "name": tool, "input": parsed}
                )
            return JSONResponse(
                {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": SERVED_MODEL,
                    "content": content,
                    "stop_reason": stop_reason,
                    "stop_sequence": None,
                    **_usage(reported, input_tokens=used[0], output_tokens=used[1]),
                },
                headers=headers,
            )
        events = [
            _event(
                "message_start",
                {
                    "message": {
                        "id": message_id,
                        "type": "message",
                        "role": "assistant",
                        "model": SERVED_MODEL,
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        **_usage(reported, input_tokens=used[0], output_tokens=1),
                    }
                },
            )
        ]
        index = 0
        if text is not None:
            events += [
                _event(
                    "content_block_start",
                    {"index": index, "content_block": {"type": "text", "text": ""}},
                ),
                _event(
                    "content_block_delta",
                    {"index": index, "delta": {"type": "text_delta", "text": text}},
                ),
                _event("content_block_stop", {"index": index}),
            ]
            index += 1
        events.append(_event("ping", {}))
        if answer is not None:
            events.append(
                _event(
                    "content_block_start",
                    {
                        "index": index,
                        "content_block": {
                            "type": "tool_use",
                            "id": "toolu_01",
                            "name": tool,
                            "input": {},
                        },
                    },
                )
            )
            for start in range(0, len(answer), 8):
                events.append(
                    _event(
                        "content_block_delta",
                        {
                            "index": index,
                            "delta": {
                                "type": "input_json_delta",
                                "partial_json": answer[start : start + 8],
                            },
                        },
                    )
                )
            events.append(_event("content_block_stop", {"index": index}))
        if not drop_end:
            events.append(
                _event(
                    "message_delta",
                    {
                        "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                        **_usage(reported, output_tokens=used[1]),
                    },
                )
            )
            events.append(_event("message_stop", {}))
        return _stream(events, headers, gap=gap, stall_after=stall_after, fail_after=fail_after)

    return reply


def _stream(
    events: list[bytes],
    headers: dict[str, str],
    *,
    gap: float = 0.0,
    stall_after: int | None = None,
    fail_after: int | None = None,
) -> Response:
    async def body() -> AsyncIterator[bytes]:
        for i, event in enumerate(events):
            if stall_after is not None and i == stall_after:
                await asyncio.Event().wait()
            if fail_after is not None and i == fail_after:
                raise ConnectionResetError("connection reset by peer")
            if gap:
                await asyncio.sleep(gap)
            yield event

    return StreamingResponse(body(), media_type="text/event-stream", headers=headers)


def error(status: int, type_: str, *, headers: dict[str, str] | None = None) -> Reply:
    def reply(body: dict[str, Any]) -> Response:
        request_id = _request_id()
        payload = {
            "type": "error",
            "error": {"type": type_, "message": "error"},
            "request_id": request_id,
        }
        return JSONResponse(
            payload, status_code=status, headers={"request-id": request_id, **(headers or {})}
        )

    return reply


def stream_error(type_: str) -> Reply:
    """A stream that starts and then carries an error event (overloaded, say)."""

    def reply(body: dict[str, Any]) -> Response:
        events = [
            _event(
                "message_start",
                {
                    "message": {
                        "id": "msg_x",
                        "type": "message",
                        "role": "assistant",
                        "model": SERVED_MODEL,
                        "content": [],
                        "stop_reason": None,
                        "usage": {"input_tokens": 3, "output_tokens": 1},
                    }
                },
            ),
            _event("error", {"error": {"type": type_, "message": "Overloaded"}}),
        ]
        return _stream(events, {"request-id": _request_id()})

    return reply


def stall() -> Reply:
    def reply(body: dict[str, Any]) -> Response:
        return _stream([_event("ping", {})], {"request-id": _request_id()}, stall_after=0)

    return reply


@dataclass
class FakeAnthropic:
    replies: list[Reply] = field(default_factory=list)
    default: Reply = field(default_factory=message)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def then(self, *replies: Reply) -> FakeAnthropic:
        self.replies.extend(replies)
        return self

    def app(self) -> Starlette:
        def refused(request: Request) -> Response | None:
            if not request.headers.get("x-api-key"):
                return error(401, "authentication_error")({})
            if not request.headers.get("anthropic-version"):
                return error(400, "invalid_request_error")({})
            return None

        async def messages(request: Request) -> Response:
            body = await request.json()
            self.requests.append(body)
            refusal = refused(request)
            if refusal is not None:
                return refusal
            reply = self.replies.pop(0) if self.replies else self.default
            return reply(body)

        async def models(request: Request) -> Response:
            refusal = refused(request)
            if refusal is not None:
                return refusal
            if self.replies:
                return self.replies.pop(0)({})
            return JSONResponse(
                {
                    "data": [
                        {
                            "type": "model",
                            "id": SERVED_MODEL,
                            "display_name": "Claude",
                            "created_at": "2025-05-14T00:00:00Z",
                        }
                    ],
                    "has_more": False,
                    "first_id": SERVED_MODEL,
                    "last_id": SERVED_MODEL,
                }
            )

        return Starlette(
            routes=[
                Route("/v1/messages", messages, methods=["POST"]),
                Route("/v1/models", models, methods=["GET"]),
            ]
        )
