"""What the edge knows about a request, filled in as it is handled: what the log line
needs (correlation id, tenant, job) and the headers every response to it carries
(the access log middleware adds them, whichever layer answers)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.core.ids import new_correlation_id

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.types import Scope

CORRELATION_HEADER = "X-Correlation-Id"
_SCOPE_KEY = "ferryman.request"
# A caller's id is echoed in headers and logs, so only short printable tokens are taken.
_CORRELATION_RE = re.compile(r"[\x21-\x7e]{1,128}")


@dataclass(slots=True)
class RequestInfo:
    correlation_id: str
    tenant_id: str | None = None
    job_id: str | None = None
    response_headers: list[tuple[str, str]] = field(default_factory=list)


def correlation_id_from(value: str | None) -> str:
    """The caller's X-Correlation-Id when it is usable, otherwise a new one."""
    if value is not None and _CORRELATION_RE.fullmatch(value):
        return value
    return new_correlation_id()


def attach(scope: Scope, info: RequestInfo) -> None:
    scope[_SCOPE_KEY] = info


def request_info(request: Request) -> RequestInfo:
    info = request.scope.get(_SCOPE_KEY)
    if not isinstance(info, RequestInfo):
        # Only reachable when the app runs without its middleware (a bare router in a test).
        info = RequestInfo(correlation_id_from(request.headers.get(CORRELATION_HEADER)))
        attach(request.scope, info)
    return info


_TRACEPARENT_RE = re.compile(
    r"(?P<version>[0-9a-f]{2})-(?P<trace>[0-9a-f]{32})-(?P<parent>[0-9a-f]{16})-[0-9a-f]{2}(?P<rest>-.*)?"
)


def valid_traceparent(value: str | None) -> str | None:
    """The W3C traceparent when well formed; otherwise None, since the spec says a
    malformed one is ignored (a new trace starts) rather than refused."""
    if value is None or len(value) > 512:
        return None
    match = _TRACEPARENT_RE.fullmatch(value.strip())
    if match is None or match["version"] == "ff":
        return None
    if match["version"] == "00" and match["rest"]:
        return None
    if set(match["trace"]) == {"0"} or set(match["parent"]) == {"0"}:
        return None
    return value.strip()
