"""One structured log line per request, and the last word on unexpected errors.

The line names the route template, never the raw path's query or any body, so
it holds identifiers only: method, route, status, duration, tenant, job,
correlation id. An exception no handler claimed becomes a 500 problem that says
nothing about its cause; the cause goes to the log, summarised as
observability/logging.py allows (type and frames, never locals).

A client that hangs up before its request was read is normal on the internet,
not a server error: it is logged as status 499 (the convention nginx made
common) with ``outcome=client_disconnected``, and nothing is sent back.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from starlette.requests import ClientDisconnect

from ferryman.http.context import CORRELATION_HEADER, RequestInfo, attach, correlation_id_from
from ferryman.http.error_map import internal_error_response
from ferryman.observability.logging import enabled, get_logger

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

_log = get_logger("ferryman.http")

CLIENT_CLOSED_REQUEST = 499


class AccessLogMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        info = RequestInfo(correlation_id_from(_header(scope, _CORRELATION_KEY)))
        attach(scope, info)
        status = 500
        outcome: str | None = None
        started = False
        began = time.perf_counter()

        async def send_with_id(message: Message) -> None:
            nonlocal status, started
            if message["type"] == "http.response.start":
                started = True
                status = message["status"]
                _add_headers(message, info)
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except ClientDisconnect:
            # Whatever was being read is gone, and so is the one who could read an answer.
            status, outcome = CLIENT_CLOSED_REQUEST, "client_disconnected"
        except Exception:
            _log.error("unhandled error", exc_info=True, **_fields(scope, info))
            if started:
                raise
            await internal_error_response()(scope, receive, send_with_id)
        finally:
            # The line's fields are built only when it would be written (at WARNING, the
            # benchmarks' level, it is not: a few microseconds of every request).
            if enabled(logging.INFO):
                _log_request(scope, info, status, outcome, began)


def _log_request(
    scope: Scope, info: RequestInfo, status: int, outcome: str | None, began: float
) -> None:
    duration_ms = round((time.perf_counter() - began) * 1000, 2)
    fields = _fields(scope, info)
    if outcome is not None:
        fields["outcome"] = outcome
    _log.info("request", status=status, duration_ms=duration_ms, **fields)


def _header(scope: Scope, key: bytes) -> str | None:
    """``Headers(scope=scope).get(name)`` without copying the list (ASGI names are lower case)."""
    for name, value in scope["headers"]:
        if name == key:
            return str(value.decode("latin-1"))
    return None


def _add_headers(message: Message, info: RequestInfo) -> None:
    """What ``MutableHeaders(scope=message)`` would do, set the correlation id (in place of
    any the app set) and append the request's headers, without its per-call overhead."""
    raw: list[tuple[bytes, bytes]] = list(message["headers"])
    value = info.correlation_id.encode("latin-1")
    found = [i for i, (name, _) in enumerate(raw) if name == _CORRELATION_KEY]
    for i in reversed(found[1:]):
        del raw[i]
    if found:
        raw[found[0]] = (_CORRELATION_KEY, value)
    else:
        raw.append((_CORRELATION_KEY, value))
    for name, text in info.response_headers:
        raw.append((name.lower().encode("latin-1"), text.encode("latin-1")))
    message["headers"] = raw


_CORRELATION_KEY = CORRELATION_HEADER.lower().encode("latin-1")


def _fields(scope: Scope, info: RequestInfo) -> dict[str, Any]:
    path_params = scope.get("path_params") or {}
    return {
        "method": scope.get("method"),
        "route": _route_template(scope),
        "tenant_id": info.tenant_id,
        # A path parameter is whatever the caller typed: keep it short in the log.
        "job_id": info.job_id or str(path_params.get("job_id", ""))[:64] or None,
        "correlation_id": info.correlation_id,
    }


def _route_template(scope: Scope) -> str:
    template = getattr(scope.get("route"), "path", None)
    if isinstance(template, str):
        return template
    # Plain Starlette routes (/openapi.json, /docs) leave only their endpoint behind;
    # their path is fixed, so it is the template. An unmatched path is the caller's text.
    if scope.get("endpoint") is not None:
        return str(scope.get("path", ""))
    return "<unmatched>"
