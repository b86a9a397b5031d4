"""From a provider's HTTP answer to one of ferryman's ProviderError classes.

Every HTTP provider (OpenAI-compatible, Anthropic) fails in the same few ways: a status
code with a JSON error body, a rate-limit hint in the headers, or no answer at all
(a timeout, a refused or reset connection). This module maps them once:

    429, 529 (Anthropic: overloaded)      ThrottledError         THROTTLED
    408, 409, 5xx, no answer, a reset     ProviderServerError /  TRANSIENT
                                          ProviderTimeoutError
    400, 404, 413, 422, any other 4xx     ProviderBadRequestError INVALID_REQUEST
    401, 403                              ProviderUnauthorizedError UNAUTHORIZED
    insufficient_quota (a 429), billing   AccountRefusedError    UNAUTHORIZED
    a content-filter code (Azure's 400)   SafetyRejectedError    SAFETY_REJECTED

A message names the provider, the status and the provider's own error type, code and
param: identifiers only. The provider's free-text message is never kept, because some
servers quote the offending input in it, and an error message must never carry a prompt.

Whatever else of a provider's answer ferryman keeps and shows a tenant (a request id, the
model that answered, why it stopped, an error's identifiers) passes ``provider_token``
first: a broken or hostile upstream cannot put megabytes, control characters or markup
into an attempt row, a job's error or a log line.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import email.utils
import json
import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ferryman.core.errors import (
    AccountRefusedError,
    ContextLengthExceededError,
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    ProviderUnauthorizedError,
    SafetyRejectedError,
    ThrottledError,
)

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

# Error codes that mean a content filter refused the prompt (Azure OpenAI answers 400).
_SAFETY_CODES = frozenset({"content_filter", "content_policy_violation"})
# Error types a provider sends in a body (or in a stream) when it sheds load.
_THROTTLE_TYPES = frozenset(
    {"rate_limit_error", "rate_limit_exceeded", "overloaded_error", "requests", "tokens"}
)
# A 429 that waiting cannot mend: the account has no quota or credit left. Retrying
# would only spend every queued job's attempts: like a refused key, it pauses the
# provider (AccountRefusedError), until an operator resumes it.
_ACCOUNT_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# How much of an error body is read: error bodies are small; a proxy's HTML page is not.
MAX_ERROR_BODY_BYTES = 64 * 1024
# Text from a provider kept only when it is an identifier of at most this many characters
# (request ids are 20-60 characters, model names rarely over 80); an error body's type,
# code and param, which go into a message, at most ERROR_IDENTIFIER_MAX_CHARS each.
PROVIDER_TOKEN_MAX_CHARS = 128
ERROR_IDENTIFIER_MAX_CHARS = 80
_PROVIDER_TOKEN = re.compile(r"[A-Za-z0-9_.:/+=@#~\-\[\]]+")
# OpenAI's x-ratelimit-reset-* durations: "1s", "6m0s", "250ms", "1h2m3.5s".
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


@dataclass(frozen=True, slots=True)
class ErrorBody:
    """What an error body says, as identifiers (never the free-text message)."""

    type: str | None = None
    code: str | None = None
    param: str | None = None

    def names(self) -> set[str]:
        return {n for n in (self.type, self.code) if n}

    def describe(self) -> str:
        parts = [p for p in (self.type, self.code and f"code {self.code}") if p]
        if self.param:
            parts.append(f"param {self.param}")
        return ", ".join(parts)


def provider_token(value: object, *, max_chars: int = PROVIDER_TOKEN_MAX_CHARS) -> str | None:
    """``value`` from a provider's answer as ferryman may keep and show it, or None.

    Kept as given (surrounding whitespace stripped) when it is a string, or an integer,
    of 1 to ``max_chars`` identifier characters: ASCII letters, digits and
    ``_ . : / + = @ # ~ - [ ]``. Anything else is None, never shown: not text, empty,
    longer, or with a space, a control, non-ASCII or markup character in it. Nothing
    is cut or cleaned, because a request id cut short or cleaned up would name another
    request (or none) when quoted to the provider's support.
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or len(value) > max_chars + 64:  # never scan megabytes
        return None
    value = value.strip()
    if 0 < len(value) <= max_chars and _PROVIDER_TOKEN.fullmatch(value):
        return value
    return None


def _identifier(value: Any) -> str | None:
    return provider_token(value, max_chars=ERROR_IDENTIFIER_MAX_CHARS)


def parse_error_body(raw: bytes) -> tuple[ErrorBody, str]:
    """The identifiers of an error body, and its free-text message in lower case (for
    recognising a condition, never for quoting). Understands OpenAI's
    ``{"error": {"message", "type", "code", "param"}}``, Anthropic's
    ``{"type": "error", "error": {"type", "message"}}``, vLLM's older flat
    ``{"object": "error", "message", "type", "code"}`` and a bare ``{"error": "text"}``."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return ErrorBody(), ""
    if not isinstance(data, dict):
        return ErrorBody(), ""
    inner = data.get("error", data)
    if isinstance(inner, str):
        return ErrorBody(), inner.lower()
    if not isinstance(inner, dict):
        return ErrorBody(), ""
    message = inner.get("message")
    body = ErrorBody(
        type=_identifier(inner.get("type")),
        code=_identifier(inner.get("code")),
        param=_identifier(inner.get("param")),
    )
    return body, message.lower() if isinstance(message, str) else ""


def retry_after_seconds(
    headers: Mapping[str, str], *, now: dt.datetime | None = None
) -> float | None:
    """How long the provider asked us to wait: ``retry-after-ms`` (OpenAI, Azure), else
    ``retry-after`` as seconds or as an HTTP date; None when neither is usable."""
    for name, scale in (("retry-after-ms", 0.001), ("x-ms-retry-after-ms", 0.001)):
        value = _number(headers.get(name))
        if value is not None:
            return value * scale
    raw = headers.get("retry-after")
    if raw is None:
        return None
    value = _number(raw)
    if value is not None:
        return value
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    now = now or dt.datetime.now(dt.UTC)
    return max(0.0, (when - now).total_seconds())


def ratelimit_reset_seconds(headers: Mapping[str, str]) -> float | None:
    """OpenAI's hint when a 429 has no Retry-After: the reset of whichever budget
    (requests or tokens) has nothing left."""
    waits = []
    for budget in ("requests", "tokens"):
        if headers.get(f"x-ratelimit-remaining-{budget}", "").strip() == "0":
            wait = _duration(headers.get(f"x-ratelimit-reset-{budget}"))
            if wait is not None:
                waits.append(wait)
    return max(waits) if waits else None


def _number(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _duration(raw: str | None) -> float | None:
    if not raw:
        return None
    text = raw.strip()
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _DURATION_UNITS[u] for n, u in parts)


# Codes servers give an input longer than the model's context window (OpenAI and the
# servers that follow its error shape).
_CONTEXT_LENGTH_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})


def error_for_status(
    status: int,
    body: ErrorBody,
    *,
    provider: str,
    request_id: str | None,
    retry_after: float | None = None,
) -> ProviderError:
    """The ProviderError for an HTTP error status and its body's identifiers."""
    detail = body.describe()
    message = f"{provider} answered HTTP {status}" + (f" ({detail})" if detail else "")
    names = body.names()
    kind: type[ProviderError]
    if names & _SAFETY_CODES:
        kind = SafetyRejectedError
    elif names & _ACCOUNT_CODES:
        kind = AccountRefusedError
    elif status in (429, 529) or names & {"overloaded_error"}:
        kind = ThrottledError
    elif status in (401, 403):
        kind = ProviderUnauthorizedError
    elif status == 408:
        kind = ProviderTimeoutError
    elif status == 409 or status >= 500 or status < 400:
        kind = ProviderServerError
    elif names & _CONTEXT_LENGTH_CODES:  # a fallback model with a longer context may do
        kind = ContextLengthExceededError
    else:  # 400, 404 (unknown model), 413, 422 and every other refusal of our request
        kind = ProviderBadRequestError
    return kind(message, retry_after_seconds=retry_after, provider_request_id=request_id)


def error_for_type(body: ErrorBody, *, provider: str, request_id: str | None) -> ProviderError:
    """The ProviderError for an error that arrived inside a stream, with no status of
    its own: judged by its type and code (unknown ones count as server errors)."""
    names = body.names()
    kind: type[ProviderError] = ProviderServerError
    if names & _SAFETY_CODES:
        kind = SafetyRejectedError
    elif names & _ACCOUNT_CODES:
        kind = AccountRefusedError
    elif names & _THROTTLE_TYPES:
        kind = ThrottledError
    elif names & {"authentication_error", "permission_error", "invalid_api_key"}:
        kind = ProviderUnauthorizedError
    elif names & {"invalid_request_error", "request_too_large", "not_found_error"}:
        kind = ProviderBadRequestError
    elif names & {"timeout_error", "timeout"}:
        kind = ProviderTimeoutError
    detail = body.describe() or "no error type given"
    return kind(
        f"{provider} sent an error in its stream ({detail})", provider_request_id=request_id
    )


def malformed(provider: str, what: str, request_id: str | None) -> ProviderServerError:
    """The answer is not what the API documents: the provider's fault, worth a retry."""
    return ProviderServerError(
        f"{provider} answered in an undocumented shape ({what})", provider_request_id=request_id
    )


@contextlib.contextmanager
def transport_errors(provider: str, request_id: list[str | None]) -> Iterator[None]:
    """Turn httpx's failures to get an answer into ProviderErrors (TRANSIENT).

    ``request_id`` is a one-item list the caller fills in once it has the response
    headers, so an error in the middle of a stream still names the provider's request.
    """
    try:
        yield
    except httpx.TimeoutException as exc:
        raise ProviderTimeoutError(
            f"{provider} did not answer in time ({type(exc).__name__})",
            provider_request_id=request_id[0],
        ) from exc
    except httpx.HTTPError as exc:  # connect errors, resets, broken streams, bad encodings
        raise ProviderServerError(
            f"{provider} could not be reached or broke off ({type(exc).__name__})",
            provider_request_id=request_id[0],
        ) from exc
