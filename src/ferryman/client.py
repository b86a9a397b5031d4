"""The Python client for the ferryman HTTP API.

    async with Client("http://127.0.0.1:8000", api_key) as client:
        job = await client.submit("generate", {"prompt": "hi"})
        done = await client.wait(job["job_id"])

``submit`` is safe to retry by construction: it sends an Idempotency-Key (a new
uuid4 unless the caller gives one) and every retry reuses that key, so a request
whose answer was lost maps to the job the server already stored, never a second
one. Reads are retried the same way. Cancel is retried only when the request
surely never reached the server (connection refused, 429, 503).

Retries are bounded by time, not by count: ``retry_budget_seconds`` (60 s by
default) is long enough to ride out an API restart, and an ``on_retry`` hook hears
of every retry as it is scheduled, so a caller can tell its user at once that the
API cannot be reached and that the client keeps trying.
"""

from __future__ import annotations

import asyncio
import email.utils
import random
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ferryman.core.errors import FerrymanError

if TYPE_CHECKING:
    from collections.abc import Callable

TERMINAL_STATUSES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})
# Failures after which the server certainly did nothing: any request may be retried.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
_UNSENT_STATUSES = frozenset({429, 503})
# Longest wait a server's Retry-After may impose on one retry.
_MAX_RETRY_AFTER_SECONDS = 60.0
# Long enough to ride out an API restart (or a deploy's rolling restart).
DEFAULT_RETRY_BUDGET_SECONDS = 60.0


async def _sleep(seconds: float) -> None:
    """Every wait of the client goes through here, so tests can skip the waiting."""
    await asyncio.sleep(seconds)


def _monotonic() -> float:
    """Every reading of the retry budget's clock, so tests can move it with _sleep."""
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


class ClientError(FerrymanError):
    """The ferryman API refused the request or could not be reached."""

    code = "client_error"

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int | None = None,
        code: str | None = None,
        title: str | None = None,
        detail: str | None = None,
        problem: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message or detail or title)
        self.status = status
        self.code = code or type(self).code  # type: ignore[misc]
        self.title = title
        self.detail = detail
        self.problem: dict[str, Any] = problem or {}

    @classmethod
    def from_response(cls, response: httpx.Response) -> ClientError:
        problem = _problem_of(response)
        return cls(
            f"{response.status_code} {problem.get('title', response.reason_phrase)}: "
            f"{problem.get('detail', '')}".rstrip(": "),
            status=response.status_code,
            code=str(problem.get("code", f"http_{response.status_code}")),
            title=problem.get("title"),
            detail=problem.get("detail"),
            problem=problem,
        )


class WaitTimeoutError(ClientError):
    """The job did not finish within the wait timeout."""

    code = "wait_timeout"

    def __init__(self, job: dict[str, Any], timeout_seconds: float) -> None:
        super().__init__(
            f"job {job.get('job_id')} still {job.get('status')} after {timeout_seconds:g}s"
        )
        self.job = job


def _problem_of(response: httpx.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError:
        body = None
    if isinstance(body, dict):
        return body
    return {"title": response.reason_phrase, "status": response.status_code}


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


def _retryable_status(status: int) -> bool:
    return status == 429 or status >= 500


class Client:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout_seconds: float = 10,
        transport: httpx.AsyncBaseTransport | None = None,
        retry_budget_seconds: float = DEFAULT_RETRY_BUDGET_SECONDS,
        max_retries: int | None = None,
        backoff_initial_seconds: float = 0.25,
        backoff_max_seconds: float = 8.0,
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> None:
        """``retry_budget_seconds``: how long after its first try a request may still be
        retried (0: never retry); ``max_retries`` optionally caps the count as well.
        ``on_retry`` is called before each retry's wait."""
        if retry_budget_seconds < 0:
            raise ValueError("retry_budget_seconds cannot be negative")
        headers = {"User-Agent": "ferryman-client"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_seconds, transport=transport
        )
        self._retry_budget = retry_budget_seconds
        self._max_retries = max_retries
        self._backoff_initial = backoff_initial_seconds
        self._backoff_max = backoff_max_seconds
        self._on_retry = on_retry

    async def __aenter__(self) -> Client:
        await self._http.__aenter__()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._http.__aexit__(*exc_info)  # type: ignore[arg-type]

    async def aclose(self) -> None:
        await self._http.aclose()

    # --- the API ------------------------------------------------------------------

    async def submit(
        self,
        task: str,
        input: dict[str, Any],
        *,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Submit a job; retried with one Idempotency-Key, so it creates at most one job."""
        body: dict[str, Any] = {"task": task, "input": input}
        if model is not None:
            body["model"] = model
        if metadata is not None:
            body["metadata"] = metadata
        headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
        return await self._call("POST", "/v1/generations", json=body, headers=headers)

    async def get(self, job_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/generations/{job_id}")

    async def events(self, job_id: str) -> dict[str, Any]:
        return await self._call("GET", f"/v1/generations/{job_id}/events")

    async def cancel(self, job_id: str) -> dict[str, Any]:
        return await self._call("POST", f"/v1/generations/{job_id}/cancel", idempotent=False)

    async def wait(
        self,
        job_id: str,
        *,
        timeout_seconds: float = 300,
        initial_interval: float = 0.2,
        max_interval: float = 5,
        on_poll: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Poll until the job is terminal; raise WaitTimeoutError after timeout_seconds.

        ``on_poll`` sees the job after every poll (to show progress)."""
        deadline = time.monotonic() + timeout_seconds
        interval = initial_interval
        while True:
            job = await self.get(job_id)
            if on_poll is not None:
                on_poll(job)
            if job.get("status") in TERMINAL_STATUSES:
                return job
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise WaitTimeoutError(job, timeout_seconds)
            await _sleep(min(interval, remaining))
            interval = min(max_interval, interval * 1.5)

    async def list(
        self,
        *,
        status: str | None = None,
        task: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """One page of the caller's jobs, newest first: {"data": [...], "next_cursor": ...}."""
        query = {"status": status, "task": task, "limit": limit, "cursor": cursor}
        params = {name: value for name, value in query.items() if value is not None}
        return await self._call("GET", "/v1/generations", params=params)

    # --- transport ----------------------------------------------------------------

    async def _call(
        self, method: str, path: str, *, idempotent: bool = True, **kwargs: Any
    ) -> dict[str, Any]:
        response = await self._send_with_retries(method, path, idempotent=idempotent, **kwargs)
        if response.is_error:
            raise ClientError.from_response(response)
        data = response.json()
        if not isinstance(data, dict):
            raise ClientError(
                f"unexpected answer from {method} {path}", status=response.status_code
            )
        return data

    async def _send_with_retries(
        self, method: str, path: str, *, idempotent: bool, **kwargs: Any
    ) -> httpx.Response:
        started = _monotonic()
        retry = 0
        while True:
            try:
                response = await self._http.request(method, path, **kwargs)
            except httpx.TransportError as exc:
                delay = self._next_delay(retry, None, started)
                if delay is None or not self._may_retry_error(exc, idempotent):
                    raise ClientError(
                        f"cannot reach ferryman at {self._http.base_url}: {type(exc).__name__}"
                        f" (tried for {_monotonic() - started:.0f}s)",
                        code="unreachable",
                    ) from exc
                self._notify(method, path, type(exc).__name__, None, retry, delay, started)
            else:
                status = response.status_code
                if not self._may_retry_status(status, idempotent):
                    return response
                delay = self._next_delay(retry, retry_after_seconds(response), started)
                if delay is None:
                    return response
                await response.aclose()
                error = f"{status} {response.reason_phrase}".strip()
                self._notify(method, path, error, status, retry, delay, started)
            await _sleep(delay)
            retry += 1

    def _next_delay(self, retry: int, retry_after: float | None, started: float) -> float | None:
        """The wait before the next try, or None when the budget does not allow one."""
        if self._max_retries is not None and retry >= self._max_retries:
            return None
        remaining = self._retry_budget - (_monotonic() - started)
        if remaining <= 0:
            return None
        if retry_after is not None and min(retry_after, _MAX_RETRY_AFTER_SECONDS) > remaining:
            return None  # the server asks for a longer wait than the budget has left
        return min(self._backoff(retry, retry_after), remaining)

    def _notify(
        self,
        method: str,
        path: str,
        error: str,
        status: int | None,
        retry: int,
        delay: float,
        started: float,
    ) -> None:
        if self._on_retry is None:
            return
        self._on_retry(
            RetryNotice(
                method=method,
                path=path,
                base_url=str(self._http.base_url),
                error=error,
                status=status,
                retry=retry + 1,
                delay_seconds=delay,
                elapsed_seconds=_monotonic() - started,
                budget_seconds=self._retry_budget,
            )
        )

    @staticmethod
    def _may_retry_error(exc: httpx.TransportError, idempotent: bool) -> bool:
        return idempotent or isinstance(exc, _UNSENT_ERRORS)

    @staticmethod
    def _may_retry_status(status: int, idempotent: bool) -> bool:
        return _retryable_status(status) if idempotent else status in _UNSENT_STATUSES

    def _backoff(self, retry: int, retry_after: float | None) -> float:
        """Full-jitter exponential backoff, never shorter than the server's Retry-After."""
        ceiling = min(self._backoff_max, self._backoff_initial * 2**retry)
        delay = random.uniform(0.0, ceiling)
        if retry_after is not None:
            delay = max(delay, min(retry_after, _MAX_RETRY_AFTER_SECONDS))
        return delay
