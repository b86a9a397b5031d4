"""The Lambda handler on the AWS engine: events built from real messages of the
emulator's SQS queue, run by ``ferryman.aws_lambda.handler`` as a deployed function
runs it.

Jobs go in through the real intake on ``aws://NAME``; their messages are received
from the job queue with the raw aiobotocore client, as the event source mapping
receives them (every system and message attribute), so each record's messageId,
receiptHandle, attributes and typed messageAttributes are the ones SQS made
(tests/lambda_events.py turns them into the documented event). The handler opens its
own engine from FERRYMAN_* variables, as the function does; the mapping's part
(deleting every record the answer does not name) is played by the test.

moto keeps SQS's time on the wall clock: messages are held with a visibility the
tests cannot outlast (60 s) unless they make one visible themselves, and every wait
for SQS to show something is for a condition, with a generous deadline.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import pytest

from aws_sites import QueuesOf
from ferryman import aws_lambda
from ferryman.config import Settings, load_settings
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import JobStatus
from ferryman.observability.logging import reset_logging
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services import delivery as delivery_steps
from ferryman.services.intake import SubmitRequest
from ferryman.services.ledger import JobLedger
from ferryman.wiring import open_runtime
from lambda_events import event_of_messages, invoke

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator, Sequence

    from ferryman.ports.provider import ModelRequest, ModelResponse

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
Message = dict[str, Any]  # one message as SQS's ReceiveMessage returned it

# How long the test's receives hide a message: longer than any test waits.
HELD_SECONDS = 60
DEADLINE_SECONDS = 20.0
MAX_RECEIVES = 3
TRACEPARENT = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


@dataclass
class Site(QueuesOf):
    """The deployment: ``aws://NAME`` on the emulator, the handler's settings, and the
    test's ways in (the intake, the raw queue, the job records)."""

    settings: Settings
    url: str
    sim_calls: list[str]

    def submit(self, *inputs: dict[str, Any]) -> list[str]:
        """Submit one generate job per input through the intake; their ids."""

        async def go() -> list[str]:
            async with open_runtime(self.settings) as runtime:
                ids = []
                for job_input in inputs:
                    submitted = await runtime.intake.submit(
                        tenant_id="t1",
                        request=SubmitRequest("generate", job_input),
                        correlation_id="corr-1",
                        traceparent=TRACEPARENT,
                    )
                    ids.append(submitted.job.job_id)
                return ids

        return self.run(go())

    def send_raw(self, body: str, *, dlq: bool = False, **arguments: Any) -> None:
        """A message of any body, sent to the queue (or its DLQ) as anyone could."""

        async def use(sqs: Any, url: str) -> None:
            await sqs.send_message(QueueUrl=url, MessageBody=body, **arguments)

        self._sqs(use, dlq=dlq)

    def receive(self, count: int, *, hidden_seconds: int = HELD_SECONDS) -> list[Message]:
        """``count`` messages of the job queue, as the event source mapping receives
        them: every attribute, hidden ``hidden_seconds``."""
        messages: list[Message] = []
        give_up = time.monotonic() + DEADLINE_SECONDS
        while len(messages) < count:
            assert time.monotonic() < give_up, f"{len(messages)} of {count} messages came"
            messages += self.receive_once(count - len(messages), hidden_seconds=hidden_seconds)
        return messages

    def receive_once(self, count: int, *, hidden_seconds: int = HELD_SECONDS) -> list[Message]:
        """One receive of at most ``count`` messages, long-polling a second."""

        async def use(sqs: Any, url: str) -> list[Message]:
            response = await sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=min(10, count),
                VisibilityTimeout=hidden_seconds,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            return list(response.get("Messages") or [])

        return self._sqs(use)

    def show_again(self, message: Message) -> None:
        """Make a held message visible at once (its visibility ran out)."""

        async def use(sqs: Any, url: str) -> None:
            await sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
            )

        self._sqs(use)

    def event(self, messages: Sequence[Message]) -> dict[str, Any]:
        async def use(sqs: Any, url: str) -> str:
            response = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            return str(response["Attributes"]["QueueArn"])

        return event_of_messages(messages, queue_arn=self._sqs(use))

    def settle(self, event: dict[str, Any], named: set[str]) -> None:
        """The mapping's part: delete the message of every record not named."""

        async def use(sqs: Any, url: str) -> None:
            for record in event["Records"]:
                if record["messageId"] not in named:
                    await sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])

        self._sqs(use)

    def counts(self, *, dlq: bool = False) -> dict[str, int]:
        """The queue's visible, in-flight and delayed messages."""

        async def use(sqs: Any, url: str) -> dict[str, int]:
            names = {
                "ApproximateNumberOfMessages": "visible",
                "ApproximateNumberOfMessagesNotVisible": "in_flight",
                "ApproximateNumberOfMessagesDelayed": "delayed",
            }
            response = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=list(names))
            return {names[k]: int(v) for k, v in response["Attributes"].items()}

        return self._sqs(use, dlq=dlq)

    def until_counts(self, expected: dict[str, int], *, dlq: bool = False) -> None:
        """Wait for the queue to show ``expected`` (SQS's counts are approximate)."""
        give_up = time.monotonic() + DEADLINE_SECONDS
        while (seen := self.counts(dlq=dlq)) != expected:
            assert time.monotonic() < give_up, f"the queue shows {seen}, not {expected}"
            time.sleep(0.1)

    def status(self, job_id: str) -> JobStatus:
        async def go() -> JobStatus:
            async with open_runtime(self.settings) as runtime:
                job = await runtime.store.get(job_id)
                assert job is not None
                return job.status

        return self.run(go())


def job_id_of(message: Message) -> str:
    return str(json.loads(message["Body"])["job_id"])


def by_job(messages: Sequence[Message], job_ids: Sequence[str]) -> list[Message]:
    """The messages in the order of ``job_ids`` (SQS returns them in its own)."""
    found = {job_id_of(m): m for m in messages}
    return [found[job_id] for job_id in job_ids]


@pytest.fixture
def site(
    aws_url_factory: Callable[..., Coroutine[Any, Any, str]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Site]:
    url = asyncio.run(aws_url_factory(max_receives=MAX_RECEIVES))
    for name, value in {
        # Results are kept in the table (the aws engine's default with no RESULTS_URL).
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_MAX_RECEIVES": str(MAX_RECEIVES),
        "FERRYMAN_SIM_SCRIPTS": "true",
        "FERRYMAN_ATTEMPT_TIMEOUT_SECONDS": "20",
        # A retry is due a second later (the worker hides its message until then).
        "FERRYMAN_RETRY_INITIAL_INTERVAL_SECONDS": "1",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FERRYMAN_RESULTS_URL", raising=False)
    # The outcome's write is tried again after these pauses; none here.
    monkeypatch.setattr(delivery_steps, "PERSIST_RETRY_DELAYS_SECONDS", (0.0, 0.0, 0.0))
    sim_calls: list[str] = []
    invoke_model = SimulatedProvider.invoke

    async def counted(
        self: SimulatedProvider, request: ModelRequest, *, timeout_seconds: float
    ) -> ModelResponse:
        sim_calls.append(request.job_id or "")
        return await invoke_model(self, request, timeout_seconds=timeout_seconds)

    monkeypatch.setattr(SimulatedProvider, "invoke", counted)
    # The handler's container is the module's, as in a deployed function: each test
    # starts it cold and leaves it closed.
    aws_lambda.shutdown()
    yield Site(settings=load_settings(), url=url, sim_calls=sim_calls)
    aws_lambda.shutdown()
    reset_logging()


def test_a_batch_that_all_succeeds_names_no_record_and_deletes_no_message(site: Site) -> None:
    job_ids = site.submit({"prompt": "a"}, {"prompt": "b"}, {"prompt": "c"})
    messages = site.receive(3)
    event = site.event(messages)
    # The records are SQS's own: its message ids, and the attributes the engine sent.
    record = event["Records"][0]
    assert record["messageId"] == messages[0]["MessageId"]
    assert record["attributes"]["ApproximateReceiveCount"] == "1"
    assert record["messageAttributes"]["traceparent"]["stringValue"] == TRACEPARENT
    assert record["messageAttributes"]["payload_version"]["dataType"] == "Number"

    assert invoke(event) == set()

    assert [site.status(job_id) for job_id in job_ids] == [JobStatus.SUCCEEDED] * 3
    assert sorted(site.sim_calls) == sorted(job_ids)
    # Deleting is the mapping's: the three messages are still in flight...
    assert site.counts() == {"visible": 0, "in_flight": 3, "delayed": 0}
    # ...and their receipts still delete them, as the mapping then does.
    site.settle(event, named=set())
    site.until_counts({"visible": 0, "in_flight": 0, "delayed": 0})


def test_exactly_the_records_not_durable_are_named(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_ids = site.submit(
        {"prompt": "ok"},
        {"prompt": "transient", "simulate": {"script": ["server_error", "ok"]}},
        {"prompt": "permanent", "simulate": {"script": ["bad_request"]}},
        {"prompt": "its result cannot be published"},
    )
    ok, retried, failed, unwritable = job_ids
    succeed = JobLedger.succeed

    async def store_away_for_one(self: JobLedger, job_id: str, **kwargs: Any) -> Any:
        if job_id == unwritable:
            raise StoreUnavailableError("the store is away")
        return await succeed(self, job_id, **kwargs)

    monkeypatch.setattr(JobLedger, "succeed", store_away_for_one)
    messages = by_job(site.receive(4), job_ids)
    event = site.event(messages)
    message_id = {job_id: m["MessageId"] for job_id, m in zip(job_ids, messages, strict=True)}

    named = invoke(event)

    # The retry is recorded, but its message carries it (hidden until due); the
    # unwritable success is not durable. The provider's refusal is a durable failure.
    assert named == {message_id[retried], message_id[unwritable]}
    assert site.status(ok) is JobStatus.SUCCEEDED
    assert site.status(retried) is JobStatus.RETRY_SCHEDULED
    assert site.status(failed) is JobStatus.FAILED
    assert site.status(unwritable) is JobStatus.PROCESSING  # its lease runs out; retried then
    site.settle(event, named)

    # The retry's message comes back when the retry is due (the worker hid it on its
    # real receipt), and its second delivery finishes the job.
    (again,) = site.receive(1)
    assert again["MessageId"] == message_id[retried]
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert invoke(site.event([again])) == set()
    assert site.status(retried) is JobStatus.SUCCEEDED
    assert site.sim_calls.count(retried) == 2


def test_a_poison_record_fails_alone_until_redrive_takes_it_to_the_dlq(site: Site) -> None:
    job_ids = site.submit({"prompt": "good"}, {"prompt": "also good"})
    site.send_raw("{not json")
    site.send_raw(
        '{"tenant_id": "t1"}',
        MessageAttributes={"payload_version": {"DataType": "Number", "StringValue": "1"}},
    )
    messages = site.receive(4)
    poison = {m["MessageId"] for m in messages if m["Body"] in ("{not json", '{"tenant_id": "t1"}')}
    assert len(poison) == 2
    event = site.event(messages)

    named = invoke(event)

    assert named == poison
    assert [site.status(job_id) for job_id in job_ids] == [JobStatus.SUCCEEDED] * 2
    assert len(site.sim_calls) == 2
    site.settle(event, named)
    # Visible again at once, not after the 60 s the receive hid them for.
    site.until_counts({"visible": 2, "in_flight": 0, "delayed": 0})

    # Each receive counts: after MAX_RECEIVES of them the queue's redrive moves the
    # poison to the dead-letter queue, with no model called for it.
    for _ in range(MAX_RECEIVES - 1):
        again = site.receive(2)
        assert {m["MessageId"] for m in again} == poison
        assert invoke(site.event(again)) == poison
    # The next receive finds them received MAX_RECEIVES times: SQS moves them on.
    assert site.receive_once(2) == []
    site.until_counts({"visible": 2, "in_flight": 0, "delayed": 0}, dlq=True)
    assert len(site.sim_calls) == 2


def test_a_duplicate_of_a_finished_job_goes_without_a_model_call(site: Site) -> None:
    (job_id,) = site.submit({"prompt": "once"})
    (first,) = site.receive(1)
    assert invoke(site.event([first])) == set()
    assert site.sim_calls == [job_id]

    # SQS delivers at least once: the same message again (its delete was lost), and a
    # second message of the job (as the sweeper re-sends one it thinks stalled).
    site.show_again(first)
    site.send_raw(first["Body"])
    duplicates = site.receive(2)
    again = next(m for m in duplicates if m["MessageId"] == first["MessageId"])
    assert again["Attributes"]["ApproximateReceiveCount"] == "2"
    assert {job_id_of(m) for m in duplicates} == {job_id}

    assert invoke(site.event(duplicates)) == set()

    assert site.sim_calls == [job_id]
    assert site.status(job_id) is JobStatus.SUCCEEDED


def test_an_attempt_that_cannot_finish_in_time_is_not_started(site: Site) -> None:
    job_ids = site.submit({"prompt": "a"}, {"prompt": "b"})
    messages = site.receive(2)
    event = site.event(messages)

    assert invoke(event, remaining_ms=1000) == {m["MessageId"] for m in messages}

    assert site.sim_calls == []
    assert [site.status(job_id) for job_id in job_ids] == [JobStatus.QUEUED] * 2
    # Left held: the message comes back after its visibility timeout, as SQS's own.
    assert site.counts() == {"visible": 0, "in_flight": 2, "delayed": 0}
    # With the time to finish, the same records run.
    assert invoke(event) == set()
    assert [site.status(job_id) for job_id in job_ids] == [JobStatus.SUCCEEDED] * 2


def test_message_attributes_complete_a_lean_body(site: Site) -> None:
    """What SQS carries as typed attributes (payload_version a Number) fills what a
    body leaves out."""
    (job_id,) = site.submit({"prompt": "a"})
    (sent,) = site.receive(1)
    lean = json.loads(sent["Body"])
    lean.pop("payload_version")
    lean.pop("traceparent", None)
    site.send_raw(
        json.dumps(lean),
        MessageAttributes={
            "payload_version": {"DataType": "Number", "StringValue": "1"},
            "traceparent": {"DataType": "String", "StringValue": TRACEPARENT},
        },
    )
    (lean_message,) = site.receive(1)

    assert invoke(site.event([lean_message])) == set()
    assert site.status(job_id) is JobStatus.SUCCEEDED


def test_heartbeats_keep_the_record_s_message_hidden_on_its_real_receipt(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call that outlasts the visibility the mapping received with: the worker's
    heartbeats (ChangeMessageVisibility on the record's receipt) keep the message from
    showing to another receive meanwhile."""
    monkeypatch.setenv("FERRYMAN_HEARTBEAT_INTERVAL_SECONDS", "0.5")
    (job_id,) = site.submit({"prompt": "slow", "simulate": {"latency_ms": 4000}})
    (message,) = site.receive(1, hidden_seconds=2)

    assert invoke(site.event([message])) == set()

    assert site.status(job_id) is JobStatus.SUCCEEDED
    # Received hidden for 2 s, the call took 4: only the heartbeats kept it held.
    assert site.counts() == {"visible": 0, "in_flight": 1, "delayed": 0}
