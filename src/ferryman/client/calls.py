"""What each client method sends and how its answer is read, without doing any I/O.

The sync and async clients differ only in how they send a ``Call`` and how they
sleep; everything else (paths, bodies, the Idempotency-Key, parsing into models,
when a wait ends, what ``result`` raises) is here, once.
"""

from __future__ import annotations

import dataclasses
import enum
import urllib.parse
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import httpx
from httpx._client import USE_CLIENT_DEFAULT, UseClientDefault
from pydantic import TypeAdapter, ValidationError

from ferryman.client.errors import (
    ClientError,
    JobCancelledError,
    JobFailedError,
    WaitTimeoutError,
)
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
from ferryman.client.retrying import _monotonic

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping, Sequence


T = TypeVar("T")

DEFAULT_WAIT_TIMEOUT_SECONDS = 300.0
# The most jobs the API takes in one batch request; submit_many sends more in several.
MAX_BATCH_ITEMS = 1000
# The most jobs one list request may name: a wait for more polls them in several.
MAX_JOB_IDS_PER_POLL = 100
# The longest one GET ...?wait= may wait on the server (the API's own bound): a longer
# wait asks again, round after round, until its own deadline.
MAX_SERVER_WAIT_SECONDS = 60.0
# How much longer than its server-side wait the answer to a ?wait= may take to arrive.
WAIT_READ_MARGIN_SECONDS = 10.0


class WaitDefault(enum.Enum):
    """A wait's ``timeout`` left out: DEFAULT_WAIT_TIMEOUT_SECONDS. (None is a value of
    its own, as in ``concurrent.futures``: no time limit.)"""

    TIMEOUT = DEFAULT_WAIT_TIMEOUT_SECONDS

    def __repr__(self) -> str:
        return f"<{DEFAULT_WAIT_TIMEOUT_SECONDS:g} s>"


DEFAULT_TIMEOUT = WaitDefault.TIMEOUT


def wait_limit(
    timeout: float | WaitDefault | None, timeout_seconds: float | WaitDefault | None
) -> float | None:
    """How long a wait may take, in seconds (None: no limit). ``timeout`` is the name
    ``concurrent.futures`` and httpx use; ``timeout_seconds`` is its old name, kept for
    compatibility. Both at once is a TypeError."""
    if timeout_seconds is DEFAULT_TIMEOUT:
        return DEFAULT_WAIT_TIMEOUT_SECONDS if timeout is DEFAULT_TIMEOUT else timeout
    if timeout is not DEFAULT_TIMEOUT:
        raise TypeError("give timeout or timeout_seconds (its old name), not both")
    return timeout_seconds


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request: what to send, whether it may be repeated, how to read the answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], T]
    json: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    # False: retried only when the request surely never reached the server.
    idempotent: bool = True
    # The read timeout of this request, when it must differ from the client's (a
    # request the server holds on purpose: GET ...?wait=).
    read_timeout_seconds: float | None = None


class Urls:
    """The absolute URL of each path a client sends to, made once: httpx parses the path
    and merges it with the base URL on every request (3 URL parses, ~30% of httpx's own
    work per request with a mock transport). Bounded: job paths come and go."""

    def __init__(self, http: httpx.Client | httpx.AsyncClient, size: int = 256) -> None:
        self._http = http
        self._size = size
        self._urls: dict[str, httpx.URL] = {}

    def __call__(self, path: str) -> httpx.URL:
        url = self._urls.get(path)
        if url is None:
            if len(self._urls) >= self._size:
                self._urls.clear()
            # build_request merges exactly as a request would (a base URL's own path kept).
            url = self._urls[path] = self._http.build_request("GET", path).url
        return url


def _json_of(response: httpx.Response) -> Any:
    if response.is_error:
        raise ClientError.from_response(response)
    try:
        return response.json()
    except ValueError as exc:
        raise ClientError(
            f"the API answered {response.request.method} {response.request.url.path} "
            "with something that is not JSON",
            status=response.status_code,
        ) from exc


def _reader(model: type[T]) -> Callable[[httpx.Response], T]:
    adapter = TypeAdapter(model)

    def read(response: httpx.Response) -> T:
        data = _json_of(response)
        try:
            return adapter.validate_python(data)
        except ValidationError as exc:
            raise ClientError(
                f"unexpected answer from {response.request.method} "
                f"{response.request.url.path}: {exc.error_count()} field(s) do not match "
                f"{getattr(model, '__name__', model)}",
                status=response.status_code,
            ) from exc

    return read


_read_job = _reader(Job)
_read_page = _reader(Page[Job])
_read_history = _reader(JobHistory)
_read_submitted_body = _reader(Submitted)


def _read_submitted(response: httpx.Response) -> Submitted:
    submitted = _read_submitted_body(response)
    if response.headers.get("Idempotent-Replayed") == "true":
        return submitted.model_copy(update={"replayed": True})
    return submitted


def submit(
    task: str,
    input: dict[str, Any],
    *,
    model: str | None,
    metadata: dict[str, Any] | None,
    idempotency_key: str | None,
    webhook_url: str | None = None,
) -> Call[Submitted]:
    """Always with an Idempotency-Key (a new uuid4 unless given), reused by every
    retry: a submission retried after a lost answer never makes a second job."""
    body: dict[str, Any] = {"task": task, "input": input}
    if model is not None:
        body["model"] = model
    if metadata is not None:
        body["metadata"] = metadata
    if webhook_url is not None:
        body["webhook_url"] = webhook_url
    key = idempotency_key or str(uuid.uuid4())
    return Call(
        "POST",
        "/v1/generations",
        _read_submitted,
        json=body,
        headers={"Idempotency-Key": key},
    )


def batch_bodies(items: Iterable[SubmitItem | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each item as the JSON the batch route takes, every one with an idempotency_key
    (a new uuid4 unless given): a batch retried after a lost answer, or sent again
    whole, never makes a second job of any item. A dict with an unknown key or
    without task and input is refused here (pydantic's ValidationError)."""
    bodies = []
    for item in items:
        checked = item if isinstance(item, SubmitItem) else SubmitItem.model_validate(item)
        body = checked.model_dump(exclude_none=True)
        body.setdefault("idempotency_key", str(uuid.uuid4()))
        bodies.append(body)
    return bodies


def submit_batch(bodies: list[dict[str, Any]]) -> Call[list[Submitted | BatchProblem]]:
    """One request of at most MAX_BATCH_ITEMS jobs. Safe to repeat (every item has a
    key), so it is retried like any idempotent request."""
    assert 1 <= len(bodies) <= MAX_BATCH_ITEMS

    def read(response: httpx.Response) -> list[Submitted | BatchProblem]:
        entries = _read_batch(response)
        if len(entries) != len(bodies):
            raise ClientError(
                f"the batch answer has {len(entries)} entries for {len(bodies)} jobs",
                status=response.status_code,
            )
        return entries

    return Call("POST", "/v1/generations/batch", read, json={"jobs": bodies})


def _read_batch(response: httpx.Response) -> list[Submitted | BatchProblem]:
    data = _json_of(response)
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise ClientError("the batch answer has no results list", status=response.status_code)
    entries: list[Submitted | BatchProblem] = []
    for entry in data["results"]:
        # A job has a job_id; a problem never does.
        model = Submitted if isinstance(entry, dict) and "job_id" in entry else BatchProblem
        try:
            entries.append(model.model_validate(entry))
        except ValidationError as exc:
            raise ClientError(
                f"unexpected batch entry: {exc.error_count()} field(s) do not match "
                f"{model.__name__}",
                status=response.status_code,
            ) from exc
    return entries


def chunks(bodies: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    return [bodies[i : i + MAX_BATCH_ITEMS] for i in range(0, len(bodies), MAX_BATCH_ITEMS)]


def get(job_id: str) -> Call[Job]:
    return Call("GET", f"/v1/generations/{_segment(job_id)}", _read_job)


def get_waiting(job_id: str, wait_seconds: float) -> Call[Job | None]:
    """GET the job once it is finished, or after ``wait_seconds`` on the server. None:
    the server refused the parameter (an older one, 422 on ``wait``): poll instead."""
    return Call(
        "GET",
        f"/v1/generations/{_segment(job_id)}",
        _read_waited,
        params={"wait": f"{wait_seconds:.3f}"},
        read_timeout_seconds=wait_seconds + WAIT_READ_MARGIN_SECONDS,
    )


def _read_waited(response: httpx.Response) -> Job | None:
    if response.status_code == 422 and _refuses_wait(response):
        return None
    return _read_job(response)


def _refuses_wait(response: httpx.Response) -> bool:
    try:
        errors = response.json().get("errors") or []
    except (ValueError, AttributeError):
        return False
    return any(isinstance(e, dict) and "wait" in (e.get("loc") or []) for e in errors)


def events(job_id: str) -> Call[JobHistory]:
    return Call("GET", f"/v1/generations/{_segment(job_id)}/events", _read_history)


def rotate_webhook_secret() -> Call[WebhookSecret]:
    """Not idempotent: each call makes a new secret (a retry after a lost answer would
    rotate again, and the secret it answers with is the one that counts)."""

    def read(response: httpx.Response) -> WebhookSecret:
        return WebhookSecret.model_validate(response.json())

    return Call("POST", "/v1/webhooks/secret", read, idempotent=False)


def cancel(job_id: str) -> Call[Job]:
    return Call("POST", f"/v1/generations/{_segment(job_id)}/cancel", _read_job, idempotent=False)


def list_jobs(
    *,
    status: JobStatus | str | None,
    task: str | None,
    limit: int | None,
    cursor: str | None,
    job_ids: Sequence[str] | None = None,
) -> Call[Page[Job]]:
    query = {"status": status, "task": task, "limit": limit, "cursor": cursor}
    params: dict[str, Any] = {
        name: str(value) for name, value in query.items() if value is not None
    }
    if job_ids is not None:
        params["job_id"] = list(job_ids)  # repeated: job_id=a&job_id=b
    return Call("GET", "/v1/generations", _read_page, params=params)


def _segment(job_id: str) -> str:
    """A job id as one path segment, whatever it holds: never a way to another route
    (``/`` and dots are escaped, so a bad id is a 404, not a different request)."""
    return urllib.parse.quote(job_id, safe="").replace(".", "%2E")


class Poll:
    """When a wait polls next, and when it ends: intervals grow by half each time, up to
    ``max_interval``, and never past the deadline (None: no deadline)."""

    def __init__(
        self, *, timeout_seconds: float | None, initial_interval: float, max_interval: float
    ) -> None:
        self.timeout_seconds = timeout_seconds
        self._deadline = None if timeout_seconds is None else _monotonic() + timeout_seconds
        self._interval = initial_interval
        self._max_interval = max_interval

    def next_wait(self, job: Job) -> float | None:
        """None once the job is finished; otherwise the wait before the next poll.
        Raises WaitTimeoutError when the time is up."""
        if job.terminal:
            return None
        delay = self.next_delay()
        if delay is None:
            raise WaitTimeoutError(job, self.timeout_seconds or 0.0)
        return delay

    def remaining(self) -> float | None:
        """Seconds left before the deadline (None: no deadline)."""
        return None if self._deadline is None else self._deadline - _monotonic()

    def next_delay(self) -> float | None:
        """The wait before the next poll; None once the time is up."""
        wait = self._interval
        if self._deadline is not None:
            remaining = self._deadline - _monotonic()
            if remaining <= 0:
                return None
            wait = min(wait, remaining)
        self._interval = min(self._max_interval, self._interval * 1.5)
        return wait


class ServerWaits:
    """Whether a wait asks the server to wait (GET ...?wait=), and for how long a round:
    yes until the server shows it does not (a 422 on the parameter, or a job answered
    unfinished long before the round's time: a server that ignores it); from then on the
    wait polls (``Poll``), as it did before servers could wait."""

    def __init__(self) -> None:
        self.supported = True

    def next_round(self, poll: Poll) -> float | None:
        """Seconds the server may wait this round; None: poll instead."""
        if not self.supported:
            return None
        remaining = poll.remaining()
        if remaining is None:
            return MAX_SERVER_WAIT_SECONDS
        return max(0.001, min(MAX_SERVER_WAIT_SECONDS, remaining))

    def refused(self) -> None:
        self.supported = False

    def answered(self, job: Job, *, round_seconds: float, elapsed_seconds: float) -> None:
        """An unfinished job answered well before the round's time: the server did not
        wait (it ignores the parameter)."""
        if not job.terminal and elapsed_seconds < round_seconds / 2:
            self.supported = False


class Watch:
    """A wait for many jobs at once, without a request per job: each round lists the
    unfinished ones by id, MAX_JOB_IDS_PER_POLL to a request (following a page cut
    short by the server's byte budget), and a finished job comes with its result in
    the same answer. Only a job the list does not show (unknown, or gone) or whose
    result it could not serve is read by itself, with GET, which raises what ``get``
    would. The clients send the requests and sleep; this decides the rest.

    Each job is waited for once, however often it is named, in the order first given."""

    def __init__(
        self,
        job_ids: Iterable[str],
        *,
        timeout_seconds: float | None,
        initial_interval: float,
        max_interval: float,
    ) -> None:
        # Unfinished jobs, in the order given, each as last seen (None: not yet).
        self._unfinished: dict[str, Job | None] = dict.fromkeys(job_ids)
        self._finished: dict[str, Job] = {}
        self._listed: set[str] = set()
        self._poll = Poll(
            timeout_seconds=timeout_seconds,
            initial_interval=initial_interval,
            max_interval=max_interval,
        )

    @property
    def waiting(self) -> bool:
        """Whether a job is still unfinished."""
        return bool(self._unfinished)

    def polls(self) -> list[Call[Page[Job]]]:
        """This round's list requests, one per MAX_JOB_IDS_PER_POLL unfinished jobs."""
        self._listed = set()
        ids = list(self._unfinished)
        return [
            list_jobs(status=None, task=None, limit=len(chunk), cursor=None, job_ids=chunk)
            for chunk in (
                ids[i : i + MAX_JOB_IDS_PER_POLL] for i in range(0, len(ids), MAX_JOB_IDS_PER_POLL)
            )
        ]

    def listed(self, call: Call[Page[Job]], page: Page[Job]) -> Call[Page[Job]] | None:
        """Note what a list answered; the request for the rest of its jobs when the
        page ended early (None when it did not)."""
        for job in page.data:
            if job.job_id in self._unfinished:
                self._unfinished[job.job_id] = job
                self._listed.add(job.job_id)
        if page.next_cursor is None:
            return None
        return dataclasses.replace(call, params={**call.params, "cursor": page.next_cursor})

    def to_get(self) -> list[str]:
        """Jobs this round's lists did not settle: not shown, or finished with a result
        the list could not serve. Read each with GET and pass it to ``got``."""
        return [
            job_id
            for job_id, job in self._unfinished.items()
            if job_id not in self._listed or (job is not None and job.result_error is not None)
        ]

    def got(self, job: Job) -> None:
        if job.job_id in self._unfinished:
            self._unfinished[job.job_id] = job
            self._listed.add(job.job_id)

    def finished(self) -> list[Job]:
        """The jobs that finished since the last call, in the order given (no longer
        polled)."""
        done = [job for job in self._unfinished.values() if job is not None and job.terminal]
        for job in done:
            del self._unfinished[job.job_id]
            self._finished[job.job_id] = job
        return done

    def next_wait(self) -> float:
        """The wait before the next round. Raises WaitTimeoutError, naming the jobs
        still unfinished (as last seen) and those that finished, once the time is up."""
        delay = self._poll.next_delay()
        if delay is None:
            unfinished = [job for job in self._unfinished.values() if job is not None]
            raise WaitTimeoutError(
                unfinished[0],
                self._poll.timeout_seconds or 0.0,
                unfinished=unfinished,
                finished=self._finished,
            )
        return delay


def outcome(job: Job, output_type: Any = None) -> Any:
    """A finished job's output (validated as ``output_type`` if given), or the typed
    error that says why there is none."""
    if job.status is JobStatus.FAILED:
        raise JobFailedError(job)
    if job.status is JobStatus.CANCELLED:
        raise JobCancelledError(job)
    if output_type is None:
        return job.result
    try:
        return TypeAdapter(output_type).validate_python(job.result)
    except ValidationError as exc:
        raise ClientError(
            f"job {job.job_id}'s result does not match {getattr(output_type, '__name__', output_type)}"
            f": {exc.error_count()} error(s)"
        ) from exc


def timeout_of(call: Call[Any], default: httpx.Timeout) -> httpx.Timeout | UseClientDefault:
    """The client's timeouts for this call, with its own read timeout where it has one
    (a server-side wait answers only after it: its read timeout is the wait and more)."""
    if call.read_timeout_seconds is None:
        return USE_CLIENT_DEFAULT
    return httpx.Timeout(
        connect=default.connect,
        read=call.read_timeout_seconds,
        write=default.write,
        pool=default.pool,
    )
