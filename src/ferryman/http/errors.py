"""Refusals that only exist at the HTTP edge (the rest live in core/errors.py)."""

from __future__ import annotations

from ferryman.core.errors import RequestError


class RateLimitedError(RequestError):
    """Too many requests for this tenant; slow down and retry after the given time."""

    code = "rate_limited"

    def __init__(self, message: str | None = None, *, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class UnsupportedMediaTypeError(RequestError):
    """The request body must be JSON: send Content-Type: application/json."""

    code = "unsupported_media_type"
