"""The only place that maps errors to HTTP status codes, and renders them as problems.

Every 4xx/5xx answer is RFC 9457 ``application/problem+json``:
``{"type", "title", "status", "detail", "code"}``, plus ``errors`` for validation.
A class not in the table is found through its bases; anything that is not a
FerrymanError (or a FerrymanError no entry covers) is a 500 whose body says
nothing about what went wrong.

Every answer that asks the caller to come back later (429, 503) says when, in
Retry-After: the error's own ``retry_after_seconds`` when it carries one, else
the default for its class below.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse

from ferryman.core.errors import (
    AlreadyTerminalError,
    ApiKeyNotFoundError,
    AuthenticationError,
    BackendUnavailableError,
    BacklogQuotaExceededError,
    DeadLetterNotFoundError,
    FerrymanError,
    ForbiddenError,
    IdempotencyKeyMismatchError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    JobNotFoundError,
    PausedError,
    PayloadTooLargeError,
    QueueUnavailableError,
    RequestError,
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
    StorageQuotaExceededError,
    StoreUnavailableError,
    UnsupportedFieldError,
    WebhookSecretRequiredError,
    WebhookSecretUnreadableError,
    WebhookUrlRefusedError,
)
from ferryman.http.errors import (
    RateLimitedError,
    RequestTimeoutError,
    TooManyConnectionsError,
    UnsupportedMediaTypeError,
)

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from fastapi import FastAPI
    from starlette.requests import Request

PROBLEM_MEDIA_TYPE = "application/problem+json"
PROBLEM_TYPE_BASE = "https://ferryman.dev/problems/"

STATUS_TABLE: dict[type[FerrymanError], tuple[int, str]] = {
    InvalidRequestError: (422, "Invalid request"),
    IdempotencyKeyMismatchError: (422, "Idempotency-Key reused with a different request"),
    InvalidIdempotencyKeyError: (400, "Invalid Idempotency-Key header"),
    UnsupportedFieldError: (422, "Unsupported field"),
    WebhookUrlRefusedError: (422, "Webhook URL refused"),
    WebhookSecretRequiredError: (422, "Webhook signing secret required"),
    PayloadTooLargeError: (413, "Request body too large"),
    UnsupportedMediaTypeError: (415, "Unsupported media type"),
    RequestTimeoutError: (408, "Request timeout"),
    AuthenticationError: (401, "Authentication required"),
    ForbiddenError: (403, "Forbidden"),
    RateLimitedError: (429, "Too many requests"),
    BacklogQuotaExceededError: (429, "Backlog quota exceeded"),
    StorageQuotaExceededError: (507, "Storage quota exceeded"),
    RequestError: (400, "Bad request"),
    JobNotFoundError: (404, "Not found"),
    ApiKeyNotFoundError: (404, "Not found"),
    DeadLetterNotFoundError: (404, "Not found"),
    AlreadyTerminalError: (409, "Job already finished"),
    StateConflictError: (409, "Conflict"),
    PausedError: (503, "Intake paused"),
    StoreUnavailableError: (503, "Service unavailable"),
    QueueUnavailableError: (503, "Queue unavailable"),
    ResultsUnavailableError: (503, "Result store unavailable"),
    BackendUnavailableError: (503, "Service unavailable"),
    ResultUnreadableError: (500, "Stored result unreadable"),
    WebhookSecretUnreadableError: (500, "Webhook signing secret unreadable"),
    TooManyConnectionsError: (503, "Too many connections"),
}

# Seconds a caller should wait, for errors that do not carry their own figure.
RETRY_AFTER_SECONDS: dict[type[FerrymanError], int] = {
    RateLimitedError: 1,
    BacklogQuotaExceededError: 30,
    PausedError: 30,
    BackendUnavailableError: 5,
    TooManyConnectionsError: 1,
}

# Starlette's own refusals (no route, wrong method), by status.
_HTTP_CODES: dict[int, tuple[str, str]] = {
    404: ("not_found", "Not found"),
    405: ("method_not_allowed", "Method not allowed"),
}


def status_for(exc: FerrymanError) -> tuple[int, str] | None:
    """The status and title for this error, or None when it is an internal error."""
    for cls in type(exc).__mro__:
        entry = STATUS_TABLE.get(cls)
        if entry is not None:
            return entry
    return None


def retry_after_for(exc: FerrymanError) -> int | None:
    """Whole seconds for Retry-After (at least 1), or None when the error has none."""
    default = next(
        (RETRY_AFTER_SECONDS[c] for c in type(exc).__mro__ if c in RETRY_AFTER_SECONDS), None
    )
    if default is None:
        return None
    own = getattr(exc, "retry_after_seconds", None)
    seconds = own if isinstance(own, int | float) and own > 0 else default
    return max(1, math.ceil(seconds))


def problem_response(
    *,
    status: int,
    title: str,
    code: str,
    detail: str,
    errors: Iterable[Mapping[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    body = _problem(status=status, title=title, code=code, detail=detail, errors=errors)
    return JSONResponse(body, status_code=status, headers=headers, media_type=PROBLEM_MEDIA_TYPE)


def _problem(
    *, status: int, title: str, code: str, detail: str, errors: Iterable[Mapping[str, Any]] | None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
    }
    if errors is not None:
        body["errors"] = [{"loc": list(e["loc"]), "msg": str(e["msg"])} for e in errors]
    return body


def problem_body(exc: FerrymanError) -> dict[str, Any]:
    """The problem object a refused request gets, as a value: what one item of a batch
    answers (inside a 200), the same status and code as if it were sent alone (or, for
    an item a failing store did not take, that failure's 503)."""
    status, title = status_for(exc) or (400, "Bad request")
    errors = exc.errors if isinstance(exc, InvalidRequestError) else None
    return _problem(status=status, title=title, code=exc.code, detail=exc.message, errors=errors)


def render_error(exc: FerrymanError) -> JSONResponse:
    entry = status_for(exc)
    if entry is None:
        return internal_error_response()
    status, title = entry
    headers: dict[str, str] = {}
    if isinstance(exc, AuthenticationError):
        headers["WWW-Authenticate"] = "Bearer"
    retry_after = retry_after_for(exc)
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if isinstance(exc, RequestTimeoutError | TooManyConnectionsError):
        # The rest of this request (or this connection) is not worth reading.
        headers["Connection"] = "close"
    errors = exc.errors if isinstance(exc, InvalidRequestError) else None
    return problem_response(
        status=status,
        title=title,
        code=exc.code,
        detail=exc.message,
        errors=errors,
        headers=headers,
    )


def render_validation_error(exc: RequestValidationError) -> JSONResponse:
    # Only loc and msg go out: pydantic's "input" and "ctx" would echo customer data.
    errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
    return problem_response(
        status=422,
        title="Invalid request",
        code=InvalidRequestError.code,
        detail="The request is not valid.",
        errors=errors,
    )


def render_http_exception(exc: StarletteHTTPException) -> JSONResponse:
    code, title = _HTTP_CODES.get(exc.status_code, ("http_error", "HTTP error"))
    detail = exc.detail if isinstance(exc.detail, str) else title
    return problem_response(
        status=exc.status_code, title=title, code=code, detail=detail, headers=exc.headers
    )


def internal_error_response() -> JSONResponse:
    return problem_response(
        status=500,
        title="Internal server error",
        code="internal_error",
        detail="An unexpected error occurred; it has been logged.",
    )


async def _ferryman_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FerrymanError)
    return render_error(exc)


async def _validation_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return render_validation_error(exc)


async def _http_handler(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    return render_http_exception(exc)


def install_error_handlers(app: FastAPI) -> None:
    """Route every known error through this table. Unexpected exceptions are turned
    into a 500 by the outermost middleware (http/access_log.py), which also logs them."""
    app.add_exception_handler(FerrymanError, _ferryman_handler)
    app.add_exception_handler(RequestValidationError, _validation_handler)
    app.add_exception_handler(StarletteHTTPException, _http_handler)
