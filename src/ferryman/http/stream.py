"""Server-sent events of a followed job: ``GET /v1/generations/{id}/stream``.

Each status the follower has not seen is one event::

    id: 7-PROCESSING
    event: status
    data: {"job_id": "gen_...", "status": "PROCESSING", ...}

``data`` is the job exactly as ``GET /v1/generations/{id}`` answers it. The id is the
job's revision and status: a client that reconnects sends it back as
``Last-Event-ID`` and is sent only what is news to it (services/jobs.py's
``Position``), never a status again, and never nothing when the job finished
meanwhile. An id this server did not make is read as no id (the job as it is now).
Between events a comment line keeps proxies from closing an idle connection. The
stream ends after the finished status, or after services/jobs.py's
FOLLOW_MAX_SECONDS (the client reconnects with its last id, as EventSource does by
itself after ``retry`` milliseconds).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ferryman.core.job import JobStatus
from ferryman.http.views import job_detail_body, json_bytes
from ferryman.services.jobs import Position

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from ferryman.core.job import Job
    from ferryman.services.jobs import JobView

# No cache may keep or buffer the stream (nginx buffers unless told not to).
EVENT_STREAM_HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
# How long an EventSource waits before it reconnects after the stream ends.
RETRY_MILLISECONDS = 1000
KEEP_ALIVE = b": keep-alive\n\n"
_EVENT_ID = re.compile(r"([0-9]{1,18})-([A-Z_]{1,32})")
_LINES = re.compile(rb"\r\n|\r|\n")


def event_id(job: Job) -> str:
    return f"{job.revision}-{job.status}"


def position_of(last_event_id: str | None) -> Position | None:
    """What a ``Last-Event-ID`` says the client was sent; None for none, or for an id
    this server did not make."""
    if last_event_id is None:
        return None
    match = _EVENT_ID.fullmatch(last_event_id.strip())
    if match is None:
        return None
    try:
        status = JobStatus(match.group(2))
    except ValueError:
        return None
    return Position(status=status, revision=int(match.group(1)))


def _frame(view: JobView | None) -> bytes:
    return KEEP_ALIVE if view is None else status_event(view)


def status_event(view: JobView) -> bytes:
    body = json_bytes(job_detail_body(view))
    # A stored result is spliced as it is: any line break in it becomes a data line of
    # its own, which the client joins back with a newline (the same JSON).
    data = b"".join(b"data: " + line + b"\n" for line in _LINES.split(body))
    return f"id: {event_id(view.job)}\nevent: status\n".encode() + data + b"\n"


async def event_stream(
    first: JobView | None, rest: AsyncIterator[JobView | None]
) -> AsyncIterator[bytes]:
    """An event per view, ``first`` then ``rest`` (None: a keep-alive comment)."""
    try:
        yield f"retry: {RETRY_MILLISECONDS}\n\n".encode() + _frame(first)
        async for view in rest:
            yield _frame(view)
    finally:
        # The client went away (the task was cancelled) or the stream ended: the wait
        # on the watcher ends here, not when the generator is collected.
        aclose = getattr(rest, "aclose", None)
        if aclose is not None:
            await aclose()
