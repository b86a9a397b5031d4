"""Refusals that only exist at the HTTP edge (the rest live in core/errors.py)."""

from __future__ import annotations

from ferryman.core.errors import FerrymanError, RequestError


class RateLimitedError(RequestError):
    """Too many requests for this tenant; slow down and retry after the given time."""

    code = "rate_limited"

    def __init__(self, message: str | None = None, *, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class UnsupportedMediaTypeError(RequestError):
    """The request body must be JSON: send Content-Type: application/json."""

    code = "unsupported_media_type"


class RequestTimeoutError(RequestError):
    """The request body did not arrive in time; send it again, faster."""

    code = "request_timeout"


class TooManyConnectionsError(FerrymanError):
    """The server is at its connection limit; try again shortly."""

    code = "too_many_connections"
    retry_after_seconds = 1
