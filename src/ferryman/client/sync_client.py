"""``Client``: the ferryman API for programs without an event loop (scripts, notebooks,
threads).

    with Client("http://127.0.0.1:8000", api_key) as client:
        job = client.submit("generate", {"prompt": "hi"})
        output = client.result(job.job_id)

The same methods as ``AsyncClient``, not awaited; the rules they follow are in
``ferryman.client.calls`` (what is sent, how answers are read) and
``ferryman.client.retrying`` (when a request is tried again).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, TypeVar, overload

import httpx

from ferryman.client import calls
from ferryman.client.cookies import skip_cookieless_responses
from ferryman.client.http11 import proxied
from ferryman.client.http11_sync import Http11SyncTransport
from ferryman.client.retrying import (
    DEFAULT_RETRY_BUDGET_SECONDS,
    Contact,
    RetryPolicy,
    RetryState,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator, Mapping

    from ferryman.client.models import (
        BatchProblem,
        Job,
        JobHistory,
        JobStatus,
        Page,
        SubmitItem,
        Submitted,
    )
    from ferryman.client.retrying import RetryNotice

T = TypeVar("T")


def _sleep(seconds: float) -> None:
    """Every wait of the sync client goes through here, so tests can skip the waiting."""
    time.sleep(seconds)


class Client:
    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout_seconds: float = 10,
        transport: httpx.BaseTransport | None = None,
        retry_budget_seconds: float = DEFAULT_RETRY_BUDGET_SECONDS,
        max_retries: int | None = None,
        backoff_initial_seconds: float = 0.25,
        backoff_max_seconds: float = 8.0,
        wait_for_server: bool = True,
        on_retry: Callable[[RetryNotice], None] | None = None,
    ) -> None:
        """``retry_budget_seconds``: how long after its first try a request may still be
        retried (0: never); ``max_retries`` optionally caps the count as well.
        ``wait_for_server=False``: a server this client never reached is an
        UnreachableError at once. ``on_retry`` is called before each retry's wait."""
        self._policy = RetryPolicy(
            budget_seconds=retry_budget_seconds,
            max_retries=max_retries,
            backoff_initial_seconds=backoff_initial_seconds,
            backoff_max_seconds=backoff_max_seconds,
            wait_for_server=wait_for_server,
        )
        headers = {"User-Agent": "ferryman-client"}
        if api_key:
            headers["Authorization"] = f"Bearer {api_key}"
        if transport is None and not proxied() and httpx.URL(base_url).scheme == "http":
            # Plain http: the lean transport (client/http11_sync.py); else httpx's.
            transport = Http11SyncTransport()
        self._http = httpx.Client(
            base_url=base_url, headers=headers, timeout=timeout_seconds, transport=transport
        )
        skip_cookieless_responses(self._http)
        self._urls = calls.Urls(self._http)
        self._contact = Contact()
        self._on_retry = on_retry

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    def __enter__(self) -> Client:
        self._http.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._http.__exit__(*exc_info)  # type: ignore[arg-type]

    def close(self) -> None:
        self._http.close()

    # --- the API ------------------------------------------------------------------

    def submit(
        self,
        task: str,
        input: dict[str, Any],
        *,
        model: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Submitted:
        """Submit a job; retried with one Idempotency-Key, so it creates at most one job."""
        return self._run(
            calls.submit(
                task, input, model=model, metadata=metadata, idempotency_key=idempotency_key
            )
        )

    def submit_many(
        self, items: Iterable[SubmitItem | Mapping[str, Any]]
    ) -> list[Submitted | BatchProblem]:
        """Submit many jobs through the batch route, up to 1,000 a request; one outcome
        per item, in order: its ``Submitted`` (``replayed`` when its key named an
        earlier job) or the ``BatchProblem`` it got alone. Each item without an
        ``idempotency_key`` gets a new one, so a request retried after a lost answer
        makes no second job. A whole request refused (401, 413, 429 past the retry
        budget, 503 paused) raises ClientError; the requests before it stand."""
        outcomes: list[Submitted | BatchProblem] = []
        for chunk in calls.chunks(calls.batch_bodies(items)):
            answered = self._run(calls.submit_batch(chunk))
            outcomes.extend(answered)
        return outcomes

    def get(self, job_id: str) -> Job:
        return self._run(calls.get(job_id))

    def list(
        self,
        *,
        status: JobStatus | str | None = None,
        task: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Job]:
        """One page of the caller's jobs, newest first."""
        return self._run(calls.list_jobs(status=status, task=task, limit=limit, cursor=cursor))

    def iter_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        task: str | None = None,
        page_size: int | None = None,
    ) -> Iterator[Job]:
        """Every job of the caller, newest first, fetching page after page."""
        cursor: str | None = None
        while True:
            page = self.list(status=status, task=task, limit=page_size, cursor=cursor)
            yield from page.data
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def events(self, job_id: str) -> JobHistory:
        return self._run(calls.events(job_id))

    def cancel(self, job_id: str) -> Job:
        return self._run(calls.cancel(job_id))

    def wait(
        self,
        job_id: str,
        *,
        timeout_seconds: float = calls.DEFAULT_WAIT_TIMEOUT_SECONDS,
        initial_interval: float = 0.2,
        max_interval: float = 5,
        on_poll: Callable[[Job], None] | None = None,
    ) -> Job:
        """Poll until the job is finished; WaitTimeoutError after ``timeout_seconds``.
        ``on_poll`` sees the job after every poll (to show progress)."""
        poll = calls.Poll(
            timeout_seconds=timeout_seconds,
            initial_interval=initial_interval,
            max_interval=max_interval,
        )
        while True:
            job = self.get(job_id)
            if on_poll is not None:
                on_poll(job)
            delay = poll.next_wait(job)
            if delay is None:
                return job
            _sleep(delay)

    @overload
    def result(self, job_id: str, *, timeout_seconds: float = ..., output_type: type[T]) -> T: ...
    @overload
    def result(
        self, job_id: str, *, timeout_seconds: float = ..., output_type: None = None
    ) -> Any: ...
    def result(
        self,
        job_id: str,
        *,
        timeout_seconds: float = calls.DEFAULT_WAIT_TIMEOUT_SECONDS,
        output_type: Any = None,
    ) -> Any:
        """Wait for the job and return its output (validated as ``output_type`` if
        given); JobFailedError (with ``failure_class``) or JobCancelledError otherwise."""
        return calls.outcome(self.wait(job_id, timeout_seconds=timeout_seconds), output_type)

    # --- transport ----------------------------------------------------------------

    def _run(self, call: calls.Call[T]) -> T:
        return call.read(self._send(call))

    def _send(self, call: calls.Call[Any]) -> httpx.Response:
        tries = RetryState(
            self._policy,
            self._contact,
            method=call.method,
            path=call.path,
            base_url=self.base_url,
            idempotent=call.idempotent,
            on_retry=self._on_retry,
        )
        while True:
            try:
                response = self._http.request(
                    call.method,
                    self._urls(call.path),
                    json=call.json,
                    # None, not an empty dict, spares httpx re-parsing the URL.
                    params=call.params or None,
                    headers=call.headers,
                )
            except httpx.TransportError as exc:
                _sleep(tries.after_error(exc))
                continue
            delay = tries.after_response(response)
            if delay is None:
                response.read()
                return response
            response.close()
            _sleep(delay)
