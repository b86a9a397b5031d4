"""The scheduled sweeper, ``ferryman.aws_lambda.sweep``, on the AWS engine (moto).

The function opens its own engine from FERRYMAN_* variables, as a deployed one does;
the test writes jobs through the real intake and looks at the queues with the raw
aiobotocore client. Each side runs on its own event loop, one after the other.
The invocation's time left comes from a fake context that never reads the wall clock.
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
from standardwebhooks import Webhook

from aws_sites import QueuesOf
from ferryman import aws_lambda
from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.aws_lambda import sweeping, warm
from ferryman.config import Settings, load_settings
from ferryman.core.clock import FakeClock
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.job import DEAD_LETTERED_CODE, DispatchState, Job, JobStatus
from ferryman.observability.logging import reset_logging
from ferryman.ports.queue import QueueMessage
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime
from lambda_events import FakeContext, event_of_messages

if TYPE_CHECKING:
    from collections.abc import Callable, Coroutine, Iterator

pytestmark = pytest.mark.timeout(120)

T = TypeVar("T")
DEADLINE_SECONDS = 20.0
MARGIN_MS = int(sweeping.SWEEP_MARGIN_SECONDS * 1000)
# Time for one round, not for another one after the interval (5 s, the default).
ONE_ROUND_MS = MARGIN_MS + 1_000


@dataclass
class Site(QueuesOf):
    settings: Settings
    url: str

    def submit(self, *, clock: FakeClock | None = None, send_fails: bool = False) -> str:
        """A job through the intake (its clock ``clock``); with ``send_fails``, its
        message is never sent (the API stopped between the write and the send)."""

        async def go() -> str:
            async with open_runtime(self.settings, clock=clock) as runtime:
                if not send_fails:
                    submitted = await runtime.intake.submit(
                        tenant_id="t1", request=SubmitRequest("generate", {"prompt": "a"})
                    )
                    return submitted.job.job_id

                unsent: list[QueueMessage] = []

                async def queue_away(message: QueueMessage, **_: Any) -> None:
                    unsent.append(message)
                    raise StoreUnavailableError("sqs: away")

                runtime.queue.send = queue_away  # type: ignore[method-assign]
                with pytest.raises(StoreUnavailableError):
                    await runtime.intake.submit(
                        tenant_id="t1", request=SubmitRequest("generate", {"prompt": "a"})
                    )
                (message,) = unsent
                return message.job_id

        return self.run(go())

    def job(self, job_id: str) -> Job | None:
        async def go() -> Job | None:
            async with open_runtime(self.settings) as runtime:
                return await runtime.store.get(job_id)

        return self.run(go())

    def receive(self, *, dlq: bool = False) -> list[dict[str, Any]]:
        """What the queue has now (one receive, every attribute, hidden 60 s)."""

        async def use(sqs: Any, url: str) -> list[dict[str, Any]]:
            response = await sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                VisibilityTimeout=60,
                WaitTimeSeconds=1,
                MessageSystemAttributeNames=["All"],
                MessageAttributeNames=["All"],
            )
            return list(response.get("Messages") or [])

        return self._sqs(use, dlq=dlq)

    def send(self, body: str, *, dlq: bool = False) -> None:
        async def use(sqs: Any, url: str) -> None:
            await sqs.send_message(QueueUrl=url, MessageBody=body)

        self._sqs(use, dlq=dlq)

    def queue_arn(self) -> str:
        async def use(sqs: Any, url: str) -> str:
            response = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])
            return str(response["Attributes"]["QueueArn"])

        return self._sqs(use)

    def make_bucket(self) -> str:
        name = f"{parse_aws_url(self.url).name}-results"

        async def go() -> None:
            async with open_clients() as clients:
                await clients.s3.create_bucket(Bucket=name)

        self.run(go())
        return name

    def objects(self, bucket: str) -> list[str]:
        async def go() -> list[str]:
            async with open_clients() as clients:
                listed = await clients.s3.list_objects_v2(Bucket=bucket)
                return [str(o["Key"]) for o in listed.get("Contents") or []]

        return self.run(go())

    def drop_table(self) -> None:
        async def go() -> None:
            async with open_clients() as clients:
                table = parse_aws_url(self.url).table
                await clients.dynamodb.delete_table(TableName=table)

        self.run(go())


@dataclass
class CountdownContext:
    """A context whose time left drops ``step_ms`` at every read: the invocation runs
    out of time after a number of reads, whatever the wall clock does."""

    remaining_ms: int
    step_ms: int
    reads: list[int] = field(default_factory=list)

    def get_remaining_time_in_millis(self) -> int:
        self.reads.append(self.remaining_ms)
        left = self.remaining_ms
        self.remaining_ms -= self.step_ms
        return left


@pytest.fixture
def site(
    aws_url_factory: Callable[..., Coroutine[Any, Any, str]], monkeypatch: pytest.MonkeyPatch
) -> Iterator[Site]:
    url = asyncio.run(aws_url_factory())
    for name, value in {
        "FERRYMAN_DATABASE_URL": url,
        "FERRYMAN_STALLED_AFTER_SECONDS": "60",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("FERRYMAN_RESULTS_URL", raising=False)
    aws_lambda.shutdown()
    yield Site(settings=load_settings(), url=url)
    aws_lambda.shutdown()
    reset_logging()


def sweep(context: Any) -> dict[str, int]:
    summary = aws_lambda.sweep({"source": "aws.events", "detail-type": "Scheduled Event"}, context)
    assert set(summary) == {
        "rounds",
        "failed_rounds",
        "dead_lettered",
        "redispatched",
        "purged",
        "undecodable",
        "webhooks",
    }
    return summary


def test_one_invocation_re_sends_a_job_left_pending(site: Site) -> None:
    # Written an hour ago, its message never sent.
    job_id = site.submit(clock=FakeClock(time.time() - 3600), send_fails=True)
    before = site.job(job_id)
    assert before is not None
    assert before.dispatch_state is DispatchState.PENDING
    assert site.receive() == []

    summary = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))

    assert summary["rounds"] == 1
    assert summary["redispatched"] == 1
    assert summary["failed_rounds"] == 0
    after = site.job(job_id)
    assert after is not None
    assert after.dispatch_state is DispatchState.DISPATCHED
    (message,) = site.receive()
    assert json.loads(message["Body"])["job_id"] == job_id
    # And the worker function runs it from there.
    response = aws_lambda.handler(
        event_of_messages([message], queue_arn=site.queue_arn()), FakeContext()
    )
    assert response == {"batchItemFailures": []}
    done = site.job(job_id)
    assert done is not None
    assert done.status is JobStatus.SUCCEEDED


def test_a_job_whose_message_was_dead_lettered_is_failed(site: Site) -> None:
    job_id = site.submit()
    (message,) = site.receive()
    # As the queue's redrive moves a message received maxReceiveCount times.
    site.send(message["Body"], dlq=True)

    summary = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))

    assert summary["dead_lettered"] == 1
    job = site.job(job_id)
    assert job is not None
    assert job.status is JobStatus.FAILED
    assert job.error is not None
    assert job.error.code == DEAD_LETTERED_CODE
    assert site.receive(dlq=True) == []  # deleted once the job was failed


def test_too_little_time_runs_no_round_and_opens_nothing(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    monkeypatch.setattr(warm, "open_runtime", lambda settings, **_: opened.append("opened"))
    summary = sweep(FakeContext(remaining_ms=MARGIN_MS - 1))
    assert summary == dict.fromkeys(summary, 0)
    assert opened == []


def test_time_for_one_round_runs_at_most_one(site: Site) -> None:
    site.submit(clock=FakeClock(time.time() - 3600), send_fails=True)
    summary = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))
    assert summary["rounds"] + summary["failed_rounds"] == 1
    assert summary["redispatched"] == 1


def test_rounds_repeat_until_the_time_left_is_below_the_margin(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRYMAN_SWEEP_INTERVAL_SECONDS", "0.05")
    context = CountdownContext(remaining_ms=MARGIN_MS + 6_000, step_ms=1_000)

    summary = sweep(context)

    assert summary["rounds"] >= 2
    assert summary["failed_rounds"] == 0
    # It stopped because the next round would have started inside the margin.
    assert context.reads[-1] < MARGIN_MS + 50
    assert min(context.reads[:-1]) >= MARGIN_MS - 1_000


def test_a_local_call_without_a_context_runs_one_round(site: Site) -> None:
    assert sweep(None)["rounds"] == 1


def test_the_engine_is_opened_once_per_container(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[str] = []
    real_open = open_runtime

    def counting_open(settings: Settings, **kwargs: Any) -> Any:
        opened.append(settings.database_url)
        return real_open(settings, **kwargs)

    monkeypatch.setattr(warm, "open_runtime", counting_open)
    for _ in range(3):
        assert sweep(FakeContext(remaining_ms=ONE_ROUND_MS))["rounds"] == 1
    assert opened == [site.url]


def test_a_missing_table_fails_each_round_and_never_raises(site: Site) -> None:
    site.drop_table()

    summary = sweep(CountdownContext(remaining_ms=MARGIN_MS + 2_000, step_ms=1_000))

    assert summary["rounds"] == 0
    assert summary["failed_rounds"] == 1


def test_missing_queues_fail_the_open_and_never_raise(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FERRYMAN_DATABASE_URL", "aws://nothing-provisioned-here")
    aws_lambda.shutdown()
    try:
        summary = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))
        assert summary == {**dict.fromkeys(summary, 0), "failed_rounds": 1}
        # The next invocation opens again (and fails again: nothing is kept).
        assert sweep(FakeContext(remaining_ms=ONE_ROUND_MS))["failed_rounds"] == 1
    finally:
        aws_lambda.shutdown()
        reset_logging()


def test_an_old_finished_job_is_purged_with_its_result_in_s3(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As the template deploys it: results in S3, a retention set."""
    bucket = site.make_bucket()
    monkeypatch.setenv("FERRYMAN_RESULTS_URL", f"s3://{bucket}/results")
    monkeypatch.setenv("FERRYMAN_RETENTION_SECONDS", "1")
    job_id = site.submit()
    (message,) = site.receive()
    response = aws_lambda.handler(
        event_of_messages([message], queue_arn=site.queue_arn()), FakeContext()
    )
    assert response == {"batchItemFailures": []}
    assert len(site.objects(bucket)) == 1

    give_up = time.monotonic() + DEADLINE_SECONDS
    purged = 0
    while not purged:
        assert time.monotonic() < give_up, "the finished job was never purged"
        purged = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))["purged"]
        time.sleep(0.2)
    assert purged == 1
    assert site.job(job_id) is None
    assert site.objects(bucket) == []


def test_a_round_sends_the_webhooks_that_are_due(
    site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Lambda-only deployment has no worker process to send webhooks: the sweeper
    function's round does, signed as the standard says."""
    received: list[tuple[dict[str, str], bytes]] = []

    class Receiver(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["content-length"]))
            received.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("FERRYMAN_WEBHOOK_ALLOWED_HOSTS", host)
    settings = load_settings()

    async def cancelled_job_with_a_webhook() -> tuple[str, str]:
        async with open_runtime(settings) as runtime:
            assert runtime.webhook_secrets is not None
            secret = await runtime.webhook_secrets.rotate("t1")
            submitted = await runtime.intake.submit(
                tenant_id="t1",
                request=SubmitRequest(
                    "generate", {"prompt": "a"}, webhook_url=f"http://{host}/hook"
                ),
            )
            await runtime.jobs.cancel("t1", submitted.job.job_id)
            return submitted.job.job_id, secret

    try:
        job_id, secret = site.run(cancelled_job_with_a_webhook())
        summary = sweep(FakeContext(remaining_ms=ONE_ROUND_MS))
        assert summary["webhooks"] == 1
        ((headers, body),) = received
        event = Webhook(secret).verify(body, headers)
        assert event["type"] == "generation.cancelled"
        assert event["data"]["job_id"] == job_id
        done = site.job(job_id)
        assert done is not None
        assert done.webhook_due_at is None
    finally:
        server.shutdown()
        server.server_close()
