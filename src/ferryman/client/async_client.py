"""``AsyncClient``: the ferryman API for asyncio programs.

    async with AsyncClient("http://127.0.0.1:8000", api_key) as client:
        job = await client.submit("generate", {"prompt": "hi"})
        output = await client.result(job.job_id)

The same methods as ``Client``, awaited; the rules they follow are in
``ferryman.client.calls`` (what is sent, how answers are read) and
``ferryman.client.retrying`` (when a request is tried again).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar, overload

import httpx

from ferryman.client import calls
from ferryman.client.calls import DEFAULT_TIMEOUT, WaitDefault
from ferryman.client.cookies import skip_cookieless_responses
from ferryman.client.http11 import Http11Transport, proxied
from ferryman.client.pool import ShardedTransport
from ferryman.client.retrying import (
    DEFAULT_RETRY_BUDGET_SECONDS,
    Contact,
    RetryPolicy,
    RetryState,
    _monotonic,
)

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterable, Mapping

    from ferryman.client.models import (
        BatchProblem,
        Job,
        JobHistory,
        JobStatus,
        Page,
        SubmitItem,
        Submitted,
        WebhookSecret,
    )
    from ferryman.client.retrying import RetryNotice

T = TypeVar("T")


async def _sleep(seconds: float) -> None:
    """Every wait of the async client goes through here, so tests can skip the waiting."""
    await asyncio.sleep(seconds)


class AsyncClient:
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
        if transport is None and not proxied():
            # Plain http: the lean transport (client/http11.py); https keeps httpx's.
            plain = httpx.URL(base_url).scheme == "http"
            transport = Http11Transport() if plain else ShardedTransport()
        self._http = httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_seconds, transport=transport
        )
        skip_cookieless_responses(self._http)
        self._urls = calls.Urls(self._http)
        self._contact = Contact()
        self._on_retry = on_retry

    @property
    def base_url(self) -> str:
        return str(self._http.base_url)

    async def __aenter__(self) -> AsyncClient:
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
        webhook_url: str | None = None,
    ) -> Submitted:
        """Submit a job; retried with one Idempotency-Key, so it creates at most one job."""
        return await self._run(
            calls.submit(
                task,
                input,
                model=model,
                metadata=metadata,
                idempotency_key=idempotency_key,
                webhook_url=webhook_url,
            )
        )

    async def submit_many(
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
            answered = await self._run(calls.submit_batch(chunk))
            outcomes.extend(answered)
        return outcomes

    async def get(self, job_id: str) -> Job:
        return await self._run(calls.get(job_id))

    async def list(
        self,
        *,
        status: JobStatus | str | None = None,
        task: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Job]:
        """One page of the caller's jobs, newest first."""
        return await self._run(
            calls.list_jobs(status=status, task=task, limit=limit, cursor=cursor)
        )

    async def iter_jobs(
        self,
        *,
        status: JobStatus | str | None = None,
        task: str | None = None,
        page_size: int | None = None,
    ) -> AsyncIterator[Job]:
        """Every job of the caller, newest first, fetching page after page."""
        cursor: str | None = None
        while True:
            page = await self.list(status=status, task=task, limit=page_size, cursor=cursor)
            for job in page.data:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def events(self, job_id: str) -> JobHistory:
        return await self._run(calls.events(job_id))

    async def rotate_webhook_secret(self) -> WebhookSecret:
        """Create or rotate this tenant's webhook signing secret; the answer holds it,
        once. The secret it replaces keeps signing beside it for 24 hours."""
        return await self._run(calls.rotate_webhook_secret())

    async def cancel(self, job_id: str) -> Job:
        return await self._run(calls.cancel(job_id))

    async def wait(
        self,
        job_id: str,
        *,
        timeout: float | WaitDefault | None = DEFAULT_TIMEOUT,
        initial_interval: float = 0.2,
        max_interval: float = 5,
        on_poll: Callable[[Job], None] | None = None,
        timeout_seconds: float | WaitDefault | None = DEFAULT_TIMEOUT,
    ) -> Job:
        """Wait until the job is finished: the server answers once it is (GET ...?wait=,
        in rounds of at most 60 s); WaitTimeoutError (a TimeoutError) after ``timeout``
        seconds (300 unless given; None: no limit). ``timeout_seconds`` is its old name,
        kept for compatibility. ``on_poll`` sees the job after every answer (to show
        progress). Against a server that cannot wait, it polls, backing off from
        ``initial_interval`` to ``max_interval`` seconds between polls."""
        poll = calls.Poll(
            timeout_seconds=calls.wait_limit(timeout, timeout_seconds),
            initial_interval=initial_interval,
            max_interval=max_interval,
        )
        waits = calls.ServerWaits()
        while True:
            round_seconds = waits.next_round(poll)
            if round_seconds is None:
                job = await self.get(job_id)
            else:
                started = _monotonic()
                waited = await self._run(calls.get_waiting(job_id, round_seconds))
                if waited is None:
                    waits.refused()  # an older server: poll from now on
                    continue
                job = waited
                waits.answered(
                    job, round_seconds=round_seconds, elapsed_seconds=_monotonic() - started
                )
            if on_poll is not None:
                on_poll(job)
            delay = poll.next_wait(job)
            if delay is None:
                return job
            if not waits.supported:
                await _sleep(delay)

    async def wait_many(
        self,
        job_ids: Iterable[str],
        *,
        timeout: float | None = calls.DEFAULT_WAIT_TIMEOUT_SECONDS,
        initial_interval: float = 0.2,
        max_interval: float = 5,
    ) -> dict[str, Job]:
        """Wait until every job is finished; the jobs by id, in the order first given
        (a job named twice is there once; no ids: an empty dict at once). Polls as
        ``as_completed`` does. WaitTimeoutError after ``timeout`` seconds (None: no
        limit), with ``unfinished`` and the ``finished`` jobs so far."""
        ids = list(job_ids)
        finished = {
            job.job_id: job
            async for job in self.as_completed(
                ids, timeout=timeout, initial_interval=initial_interval, max_interval=max_interval
            )
        }
        return {job_id: finished[job_id] for job_id in dict.fromkeys(ids)}

    async def as_completed(
        self,
        job_ids: Iterable[str],
        *,
        timeout: float | None = calls.DEFAULT_WAIT_TIMEOUT_SECONDS,
        initial_interval: float = 0.2,
        max_interval: float = 5,
    ) -> AsyncIterator[Job]:
        """Each job as it finishes, as ``concurrent.futures.as_completed`` yields
        futures: jobs that finish between two polls come in the order given, a job
        named twice comes once. One list request polls up to 100 unfinished jobs (more
        take one request per 100), backing off between rounds as ``wait`` does; a
        finished job comes with its result in that answer, and is read by itself only
        when the list could not serve its result (GET raises why, as ``get`` would), as
        is a job the list does not show (a 404 ClientError: unknown, or another
        tenant's). WaitTimeoutError (a TimeoutError) ``timeout`` seconds after the
        iteration began, naming how many are unfinished (None: no limit)."""
        watch = calls.Watch(
            job_ids,
            timeout_seconds=timeout,
            initial_interval=initial_interval,
            max_interval=max_interval,
        )
        while watch.waiting:
            for first in watch.polls():
                call: calls.Call[Page[Job]] | None = first
                while call is not None:
                    call = watch.listed(call, await self._run(call))
            for job_id in watch.to_get():
                watch.got(await self.get(job_id))
            for job in watch.finished():
                yield job
            if watch.waiting:
                await _sleep(watch.next_wait())

    @overload
    async def result(
        self,
        job_id: str,
        *,
        timeout: float | WaitDefault | None = ...,
        output_type: type[T],
        timeout_seconds: float | WaitDefault | None = ...,
    ) -> T: ...
    @overload
    async def result(
        self,
        job_id: str,
        *,
        timeout: float | WaitDefault | None = ...,
        output_type: None = None,
        timeout_seconds: float | WaitDefault | None = ...,
    ) -> Any: ...
    async def result(
        self,
        job_id: str,
        *,
        timeout: float | WaitDefault | None = DEFAULT_TIMEOUT,
        output_type: Any = None,
        timeout_seconds: float | WaitDefault | None = DEFAULT_TIMEOUT,
    ) -> Any:
        """Wait for the job (as ``wait``, with its ``timeout``) and return its output
        (validated as ``output_type`` if given); JobFailedError (with ``failure_class``)
        or JobCancelledError otherwise."""
        job = await self.wait(job_id, timeout=timeout, timeout_seconds=timeout_seconds)
        return calls.outcome(job, output_type)

    # --- transport ----------------------------------------------------------------

    async def _run(self, call: calls.Call[T]) -> T:
        return call.read(await self._send(call))

    async def _send(self, call: calls.Call[Any]) -> httpx.Response:
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
                response = await self._http.request(
                    call.method,
                    self._urls(call.path),
                    json=call.json,
                    # None, not an empty dict, spares httpx re-parsing the URL.
                    params=call.params or None,
                    headers=call.headers,
                    timeout=calls.timeout_of(call, self._http.timeout),
                )
            except httpx.TransportError as exc:
                await _sleep(tries.after_error(exc))
                continue
            delay = tries.after_response(response)
            if delay is None:
                await response.aread()
                return response
            await response.aclose()
            await _sleep(delay)
