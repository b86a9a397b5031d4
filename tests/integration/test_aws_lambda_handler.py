"""The Lambda handler, end to end: events of the documented SQS shape built from real
deliveries of the engine's queue (SQLite here, in tmp_path), run by the handler as a
warm container would, with the simulated model.

The handler opens its own engine from FERRYMAN_* variables, as a deployed function
does; the test opens another on the same database to submit jobs, receive their
messages and look at the outcome. Each side runs on its own event loop, one after
the other, so the tests are plain functions.
"""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from ferryman import aws_lambda
from ferryman.aws_lambda import batch as lambda_batch
from ferryman.config import Settings, load_settings
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import JobStatus
from ferryman.observability.logging import reset_logging
from ferryman.ports.control import Switch
from ferryman.ports.queue import QueueMessage
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services import delivery as delivery_steps
from ferryman.services.intake import SubmitRequest
from ferryman.services.ledger import JobLedger
from ferryman.wiring import open_runtime
from lambda_events import facts_of, invoke, sqs_event, sqs_record

if TYPE_CHECKING:
    from collections.abc import Coroutine, Iterator
    from pathlib import Path

    from ferryman.ports.provider import ModelRequest, ModelResponse
    from ferryman.ports.queue import Delivery, QueueStats

VISIBILITY_SECONDS = 60.0
T = TypeVar("T")


@dataclass
class Site:
    """The deployment the handler runs against, and a way in for the test."""

    settings: Settings
    sim_calls: list[str]

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run(coro)

    def submit(self, *inputs: dict[str, Any]) -> list[Delivery]:
        """Submit one generate job per input and receive their messages, as the event
        source mapping would."""

        async def go() -> list[Delivery]:
            async with open_runtime(self.settings) as runtime:
                for job_input in inputs:
                    await runtime.intake.submit(
                        tenant_id="t1", request=SubmitRequest("generate", job_input)
                    )
                return await runtime.queue.receive(
                    max_messages=len(inputs), visibility_timeout_seconds=VISIBILITY_SECONDS
                )

        deliveries = self.run(go())
        assert len(deliveries) == len(inputs)
        return deliveries

    def redeliver(self, delivery: Delivery) -> Delivery:
        """The same message received again (its visibility ran out)."""

        async def go() -> Delivery:
            async with open_runtime(self.settings) as runtime:
                assert await runtime.queue.change_visibility(delivery.receipt, timeout_seconds=0)
                (again,) = await runtime.queue.receive(
                    max_messages=1, visibility_timeout_seconds=VISIBILITY_SECONDS
                )
                return again

        return self.run(go())

    def status(self, delivery: Delivery) -> JobStatus:
        async def go() -> JobStatus:
            async with open_runtime(self.settings) as runtime:
                job = await runtime.store.get(delivery.message.job_id)
                assert job is not None
                return job.status

        return self.run(go())

    def queue_stats(self) -> QueueStats:
        async def go() -> QueueStats:
            async with open_runtime(self.settings) as runtime:
                return await runtime.queue.stats()

        return self.run(go())

    def pause_workers(self) -> None:
        async def go() -> None:
            async with open_runtime(self.settings) as runtime:
                await runtime.control.set_paused(
                    Switch.WORKERS, True, actor="test", now=runtime.clock.now()
                )

        self.run(go())


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Site]:
    for name, value in {
        "FERRYMAN_DATABASE_URL": f"sqlite:///{tmp_path / 'ferryman.db'}",
        "FERRYMAN_RESULTS_URL": f"file://{tmp_path / 'results'}",
        "FERRYMAN_SIM_SCRIPTS": "true",
        "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS": "20",
    }.items():
        monkeypatch.setenv(name, value)
    # The outcome's write is tried again after these pauses; none here.
    monkeypatch.setattr(delivery_steps, "PERSIST_RETRY_DELAYS_SECONDS", (0.0, 0.0, 0.0))
    sim_calls: list[str] = []
    invoke = SimulatedProvider.invoke

    async def counted(
        self: SimulatedProvider, request: ModelRequest, *, timeout_seconds: float
    ) -> ModelResponse:
        sim_calls.append(request.job_id or "")
        return await invoke(self, request, timeout_seconds=timeout_seconds)

    monkeypatch.setattr(SimulatedProvider, "invoke", counted)
    settings = load_settings()
    # The handler's container is the module's, as in a deployed function: each test
    # starts it cold and leaves it closed.
    aws_lambda.shutdown()
    yield Site(settings=settings, sim_calls=sim_calls)
    aws_lambda.shutdown()
    reset_logging()


def test_a_batch_that_all_succeeds_names_no_record_and_deletes_no_message(site: Site) -> None:
    deliveries = site.submit({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"})
    assert invoke(sqs_event(facts_of(d) for d in deliveries)) == set()
    assert [site.status(d) for d in deliveries] == [JobStatus.SUCCEEDED] * 3
    assert len(site.sim_calls) == 3
    # Deleting is the event source mapping's: all three messages are still held.
    stats = site.queue_stats()
    assert stats.visible + stats.in_flight == 3


def test_exactly_the_records_not_durable_are_named(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, retried, failed, unwritable = site.submit(
        {"prompt": "ok"},
        {"prompt": "transient", "simulate": {"script": ["server_error", "ok"]}},
        {"prompt": "permanent", "simulate": {"script": ["bad_request"]}},
        {"prompt": "its result cannot be published"},
    )
    succeed = JobLedger.succeed

    async def store_away_for_one(self: JobLedger, job_id: str, **kwargs: Any) -> Any:
        if job_id == unwritable.message.job_id:
            raise StoreUnavailableError("the store is away")
        return await succeed(self, job_id, **kwargs)

    monkeypatch.setattr(JobLedger, "succeed", store_away_for_one)
    ids = {d.receipt: f"id-{n}" for n, d in enumerate((ok, retried, failed, unwritable))}
    event = sqs_event(facts_of(d, ids[d.receipt]) for d in (ok, retried, failed, unwritable))

    named = invoke(event)

    # The retry is recorded, but the message itself carries it (hidden until due).
    assert named == {ids[retried.receipt], ids[unwritable.receipt]}
    assert site.status(ok) is JobStatus.SUCCEEDED
    assert site.status(retried) is JobStatus.RETRY_SCHEDULED
    assert site.status(failed) is JobStatus.FAILED
    assert site.status(unwritable) is JobStatus.PROCESSING  # its lease runs out; retried then


def test_an_unparseable_record_fails_alone_and_comes_back_at_once(site: Site) -> None:
    good, spoiled = site.submit({"prompt": "good"}, {"prompt": "its body is lost"})
    records = [
        sqs_record("good", good.receipt, good.message.to_body(), 1, good.sent_at),
        # A real message whose body no worker can read.
        sqs_record("not-json", spoiled.receipt, "{not json", 1, spoiled.sent_at),
        sqs_record("no-job", "receipt-x", '{"tenant_id": "t1"}', 1, spoiled.sent_at),
        sqs_record("array", "receipt-y", "[1, 2]", 1, spoiled.sent_at),
        {**sqs_record("no-attributes", "receipt-z", good.message.to_body(), 1, 0), "attributes": 7},
        {
            **sqs_record("no-receipt", "receipt-w", good.message.to_body(), 1, 0),
            "receiptHandle": "",
        },
    ]

    named = invoke({"Records": records})

    assert named == {"not-json", "no-job", "array", "no-attributes", "no-receipt"}
    assert site.status(good) is JobStatus.SUCCEEDED
    assert len(site.sim_calls) == 1
    # Visible again now: its receives run out in seconds and redrive moves it to the DLQ.
    assert site.queue_stats().visible == 1
    assert site.status(spoiled) is JobStatus.QUEUED


def test_a_duplicate_of_a_finished_job_goes_without_a_model_call(site: Site) -> None:
    (first,) = site.submit({"prompt": "once"})
    assert invoke(sqs_event([facts_of(first, "m-1")])) == set()
    assert len(site.sim_calls) == 1

    again = site.redeliver(first)
    assert again.receive_count == 2
    assert invoke(sqs_event([facts_of(again, "m-1")])) == set()

    assert len(site.sim_calls) == 1
    assert site.status(first) is JobStatus.SUCCEEDED


def test_an_attempt_that_cannot_finish_in_time_is_not_started(site: Site) -> None:
    deliveries = site.submit({"prompt": "a"}, {"prompt": "b"})
    event = sqs_event(facts_of(d, f"m-{n}") for n, d in enumerate(deliveries))

    assert invoke(event, remaining_ms=1000) == {"m-0", "m-1"}

    assert site.sim_calls == []
    assert [site.status(d) for d in deliveries] == [JobStatus.QUEUED] * 2


def test_the_time_needed_is_the_attempt_timeout_plus_the_writes_and_a_margin(
    site: Site,
) -> None:
    deliveries = site.submit({"prompt": "a"})
    needed_ms = int(
        (
            20
            + sum(delivery_steps.PERSIST_RETRY_DELAYS_SECONDS)
            + lambda_batch.TIMEOUT_MARGIN_SECONDS
        )
        * 1000
    )
    event = sqs_event([facts_of(deliveries[0], "m-0")])
    assert invoke(event, remaining_ms=needed_ms - 1) == {"m-0"}
    assert invoke(event, remaining_ms=needed_ms + 1) == set()
    assert site.status(deliveries[0]) is JobStatus.SUCCEEDED


def test_paused_workers_start_nothing_and_put_each_job_back_for_later(site: Site) -> None:
    deliveries = site.submit({"prompt": "a"}, {"prompt": "b"})
    site.pause_workers()

    named = invoke(sqs_event(facts_of(d) for d in deliveries))

    # Put back as new messages (a pause must not spend the redrive's receives), so
    # these may go.
    assert named == set()
    assert site.sim_calls == []
    assert [site.status(d) for d in deliveries] == [JobStatus.QUEUED] * 2
    stats = site.queue_stats()
    assert stats.visible + stats.in_flight == 4


def test_the_engine_is_opened_once_per_container(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = open_runtime

    def counting_open(settings: Settings, **kwargs: Any) -> Any:
        opened.append(settings.database_url)
        return real_open(settings, **kwargs)

    monkeypatch.setattr("ferryman.aws_lambda.warm.open_runtime", counting_open)
    for prompt in ("a", "b", "c"):
        (delivery,) = site.submit({"prompt": prompt})
        assert invoke(sqs_event([facts_of(delivery)])) == set()
    assert len(opened) == 1


def test_an_open_that_fails_names_every_record_and_is_tried_again(
    site: Site, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    deliveries = site.submit({"prompt": "a"})
    event = sqs_event([facts_of(deliveries[0], "m-0")])
    # A worker never creates its database: a mistyped path opens nothing.
    monkeypatch.setenv("FERRYMAN_DATABASE_URL", f"sqlite:///{tmp_path / 'missing.db'}")
    assert invoke(event) == {"m-0"}

    monkeypatch.setenv("FERRYMAN_DATABASE_URL", site.settings.database_url)
    assert invoke(event) == set()
    assert site.status(deliveries[0]) is JobStatus.SUCCEEDED


def test_a_delivery_that_raises_fails_its_record_only(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken, fine = site.submit({"prompt": "a"}, {"prompt": "b"})
    get = JobLedger.get

    async def broken_read(self: JobLedger, job_id: str, **kwargs: Any) -> Any:
        if job_id == broken.message.job_id:
            raise sqlite3.DatabaseError("a driver error nobody translated")
        return await get(self, job_id, **kwargs)

    monkeypatch.setattr(JobLedger, "get", broken_read)
    assert invoke(sqs_event([facts_of(broken, "m-0"), facts_of(fine, "m-1")])) == {"m-0"}
    assert site.status(fine) is JobStatus.SUCCEEDED


def test_an_unexpected_failure_names_every_record_not_yet_known_to_go(
    site: Site, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    deliveries = site.submit({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"})

    async def breaks_midway(self: Any, records: Any, *, goes: set[str], **_: Any) -> None:
        goes.add(records[0].message_id)
        raise RuntimeError("customer text that must not be logged")

    monkeypatch.setattr(lambda_batch.BatchRunner, "run", breaks_midway)
    event = sqs_event(facts_of(d, f"m-{n}") for n, d in enumerate(deliveries))

    assert invoke(event) == {"m-1", "m-2"}
    captured = capsys.readouterr()
    assert "lambda.invocation_failed" in captured.out + captured.err
    assert "customer text" not in captured.out + captured.err


@pytest.mark.parametrize(
    "event",
    [None, {}, {"Records": "x"}, {"Records": [None, 7, {"body": "{}"}]}, [], "text"],
    ids=["none", "empty", "records-not-a-list", "records-without-ids", "list", "text"],
)
def test_an_event_of_another_shape_names_nothing_and_never_raises(site: Site, event: Any) -> None:
    assert aws_lambda.handler(event, None) == {"batchItemFailures": []}


def test_attributes_complete_a_lean_body(site: Site) -> None:
    (delivery,) = site.submit({"prompt": "a"})
    lean = QueueMessage(job_id=delivery.message.job_id, tenant_id="t1").to_body()
    record = sqs_record(
        "m-0",
        delivery.receipt,
        lean.replace(',"payload_version":1', ""),
        1,
        delivery.sent_at,
        message_attributes={
            "payload_version": "1",
            "traceparent": "00-" + "a" * 32 + "-" + "b" * 16 + "-01",
        },
    )
    assert invoke({"Records": [record]}) == set()
    assert site.status(delivery) is JobStatus.SUCCEEDED
