"""Client and AsyncClient: ``wait_many`` and ``as_completed`` poll many jobs a list
request at a time (never a GET each in turn), and ``wait``/``result`` take ``timeout``
as concurrent.futures does, ``timeout_seconds`` kept as its old name. Both clients run
against the real app (wiring over SQLite in tmp_path) through ASGI: the sync one from a
thread, its requests served on the test's event loop."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ferryman.cli.serving import app_deps
from ferryman.client import AsyncClient, Client, ClientError, JobStatus, WaitTimeoutError
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

    from ferryman.wiring import Runtime

pytestmark = pytest.mark.timeout(60)

BASE_URL = "http://ferryman.test"
# Polls come quickly, so a test waits on its jobs rather than on the client's backoff.
FAST = {"initial_interval": 0.01, "max_interval": 0.05}


class CountedApp(httpx.AsyncBaseTransport):
    """The app over ASGI, noting each request as (method, path)."""

    def __init__(self, runtime: Runtime) -> None:
        self._asgi = httpx.ASGITransport(app=create_app(app_deps(runtime)))
        self.requests: list[tuple[str, str]] = []
        # The job_id filter of each list request, in order.
        self.named: list[list[str]] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests.append((request.method, request.url.path))
        if request.method == "GET" and request.url.path == "/v1/generations":
            self.named.append(request.url.params.get_list("job_id"))
        return await self._asgi.handle_async_request(request)

    def count(self, method: str, path_start: str) -> int:
        return sum(1 for m, p in self.requests if m == method and p.startswith(path_start))


class AppOnLoop(httpx.BaseTransport):
    """A sync transport that has ``app`` answer on ``loop`` (run by another thread)."""

    def __init__(self, app: CountedApp, loop: asyncio.AbstractEventLoop) -> None:
        self._app = app
        self._loop = loop

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        async def send() -> httpx.Response:
            response = await self._app.handle_async_request(request)
            body = await response.aread()
            return httpx.Response(response.status_code, headers=response.headers, content=body)

        return asyncio.run_coroutine_threadsafe(send(), self._loop).result()


class Either:
    """One client, sync or async, called the same way from async tests (a sync call
    runs on a thread, as a program without an event loop would make it)."""

    def __init__(self, client: Client | AsyncClient) -> None:
        self.client = client

    async def __call__(self, method: str, *args: Any, **kwargs: Any) -> Any:
        bound = getattr(self.client, method)
        if isinstance(self.client, AsyncClient):
            return await bound(*args, **kwargs)
        return await asyncio.to_thread(bound, *args, **kwargs)

    def completed(self, *args: Any, **kwargs: Any) -> Callable[[], Any]:
        """``as_completed(...)``, as a function that awaits its next job (None at the end)."""
        if isinstance(self.client, AsyncClient):
            iterator = self.client.as_completed(*args, **kwargs)
            return lambda: anext(iterator, None)
        sync_iterator = self.client.as_completed(*args, **kwargs)
        return lambda: asyncio.to_thread(next, sync_iterator, None)


@pytest.fixture
def list_max_bytes() -> int:
    """FERRYMAN_LIST_MAX_BYTES (a test may parametrize it)."""
    return 1_048_576


@pytest.fixture
async def runtime(tmp_path: Path, list_max_bytes: int) -> AsyncIterator[Runtime]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/results",
        receive_wait_seconds=0,
        tenant_rate_per_second=0,
        list_max_bytes=list_max_bytes,
    )
    async with open_runtime(settings) as opened:
        yield opened


@pytest.fixture
def app(runtime: Runtime) -> CountedApp:
    return CountedApp(runtime)


@pytest.fixture(params=["sync", "async"])
async def either(
    request: pytest.FixtureRequest, runtime: Runtime, app: CountedApp
) -> AsyncIterator[Either]:
    key = await runtime.api_keys.create("acme")
    if request.param == "sync":
        transport = AppOnLoop(app, asyncio.get_running_loop())
        with Client(BASE_URL, key, transport=transport, retry_budget_seconds=0) as client:
            yield Either(client)
    else:
        async with AsyncClient(BASE_URL, key, transport=app, retry_budget_seconds=0) as aclient:
            yield Either(aclient)


async def submitted(either: Either, count: int, prompt: str = "job") -> list[str]:
    outcomes = await either(
        "submit_many",
        [{"task": "generate", "input": {"prompt": f"{prompt} {i}"}} for i in range(count)],
    )
    return [outcome.job_id for outcome in outcomes]


async def run_jobs(runtime: Runtime) -> None:
    await runtime.new_worker().run_until_idle()


async def test_wait_many_gives_each_finished_job_once_in_the_order_first_given(
    either: Either, runtime: Runtime
) -> None:
    a, b, c = await submitted(either, 3)
    await run_jobs(runtime)

    jobs = await either("wait_many", [c, a, b, a, c], **FAST)

    assert list(jobs) == [c, a, b]
    assert all(job.status is JobStatus.SUCCEEDED for job in jobs.values())
    assert jobs[a].result["text"] == "echo: job 0"


async def test_as_completed_yields_each_job_as_it_finishes(
    either: Either, runtime: Runtime
) -> None:
    first, second = await submitted(either, 2)
    await either("cancel", second)
    next_job = either.completed([first, second, second], timeout=30, **FAST)

    early = await next_job()
    waiting = asyncio.ensure_future(next_job())
    await run_jobs(runtime)
    late = await waiting

    assert (early.job_id, early.status) == (second, JobStatus.CANCELLED)
    assert (late.job_id, late.status) == (first, JobStatus.SUCCEEDED)
    assert late.result["text"] == "echo: job 0"
    assert await next_job() is None


async def test_many_jobs_are_polled_a_hundred_to_a_request(
    either: Either, runtime: Runtime, app: CountedApp
) -> None:
    ids = await submitted(either, 150)
    waiting = asyncio.ensure_future(either("wait_many", ids, timeout=30, **FAST))
    await run_jobs(runtime)
    jobs = await waiting

    assert list(jobs) == ids
    assert {job.status for job in jobs.values()} == {JobStatus.SUCCEEDED}
    # Every request was a list of at most 100 ids, never a GET of one job; the first
    # round asked for the 150 in two.
    assert app.count("GET", "/v1/generations/") == 0
    assert app.named[:2] == [ids[:100], ids[100:]]
    assert max(len(named) for named in app.named) == 100


# The smallest budget: a page of jobs with ~1 KB results holds one.
@pytest.mark.parametrize("list_max_bytes", [1024])
async def test_a_page_cut_short_by_the_server_s_budget_is_followed_in_the_same_round(
    either: Either, runtime: Runtime, app: CountedApp
) -> None:
    ids = await submitted(either, 3, prompt="x" * 1000)
    await run_jobs(runtime)

    jobs = await either("wait_many", ids, **FAST)

    assert [len(job.result["text"]) > 1000 for job in jobs.values()] == [True] * 3
    assert app.named == [ids, ids, ids]  # one round: the first page, then its cursor twice
    assert app.count("GET", "/v1/generations/") == 0


async def test_no_jobs_are_waited_for_without_a_request(either: Either, app: CountedApp) -> None:
    assert await either("wait_many", []) == {}
    assert await either.completed([])() is None
    assert app.requests == []


async def test_a_timeout_names_the_jobs_still_unfinished(either: Either) -> None:
    a, b, c = await submitted(either, 3)  # no worker runs
    await either("cancel", b)

    with pytest.raises(WaitTimeoutError) as caught:
        await either("wait_many", [a, b, c], timeout=0.05, **FAST)

    assert isinstance(caught.value, TimeoutError)
    assert [job.job_id for job in caught.value.unfinished] == [a, c]
    assert caught.value.job.job_id == a
    assert caught.value.job.status is JobStatus.QUEUED
    assert list(caught.value.finished) == [b]
    assert "2 (of 3) jobs unfinished" in str(caught.value)


async def test_as_completed_yields_what_finished_then_times_out(either: Either) -> None:
    a, b = await submitted(either, 2)
    await either("cancel", b)
    next_job = either.completed([a, b], timeout=0.05, **FAST)

    assert (await next_job()).job_id == b
    with pytest.raises(TimeoutError, match=r"1 \(of 2\) jobs unfinished"):
        await next_job()


async def test_a_job_that_is_not_the_caller_s_is_not_found(
    either: Either, runtime: Runtime
) -> None:
    [mine] = await submitted(either, 1)
    await either("cancel", mine)
    other_key = await runtime.api_keys.create("globex")
    async with AsyncClient(BASE_URL, other_key, transport=CountedApp(runtime)) as other:
        theirs = (await other.submit("generate", {"prompt": "theirs"})).job_id

    with pytest.raises(ClientError) as caught:
        await either("wait_many", [mine, theirs], **FAST)

    assert (caught.value.status, caught.value.code) == (404, "not_found")


async def test_wait_and_result_take_timeout_and_its_old_name(
    either: Either, runtime: Runtime
) -> None:
    [job_id] = await submitted(either, 1)

    with pytest.raises(WaitTimeoutError) as by_timeout:
        await either("wait", job_id, timeout=0.05, **FAST)
    with pytest.raises(TimeoutError):
        await either("result", job_id, timeout=0.05)
    with pytest.raises(WaitTimeoutError):
        await either("wait", job_id, timeout_seconds=0.05, **FAST)
    await run_jobs(runtime)

    assert by_timeout.value.unfinished == [by_timeout.value.job]
    assert (await either("wait", job_id, timeout=None)).status is JobStatus.SUCCEEDED
    assert (await either("result", job_id, timeout=5)) == {"text": "echo: job 0"}
    assert (await either("result", job_id, timeout_seconds=5)) == {"text": "echo: job 0"}


@pytest.mark.parametrize("method", ["wait", "result"])
async def test_timeout_and_its_old_name_together_are_refused(either: Either, method: str) -> None:
    with pytest.raises(TypeError, match="not both"):
        await either(method, "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV", timeout=1, timeout_seconds=1)
