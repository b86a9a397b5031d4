"""Every method of ``Client`` and ``AsyncClient`` against a real `ferryman serve`: the
same tests run on both, and both have exactly the same methods."""

from __future__ import annotations

import asyncio
import inspect
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pytest
from pydantic import BaseModel

from ferryman import (
    AsyncClient,
    Attempt,
    Client,
    ClientError,
    Event,
    Job,
    JobCancelledError,
    JobFailedError,
    JobHistory,
    JobStatus,
    Page,
    Submitted,
    WaitTimeoutError,
)
from ferryman.client import FailureClass

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from conftest import LiveServer

pytestmark = pytest.mark.slow

UNKNOWN_JOB = "gen_01ARZ3NDEKTSV4RRFFQ69G5FAV"
SLOW = {"prompt": "slow", "simulate": {"latency_ms": 20000}}


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

    async def all_jobs(self, **kwargs: Any) -> list[Job]:
        if isinstance(self.client, AsyncClient):
            return [job async for job in self.client.iter_jobs(**kwargs)]
        return await asyncio.to_thread(lambda: list(self.client.iter_jobs(**kwargs)))  # type: ignore[union-attr]


@pytest.fixture(params=["sync", "async"])
async def either(request: pytest.FixtureRequest, live_server: LiveServer) -> AsyncIterator[Either]:
    key = live_server.new_key()
    if request.param == "sync":
        with Client(live_server.url, key) as client:
            yield Either(client)
    else:
        async with AsyncClient(live_server.url, key) as aclient:
            yield Either(aclient)


def test_both_clients_have_the_same_methods_and_signatures() -> None:
    def public(cls: type) -> dict[str, inspect.Signature]:
        return {
            name: inspect.signature(member)
            for name, member in vars(cls).items()
            if callable(member) and not name.startswith("_")
        }

    sync, asynchronous = public(Client), public(AsyncClient)
    assert set(sync) - {"close"} == set(asynchronous) - {"aclose"}
    for name in set(sync) & set(asynchronous):
        assert sync[name].parameters == asynchronous[name].parameters, name
    assert inspect.signature(Client.__init__).parameters.keys() == (
        inspect.signature(AsyncClient.__init__).parameters.keys()
    )


async def test_submit_returns_a_typed_submission_and_a_replay_says_so(either: Either) -> None:
    first = await either("submit", "generate", {"prompt": "hi"}, idempotency_key="k1")
    again = await either("submit", "generate", {"prompt": "hi"}, idempotency_key="k1")

    assert isinstance(first, Submitted)
    assert first.job_id.startswith("gen_")
    assert first.status is JobStatus.QUEUED
    assert first.created_at is not None and first.created_at.tzinfo is not None
    assert abs((datetime.now(UTC) - first.created_at).total_seconds()) < 60
    assert first.replayed is False
    assert (again.job_id, again.replayed) == (first.job_id, True)


async def test_get_wait_and_result(either: Either) -> None:
    submitted = await either("submit", "generate", {"prompt": "hello"}, metadata={"k": 1})

    done = await either("wait", submitted.job_id, timeout_seconds=30)
    job = await either("get", submitted.job_id)
    output = await either("result", submitted.job_id, timeout_seconds=30)

    assert isinstance(done, Job) and isinstance(job, Job)
    assert done.status is JobStatus.SUCCEEDED and done.terminal
    assert (job.task, job.model, job.metadata, job.attempt_count) == (
        "generate",
        "sim",
        {"k": 1},
        1,
    )
    assert job.completed_at is not None and job.completed_at >= job.created_at  # type: ignore[operator]
    assert output == {"text": "echo: hello"}
    assert job.api_json["result"] == output


class Text(BaseModel):
    text: str


async def test_result_validates_into_the_type_asked_for(either: Either) -> None:
    submitted = await either("submit", "generate", {"prompt": "typed"})
    output = await either("result", submitted.job_id, timeout_seconds=30, output_type=Text)
    assert output == Text(text="echo: typed")


async def test_result_of_a_failed_job_raises_with_its_failure_class(either: Either) -> None:
    script = {"prompt": "x", "simulate": {"script": ["refuse"]}}
    submitted = await either("submit", "generate", script)
    with pytest.raises(JobFailedError) as caught:
        await either("result", submitted.job_id, timeout_seconds=30)
    assert caught.value.failure_class is FailureClass.SAFETY_REJECTED
    assert caught.value.job.status is JobStatus.FAILED
    assert caught.value.error_code
    assert isinstance(caught.value, ClientError)


async def test_cancel_then_result_raises_cancelled(either: Either) -> None:
    submitted = await either("submit", "generate", SLOW)
    cancelled = await either("cancel", submitted.job_id)
    assert isinstance(cancelled, Job)
    assert cancelled.status is JobStatus.CANCELLED or cancelled.cancel_requested
    with pytest.raises(JobCancelledError) as caught:
        await either("result", submitted.job_id, timeout_seconds=30)
    assert caught.value.job.status is JobStatus.CANCELLED
    with pytest.raises(ClientError) as again:
        await either("cancel", submitted.job_id)
    assert (again.value.status, again.value.code) == (409, "already_terminal")


async def test_wait_runs_out_with_the_job_as_it_was(either: Either) -> None:
    submitted = await either("submit", "generate", SLOW)
    with pytest.raises(WaitTimeoutError) as caught:
        await either("wait", submitted.job_id, timeout_seconds=0.2, initial_interval=0.05)
    assert caught.value.job.status in {JobStatus.QUEUED, JobStatus.PROCESSING}
    await either("cancel", submitted.job_id)


async def test_events_are_typed(either: Either) -> None:
    script = {"prompt": "x", "simulate": {"script": ["server_error", "ok"]}}
    submitted = await either("submit", "generate", script)
    await either("wait", submitted.job_id, timeout_seconds=30)

    history = await either("events", submitted.job_id)

    assert isinstance(history, JobHistory)
    assert all(isinstance(event, Event) for event in history.events)
    assert [e.seq for e in history.events] == sorted(e.seq for e in history.events)
    assert history.events[0].kind == "ACCEPTED"
    assert all(e.at.tzinfo is not None for e in history.events)
    first, second = history.attempts
    assert isinstance(first, Attempt)
    assert (first.attempt_no, first.outcome, first.failure_class) == (
        1,
        "retry",
        FailureClass.TRANSIENT,
    )
    assert (second.attempt_no, second.outcome) == (2, "succeeded")
    assert second.output_tokens and second.latency_ms is not None


async def test_list_a_page_and_iterate_over_every_page(either: Either) -> None:
    ids = [(await either("submit", "generate", {"prompt": f"p{i}"})).job_id for i in range(5)]

    page = await either("list", limit=2)
    everything = await either.all_jobs(page_size=2)
    queued = await either("list", status=JobStatus.QUEUED, task="generate", limit=200)

    assert isinstance(page, Page)
    assert [job.job_id for job in page.data] == ids[::-1][:2]
    assert page.next_cursor == ids[3]
    assert [job.job_id for job in everything] == ids[::-1]
    assert {job.job_id for job in queued.data} <= set(ids)


async def test_an_unknown_job_is_a_404(either: Either) -> None:
    with pytest.raises(ClientError) as caught:
        await either("get", UNKNOWN_JOB)
    assert (caught.value.status, caught.value.code) == (404, "not_found")


async def test_a_job_id_cannot_reach_another_route(either: Either) -> None:
    for bad in ("../tasks", "x/events", ".."):
        with pytest.raises(ClientError) as caught:
            await either("get", bad)
        assert caught.value.status == 404, bad


async def test_a_webhook_url_needs_a_secret_and_a_reachable_public_host(either: Either) -> None:
    with pytest.raises(ClientError) as no_secret:
        await either("submit", "generate", {"prompt": "hi"}, webhook_url="https://hooks.test/x")
    assert (no_secret.value.status, no_secret.value.code) == (422, "webhook_secret_required")

    first = await either("rotate_webhook_secret")
    second = await either("rotate_webhook_secret")
    assert first.secret.startswith("whsec_") and second.secret.startswith("whsec_")
    assert first.secret != second.secret
    assert second.previous_valid_for_seconds == 86_400

    with pytest.raises(ClientError) as refused:
        await either("submit", "generate", {"prompt": "hi"}, webhook_url="https://127.0.0.1/x")
    assert (refused.value.status, refused.value.code) == (422, "webhook_url_refused")
