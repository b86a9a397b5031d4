"""Completion webhooks over the memory engine: what intake refuses, when a notification
is owed, and how the dispatcher delivers, retries, gives up and keeps tenants apart.

The sender is a fake that answers as each test scripts it; the real sender and guard
are tested in tests/unit/webhooks/, and end to end in tests/integration/test_webhooks.py.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Any

import pytest
from standardwebhooks import Webhook

from ferryman.core.errors import (
    IdempotencyKeyMismatchError,
    WebhookSecretRequiredError,
    WebhookSecretUnreadableError,
    WebhookUrlRefusedError,
)
from ferryman.core.idempotency import request_fingerprint
from ferryman.core.job import EventKind, JobStatus
from ferryman.core.webhooks import webhook_id
from ferryman.ports.webhooks import SendOutcome
from ferryman.services.intake import BatchItem, Intake, SubmitRequest
from ferryman.services.webhooks import (
    DispatchOptions,
    WebhookDispatcher,
    WebhookKick,
    WebhookSecrets,
)
from ferryman.tasks import builtin_tasks
from ferryman.webhooks.signing import new_secret, signature

if TYPE_CHECKING:
    from ferryman.services.jobs import JobView

URL = "https://hooks.example.com/ferryman"
REFUSED = "https://internal.example.com/hook"
SCHEDULE = (5.0, 60.0)


class FakeGuard:
    """Refuses REFUSED, allows every other URL, without resolving anything."""

    def check_syntax(self, url: str) -> None:
        if not url.startswith("https://"):
            raise WebhookUrlRefusedError("https only")

    async def check(self, url: str) -> None:
        self.check_syntax(url)
        if url == REFUSED:
            raise WebhookUrlRefusedError("resolves to a private address")


class FakeSender:
    """Answers each attempt with the next scripted answer for its URL (200 when none
    is left); an answer that is an asyncio.Event holds the attempt until it is set."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.script: dict[str, list[Any]] = {}
        self.closed = False

    async def send(
        self, url: str, *, webhook_id: str, timestamp: int, body: bytes, signature: str
    ) -> SendOutcome:
        self.sent.append(
            {"url": url, "id": webhook_id, "ts": timestamp, "body": body, "sig": signature}
        )
        answers = self.script.get(url, [])
        answer = answers.pop(0) if answers else 200
        if isinstance(answer, asyncio.Event):
            await answer.wait()
            answer = 200
        if isinstance(answer, str):
            return SendOutcome(status_code=None, duration_ms=1, error=answer)
        return SendOutcome(status_code=answer, duration_ms=1)

    async def aclose(self) -> None:
        self.closed = True


class PlainSealer:
    def seal(self, secret: str) -> str:
        return "plain:" + secret

    def open(self, sealed: str) -> str:
        if not sealed.startswith("plain:"):
            raise WebhookSecretUnreadableError()
        return sealed.removeprefix("plain:")


def _render(event_type: str, timestamp: float, view: JobView) -> bytes:
    data = {"job_id": view.job.job_id, "status": str(view.job.status), "result": view.result}
    return json.dumps({"type": event_type, "timestamp": timestamp, "data": data}).encode()


class Hooks:
    """A world with webhooks: intake that takes webhook_url, secrets, a dispatcher."""

    def __init__(self, world: Any, **options: Any) -> None:
        self.world = world
        assert world.engine is not None
        self.secrets = WebhookSecrets(
            store=world.engine.webhook_secrets,
            sealer=PlainSealer(),
            clock=world.clock,
            new_secret=new_secret,
        )
        self.sender = FakeSender()
        self.kick = WebhookKick()
        self.intake = Intake(
            store=world.store,
            ledger=world.store,
            queue=world.queue,
            tasks=builtin_tasks(),
            control=world.control,
            clock=world.clock,
            idempotency_retention_seconds=3600,
            sim_scripts=True,
            webhook_urls=FakeGuard(),
            webhook_secrets=self.secrets,
        )
        self.dispatcher = WebhookDispatcher(
            store=world.store,
            ledger=world.store,
            jobs=world.jobs,
            secrets=self.secrets,
            sender=self.sender,
            sign=signature,
            render=_render,
            clock=world.clock,
            options=DispatchOptions(schedule=SCHEDULE, **options),
            kick=self.kick,
        )

    async def submit(self, url: str = URL, *, tenant: str = "t1", **input_: Any) -> str:
        submission = await self.intake.submit(
            tenant_id=tenant,
            request=SubmitRequest(
                task="generate", input={"prompt": "hi", **input_}, webhook_url=url
            ),
        )
        return submission.job.job_id

    async def dispatch(self) -> int:
        """One scan, and every attempt it started, finished."""
        started = await self.dispatcher.dispatch_once()
        await self.dispatcher.drain()
        return started

    async def events(self, job_id: str) -> list[Any]:
        return [e for e in await self.world.store.events(job_id) if e.kind.startswith("WEBHOOK")]


@pytest.fixture
async def hooks(make_world) -> Hooks:
    hooks = Hooks(make_world())
    hooks.world.secret = await hooks.secrets.rotate("t1")
    return hooks


# --- intake ---------------------------------------------------------------------------


async def test_a_webhook_url_needs_the_tenants_signing_secret_first(make_world) -> None:
    hooks = Hooks(make_world())
    with pytest.raises(WebhookSecretRequiredError):
        await hooks.submit()
    await hooks.secrets.rotate("t1")
    assert await hooks.submit()


async def test_a_refused_url_is_refused_at_intake_and_stores_nothing(hooks) -> None:
    with pytest.raises(WebhookUrlRefusedError):
        await hooks.submit(REFUSED)
    with pytest.raises(WebhookUrlRefusedError):
        await hooks.submit("http://hooks.example.com/plain")
    page = await hooks.world.jobs.list("t1")
    assert page.items == []


async def test_a_batch_refuses_only_the_items_whose_url_is_refused(hooks) -> None:
    items = [
        BatchItem(SubmitRequest(task="generate", input={"prompt": "a"}, webhook_url=URL)),
        BatchItem(SubmitRequest(task="generate", input={"prompt": "b"}, webhook_url=REFUSED)),
        BatchItem(SubmitRequest(task="generate", input={"prompt": "c"})),
    ]
    outcomes = await hooks.intake.submit_many(tenant_id="t1", items=items)
    assert isinstance(outcomes[1], WebhookUrlRefusedError)
    assert outcomes[0].job.webhook_url == URL
    assert outcomes[2].job.webhook_url is None


async def test_the_url_is_part_of_the_fingerprint_and_none_keeps_the_old_one(hooks) -> None:
    request = SubmitRequest(task="generate", input={"prompt": "hi"}, webhook_url=URL)
    first = await hooks.intake.submit(tenant_id="t1", request=request, idempotency_key="k")
    other = SubmitRequest(task="generate", input={"prompt": "hi"}, webhook_url=URL + "2")
    with pytest.raises(IdempotencyKeyMismatchError):
        await hooks.intake.submit(tenant_id="t1", request=other, idempotency_key="k")
    plain = await hooks.intake.submit(
        tenant_id="t1", request=SubmitRequest(task="generate", input={"prompt": "hi"})
    )
    # A job without a URL hashes as every job did before webhooks: stored keys still match.
    assert plain.job.request_hash == request_fingerprint(
        task="generate",
        input=plain.job.input,
        model=plain.job.model,
        options={"metadata": None, "webhook_url": None},
    )
    assert first.job.request_hash != plain.job.request_hash


# --- delivery -------------------------------------------------------------------------


async def test_a_finished_job_is_delivered_once_signed_as_the_standard_says(hooks) -> None:
    # The reference library checks webhook-timestamp against the real clock.
    hooks.world.clock.set(time.time())
    job_id = await hooks.submit()
    assert (await hooks.world.job(job_id)).webhook_due_at is None  # nothing owed yet
    await hooks.world.worker().run_until_idle()
    job = await hooks.world.job(job_id)
    assert job.status is JobStatus.SUCCEEDED
    assert job.webhook_due_at == job.completed_at

    assert await hooks.dispatch() == 1
    (sent,) = hooks.sender.sent
    assert sent["id"] == webhook_id(job_id, job.webhook_event_seq)
    headers = {
        "webhook-id": sent["id"],
        "webhook-timestamp": str(sent["ts"]),
        "webhook-signature": sent["sig"],
    }
    payload = Webhook(hooks.world.secret).verify(sent["body"], headers)
    assert payload["type"] == "generation.succeeded"
    assert payload["data"]["job_id"] == job_id and payload["data"]["result"] is not None

    (event,) = await hooks.events(job_id)
    assert event.kind is EventKind.WEBHOOK_DELIVERED
    assert event.detail["status_code"] == 200 and event.detail["attempt"] == 1
    assert (await hooks.world.job(job_id)).webhook_due_at is None
    assert await hooks.dispatch() == 0 and len(hooks.sender.sent) == 1


async def test_failures_are_retried_on_the_schedule_with_the_same_id(hooks) -> None:
    job_id = await hooks.submit()
    await hooks.world.worker().run_until_idle()
    hooks.sender.script[URL] = [500, "timeout"]
    await hooks.dispatch()
    first = await hooks.events(job_id)
    assert [e.kind for e in first] == [EventKind.WEBHOOK_FAILED]
    assert first[0].detail["status_code"] == 500
    assert first[0].detail["next_attempt_at"] == hooks.world.clock.now() + SCHEDULE[0]

    assert await hooks.dispatch() == 0  # not due yet
    hooks.world.clock.advance(SCHEDULE[0])
    await hooks.dispatch()
    hooks.world.clock.advance(SCHEDULE[1])
    await hooks.dispatch()
    kinds = [e.kind for e in await hooks.events(job_id)]
    assert kinds == [
        EventKind.WEBHOOK_FAILED,
        EventKind.WEBHOOK_FAILED,
        EventKind.WEBHOOK_DELIVERED,
    ]
    assert len({s["id"] for s in hooks.sender.sent}) == 1
    assert [e.detail.get("error") for e in await hooks.events(job_id)][:2] == [None, "timeout"]


async def test_gone_stops_the_retries(hooks) -> None:
    job_id = await hooks.submit()
    await hooks.world.worker().run_until_idle()
    hooks.sender.script[URL] = [410]
    await hooks.dispatch()
    (event,) = await hooks.events(job_id)
    assert event.detail["status_code"] == 410 and event.detail["next_attempt_at"] is None
    assert (await hooks.world.job(job_id)).webhook_due_at is None
    hooks.world.clock.advance(10_000)
    assert await hooks.dispatch() == 0


async def test_a_spent_schedule_gives_up_after_one_attempt_per_wait_plus_one(hooks) -> None:
    job_id = await hooks.submit()
    await hooks.world.worker().run_until_idle()
    hooks.sender.script[URL] = [503] * 10
    for _ in range(5):
        await hooks.dispatch()
        hooks.world.clock.advance(max(SCHEDULE))
    events = await hooks.events(job_id)
    assert len(events) == len(SCHEDULE) + 1
    assert events[-1].detail["next_attempt_at"] is None


async def test_an_attempt_whose_dispatcher_died_is_taken_over_after_its_claim(hooks) -> None:
    job_id = await hooks.submit()
    await hooks.world.worker().run_until_idle()
    job = await hooks.world.job(job_id)
    now = hooks.world.clock.now()
    # A dispatcher claims the attempt and dies before sending or recording.
    assert await hooks.world.store.claim_webhook(job, now=now, lease_until=now + 30)
    assert await hooks.dispatch() == 0
    hooks.world.clock.advance(30)
    assert await hooks.dispatch() == 1
    (event,) = await hooks.events(job_id)
    assert event.kind is EventKind.WEBHOOK_DELIVERED and event.detail["attempt"] == 2
    assert hooks.sender.sent[0]["id"] == webhook_id(job_id, job.webhook_event_seq)


async def test_failed_and_cancelled_jobs_are_announced_too(hooks) -> None:
    failed = await hooks.submit(simulate={"script": ["bad_request"]})
    cancelled = await hooks.submit()
    await hooks.world.jobs.cancel("t1", cancelled)
    await hooks.world.worker().run_until_idle()
    await hooks.dispatch()
    types = {
        json.loads(s["body"])["data"]["job_id"]: json.loads(s["body"])["type"]
        for s in hooks.sender.sent
    }
    assert types == {failed: "generation.failed", cancelled: "generation.cancelled"}


async def test_a_job_without_a_url_owes_nothing(hooks) -> None:
    submission = await hooks.intake.submit(
        tenant_id="t1", request=SubmitRequest(task="generate", input={"prompt": "hi"})
    )
    await hooks.world.worker().run_until_idle()
    assert (await hooks.world.job(submission.job.job_id)).webhook_due_at is None
    assert await hooks.dispatch() == 0


async def test_a_dead_receiver_holds_only_its_own_tenants_deliveries(make_world) -> None:
    hooks = Hooks(make_world(), max_in_flight_per_tenant=2)
    for tenant in ("slow", "quick"):
        await hooks.secrets.rotate(tenant)
    hang = asyncio.Event()
    slow_url = "https://slow.example.com/hook"
    hooks.sender.script[slow_url] = [hang] * 5
    slow = [await hooks.submit(slow_url, tenant="slow") for _ in range(5)]
    await hooks.world.worker().run_until_idle()
    quick = await hooks.submit(tenant="quick")
    await hooks.world.worker().run_until_idle()

    await hooks.dispatcher.dispatch_once()
    await hooks.dispatcher.dispatch_once()
    # The quick tenant's notification goes out while the slow one's receiver hangs.
    for _ in range(1000):
        if await hooks.events(quick):
            break
        await asyncio.sleep(0)
    sent_to = [s["url"] for s in hooks.sender.sent]
    assert sent_to.count(slow_url) == 2  # its share, held by the hanging receiver
    assert [e.kind for e in await hooks.events(quick)] == [EventKind.WEBHOOK_DELIVERED]
    hang.set()
    await hooks.dispatcher.drain()
    assert len(slow) == 5


async def test_an_unreadable_secret_is_a_failed_attempt_that_retries(hooks) -> None:
    job_id = await hooks.submit()
    await hooks.world.worker().run_until_idle()
    stored = await hooks.world.engine.webhook_secrets.get_secret("t1")
    sealed = type(stored)(tenant_id="t1", current="fernet:other-key", created_at=stored.created_at)
    await hooks.world.engine.webhook_secrets.put_secret(sealed)
    await hooks.dispatch()
    (event,) = await hooks.events(job_id)
    assert event.kind is EventKind.WEBHOOK_FAILED
    assert event.detail["error"] == "secret_unreadable"
    assert event.detail["next_attempt_at"] is not None
    assert hooks.sender.sent == []


async def test_a_replay_drops_the_notification_owed_for_the_outcome_it_undoes(hooks) -> None:
    job_id = await hooks.submit(simulate={"script": ["bad_request"]})
    await hooks.world.worker().run_until_idle()
    assert (await hooks.world.job(job_id)).webhook_due_at is not None
    await hooks.world.operations.replay(
        [job_id], actor="op", reason="try again", include_failed=True
    )
    assert (await hooks.world.job(job_id)).webhook_due_at is None


async def test_rotation_keeps_the_previous_secret_signing_for_a_day(hooks) -> None:
    first = hooks.world.secret
    second = await hooks.secrets.rotate("t1")
    assert await hooks.secrets.signing("t1") == [second, first]
    hooks.world.clock.advance(24 * 3600)
    assert await hooks.secrets.signing("t1") == [second]
    assert await hooks.secrets.signing("nobody") == []
