"""When the client tries a request again, decided without doing any I/O, so the sync
and the async client share every rule.

Reads and submissions are retried on network errors, 429 and 5xx (a submission
always carries one Idempotency-Key, so a retry maps to the job the server already
stored, never a second one). Cancel is retried only when the request surely never
reached the server (connection refused, 429, 503).

Retries are bounded by time, not by count: ``budget_seconds`` (60 s by default) rides
out an API restart. With ``wait_for_server=False`` a server never reached by this
client is an error at once (the CLI's choice: a wrong address is said at once, not
after a minute of silence); once the server has answered, a lost connection is
retried like any other failure. ``on_retry`` hears of every retry before its wait.
"""

from __future__ import annotations

import email.utils
import random
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpx

from ferryman.client.errors import UnreachableError

if TYPE_CHECKING:
    from collections.abc import Callable

# Failures after which the server certainly did nothing: any request may be retried.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_UNSENT_STATUSES = frozenset({429, 503})
# Longest wait a server's Retry-After may impose on one retry.
_MAX_RETRY_AFTER_SECONDS = 60.0
# Long enough to ride out an API restart (or a deploy's rolling restart).
DEFAULT_RETRY_BUDGET_SECONDS = 60.0


def _monotonic() -> float:
    """Every reading of the client's clock, so tests can move it with their sleeps."""
    return time.monotonic()


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """A failed try that the client is about to retry, for progress reports."""

    method: str
    path: str
    base_url: str
    error: str  # "ConnectError", "503 Service Unavailable", ...
    status: int | None  # None when the server could not be reached at all
    retry: int  # 1 for the first retry
    delay_seconds: float  # the wait before it
    elapsed_seconds: float  # since the first try
    budget_seconds: float  # retries stop once this much time has passed

    @property
    def unreachable(self) -> bool:
        return self.status is None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    budget_seconds: float = DEFAULT_RETRY_BUDGET_SECONDS
    max_retries: int | None = None
    backoff_initial_seconds: float = 0.25
    backoff_max_seconds: float = 8.0
    wait_for_server: bool = True

    def __post_init__(self) -> None:
        if self.budget_seconds < 0:
            raise ValueError("retry_budget_seconds cannot be negative")


class Contact:
    """Whether this client has had any answer from the server yet."""

    def __init__(self) -> None:
        self.reached = False


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After as seconds (delta-seconds or an HTTP date), or None."""
    value = response.headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RetryState:
    """The tries of one request: after each failure, the wait before the next or an end."""

    def __init__(
        self,
        policy: RetryPolicy,
        contact: Contact,
        *,
        method: str,
        path: str,
        base_url: str,
        idempotent: bool,
        on_retry: Callable[[RetryNotice], None] | None,
    ) -> None:
        self._policy = policy
        self._contact = contact
        self._method = method
        self._path = path
        self._base_url = base_url
        self._idempotent = idempotent
        self._on_retry = on_retry
        self._started = _monotonic()
        self._retry = 0

    def after_error(self, exc: httpx.TransportError) -> float:
        """The wait before retrying after a network error; raises UnreachableError when
        there is to be no retry."""
        delay = self._next_delay(None)
        may = self._idempotent or isinstance(exc, _UNSENT_ERRORS)
        if not self._contact.reached and not self._policy.wait_for_server:
            may = False
        if delay is None or not may:
            raise UnreachableError(
                f"cannot reach ferryman at {self._base_url}: {type(exc).__name__}"
                f" (tried for {_monotonic() - self._started:.0f}s)",
                url=self._base_url,
                reason=type(exc).__name__,
            ) from exc
        self._notify(type(exc).__name__, None, delay)
        return delay

    def after_response(self, response: httpx.Response) -> float | None:
        """The wait before retrying after this answer, or None to take the answer."""
        self._contact.reached = True
        status = response.status_code
        retryable = status == 429 or status >= 500
        if not (retryable if self._idempotent else status in _UNSENT_STATUSES):
            return None
        delay = self._next_delay(retry_after_seconds(response))
        if delay is not None:
            self._notify(f"{status} {response.reason_phrase}".strip(), status, delay)
        return delay

    def _next_delay(self, retry_after: float | None) -> float | None:
        """The wait before the next try, or None when the budget does not allow one."""
        policy = self._policy
        if policy.max_retries is not None and self._retry >= policy.max_retries:
            return None
        remaining = policy.budget_seconds - (_monotonic() - self._started)
        if remaining <= 0:
            return None
        if retry_after is not None and min(retry_after, _MAX_RETRY_AFTER_SECONDS) > remaining:
            return None  # the server asks for a longer wait than the budget has left
        return min(self._backoff(retry_after), remaining)

    def _backoff(self, retry_after: float | None) -> float:
        """Full-jitter exponential backoff, never shorter than the server's Retry-After."""
        policy = self._policy
        ceiling = min(policy.backoff_max_seconds, policy.backoff_initial_seconds * 2**self._retry)
        delay = random.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, _MAX_RETRY_AFTER_SECONDS))
        return delay

    def _notify(self, error: str, status: int | None, delay: float) -> None:
        self._retry += 1
        if self._on_retry is None:
            return
        self._on_retry(
            RetryNotice(
                method=self._method,
                path=self._path,
                base_url=self._base_url,
                error=error,
                status=status,
                retry=self._retry,
                delay_seconds=delay,
                elapsed_seconds=_monotonic() - self._started,
                budget_seconds=self._policy.budget_seconds,
            )
        )
