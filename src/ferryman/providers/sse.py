"""Server-sent events, as OpenAI-compatible servers and Anthropic stream their answers.

Only what these APIs use: ``event:`` and ``data:`` fields, events ended by a blank
line, comment lines (``:``, keep-alives) skipped. A ``data:`` field spread over several
lines is joined with newlines, as the format says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str | None
    data: str


async def sse_events(lines: AsyncIterator[str]) -> AsyncIterator[SseEvent]:
    """The events in a stream of lines (as ``httpx.Response.aiter_lines`` gives them)."""
    event: str | None = None
    data: list[str] = []
    async for raw in lines:
        line = raw.rstrip("\r\n")
        if not line:
            if data:
                yield SseEvent(event, "\n".join(data))
            event, data = None, []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:  # a last event without its blank line: the stream was cut, let the reader judge
        yield SseEvent(event, "\n".join(data))
