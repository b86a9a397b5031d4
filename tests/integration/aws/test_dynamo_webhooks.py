"""The webhook outbox on DynamoDB: the four fields on the job's item, the ``webhooks``
index that holds only owed notifications, the dispatcher's read of it, retention that
keeps an owed job, and the tenants' signing secrets.

Jobs move through the ledger's verbs as the services move them, and the webhook's own
transitions (core/changes.py's claim_webhook, webhook_attempted) through the store's
``apply``, as the dispatcher writes them. The contract suite
(tests/contract/test_webhook_storage.py) holds every engine to the port; here is what
only this engine shows: its items and its index.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.aws import layout, store_upkeep
from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.store import DynamoJobStore
from ferryman.adapters.aws.webhook_secrets import DynamoWebhookSecretStore
from ferryman.core import changes
from ferryman.core.clock import FakeClock
from ferryman.core.errors import IllegalTransitionError
from ferryman.core.idempotency import request_fingerprint
from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id
from ferryman.core.job import AttemptOutcome, AttemptReport, EventKind, Job, JobStatus
from ferryman.ports.webhooks import StoredSecret
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.timeout(120)

HOOK = "https://hooks.example.com/ferryman"
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
OUTBOX = ("webhook_url", "webhook_due_at", "webhook_attempts", "webhook_event_seq")


@dataclasses.dataclass
class Stack:
    port: DynamoJobStore
    store: LedgerWithReads
    secrets: DynamoWebhookSecretStore
    clock: FakeClock

    def now(self) -> float:
        return self.clock.now()

    async def accepted(self, **overrides: Any) -> Job:
        now = self.now()
        fields: dict[str, Any] = {
            "tenant_id": "t1",
            "job_id": new_job_id(),
            "task": "generate",
            "model": "sim",
            "input": {"prompt": "Hello"},
            "request_hash": request_fingerprint(
                task="generate", input={"prompt": "Hello"}, model="sim"
            ),
            "created_at": now,
            "updated_at": now,
            "correlation_id": new_correlation_id(),
            **overrides,
        }
        job = Job(**fields)
        await self.store.create(job, idempotency_expires_at=None, now=now)
        await self.store.mark_dispatched(job.job_id, now=now)
        return job

    async def finished(self, *, webhook_url: str | None = HOOK) -> str:
        """A job that ran and SUCCEEDED now (owing its webhook when it has a URL)."""
        job = await self.accepted(webhook_url=webhook_url)
        attempt_id = new_attempt_id()
        claimed = await self.store.claim(
            job.job_id,
            attempt_id=attempt_id,
            worker_id="w1",
            now=self.now(),
            lease_until=self.now() + 60,
            max_deliveries_without_outcome=10,
        )
        assert claimed.claimed
        await self.store.succeed(
            job.job_id,
            attempt_id=attempt_id,
            now=self.now(),
            result_ref="r",
            report=SUCCEEDED,
        )
        return job.job_id

    async def job(self, job_id: str) -> Job:
        job = await self.port.get(job_id)
        assert job is not None
        return job

    async def claim_webhook(self, job_id: str, *, lease_seconds: float = 30.0) -> Job:
        """The dispatcher's claim of the job's notification, written; the job after it."""
        change = changes.claim_webhook(
            await self.job(job_id), now=self.now(), lease_until=self.now() + lease_seconds
        )
        assert await self.port.apply(change)
        return change.after

    async def attempted(
        self, job: Job, *, delivered: bool, next_due_at: float | None = None
    ) -> bool:
        change = changes.webhook_attempted(
            await self.job(job.job_id),
            now=self.now(),
            event_seq=job.webhook_event_seq,
            attempt_no=job.webhook_attempts,
            delivered=delivered,
            next_due_at=next_due_at,
            detail={"status_code": 204 if delivered else 500},
        )
        assert change is not None
        return await self.port.apply(change)


@pytest.fixture
async def stack(aws_url: str) -> AsyncIterator[Stack]:
    table = parse_aws_url(aws_url).table
    clock = FakeClock()
    async with open_clients() as clients:
        port = DynamoJobStore(clients, table, clock=clock)
        yield Stack(
            port=port,
            store=LedgerWithReads(port),
            secrets=DynamoWebhookSecretStore(clients, table),
            clock=clock,
        )


async def _job_item(stack: Stack, job_id: str) -> dict[str, Any]:
    response = await stack.port._clients.dynamodb.get_item(
        TableName=stack.port._table,
        Key={"pk": {"S": layout.job_pk(job_id)}, "sk": {"S": layout.JOB_SK}},
        ConsistentRead=True,
    )
    return dict(response["Item"])


async def _indexed(stack: Stack) -> list[str]:
    """The job ids the ``webhooks`` index holds, read from every shard of it."""
    hash_key, _ = layout.index_keys(layout.INDEX_WEBHOOKS)
    found: list[str] = []
    for shard in range(layout.WEBHOOK_SHARDS):
        response = await stack.port._clients.dynamodb.query(
            TableName=stack.port._table,
            IndexName=layout.INDEX_WEBHOOKS,
            KeyConditionExpression="#h = :p",
            ExpressionAttributeNames={"#h": hash_key},
            ExpressionAttributeValues={":p": {"S": layout.webhook_partition(shard)}},
        )
        found += [item["pk"]["S"].removeprefix("job#") for item in response["Items"]]
    return sorted(found)


# --- the fields ---------------------------------------------------------------------


async def test_the_webhook_fields_round_trip_and_a_job_without_a_url_stores_none(
    stack: Stack,
) -> None:
    hooked = await stack.accepted(webhook_url=HOOK)
    plain = await stack.accepted()

    stored = await stack.job(hooked.job_id)
    assert (stored.webhook_url, stored.webhook_due_at) == (HOOK, None)
    assert (stored.webhook_attempts, stored.webhook_event_seq) == (0, 0)
    assert (await stack.job(plain.job_id)).webhook_url is None
    # Not even a default: a job without a webhook weighs what it did before webhooks.
    assert set(OUTBOX) & set(await _job_item(stack, plain.job_id)) == set()

    owed = await stack.finished()
    stack.clock.advance(5)
    claimed = await stack.claim_webhook(owed)
    assert (await stack.port.get_many([owed]))[owed] == claimed == await stack.job(owed)
    assert claimed.webhook_attempts == 1 and claimed.webhook_due_at == stack.now() + 30


async def test_the_change_that_finishes_a_job_writes_its_outbox_in_the_same_write(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = await stack.accepted(webhook_url=HOOK)
    attempt_id = new_attempt_id()
    claimed = await stack.store.claim(
        job.job_id,
        attempt_id=attempt_id,
        worker_id="w1",
        now=stack.now(),
        lease_until=stack.now() + 60,
        max_deliveries_without_outcome=10,
    )
    assert claimed.claimed
    assert await _indexed(stack) == []  # nothing is owed before the outcome
    dynamodb = stack.port._clients.dynamodb
    writes: list[str] = []
    for name in ("transact_write_items", "update_item", "put_item"):
        original = getattr(dynamodb, name)

        async def counted(*args: Any, _name: str = name, _call: Any = original, **kw: Any) -> Any:
            writes.append(_name)
            return await _call(*args, **kw)

        monkeypatch.setattr(dynamodb, name, counted)
    stack.clock.advance(3)

    await stack.store.succeed(
        job.job_id,
        attempt_id=attempt_id,
        now=stack.now(),
        result_ref="r",
        report=SUCCEEDED,
    )

    assert writes == ["transact_write_items"]  # the outcome, its event and the outbox
    done = await stack.job(job.job_id)
    [*_, terminal] = await stack.port.events(job.job_id)
    assert done.status is JobStatus.SUCCEEDED
    assert terminal.kind is EventKind.SUCCEEDED
    assert (done.webhook_due_at, done.webhook_attempts) == (stack.now(), 0)
    assert done.webhook_event_seq == terminal.seq
    assert await _indexed(stack) == [job.job_id]


# --- the webhook's transitions ---------------------------------------------------------


async def test_claims_and_attempts_apply_on_a_finished_job_under_its_revision(
    stack: Stack,
) -> None:
    job_id = await stack.finished()
    finished = await stack.job(job_id)
    stack.clock.advance(1)
    claim = changes.claim_webhook(finished, now=stack.now(), lease_until=stack.now() + 30)
    rival = changes.claim_webhook(finished, now=stack.now(), lease_until=stack.now() + 60)

    assert await stack.port.apply(claim)
    assert not await stack.port.apply(rival)  # the same revision: one claim wins
    claimed = await stack.job(job_id)
    assert claimed == claim.after
    with pytest.raises(IllegalTransitionError):  # not due again before its lease ends
        changes.claim_webhook(claimed, now=stack.now(), lease_until=stack.now() + 30)

    assert await stack.attempted(claimed, delivered=False, next_due_at=stack.now() + 5)
    failed = await stack.job(job_id)
    assert (failed.status, failed.webhook_due_at) == (JobStatus.SUCCEEDED, stack.now() + 5)
    assert await _indexed(stack) == [job_id]
    stack.clock.advance(5)
    again = await stack.claim_webhook(job_id)
    stale = changes.webhook_attempted(
        claimed,  # the first attempt's report, after the second claim
        now=stack.now(),
        event_seq=claimed.webhook_event_seq,
        attempt_no=claimed.webhook_attempts,
        delivered=True,
        next_due_at=None,
        detail={},
    )
    assert stale is not None and not await stack.port.apply(stale)
    assert await stack.attempted(again, delivered=True)

    delivered = await stack.job(job_id)
    kinds = [e.kind for e in await stack.port.events(job_id)]
    assert kinds[-3:] == [
        EventKind.SUCCEEDED,
        EventKind.WEBHOOK_FAILED,
        EventKind.WEBHOOK_DELIVERED,
    ]
    assert (delivered.webhook_due_at, delivered.webhook_attempts) == (None, 2)
    assert await _indexed(stack) == []
    assert "wpk" not in await _job_item(stack, job_id)


# --- the dispatcher's read -------------------------------------------------------------


async def test_webhooks_due_returns_the_due_ones_earliest_first_within_the_limit(
    stack: Stack,
) -> None:
    owed = []
    for _ in range(5):
        owed.append(await stack.finished())
        stack.clock.advance(10)
    await stack.finished(webhook_url=None)
    claimed = await stack.claim_webhook(owed[1], lease_seconds=3_600)  # due again later
    delivered = await stack.claim_webhook(owed[2])
    assert await stack.attempted(delivered, delivered=True)
    stack.clock.advance(1)
    not_yet = await stack.finished()  # due now: not before it finished
    now = stack.now()

    due = await stack.port.webhooks_due(now=now - 1, limit=10)
    first_two = await stack.port.webhooks_due(now=now - 1, limit=2)

    expected = [owed[0], owed[3], owed[4]]
    assert [j.job_id for j in due] == expected
    assert all(j.webhook_due_at is not None and j.webhook_due_at <= now - 1 for j in due)
    assert due[0].input == {"prompt": "Hello"}  # whole jobs, as the dispatcher sends them
    assert [j.job_id for j in first_two] == expected[:2]
    assert await stack.port.webhooks_due(now=now, limit=0) == []
    # The index holds the owed notifications only: not the delivered one, not the job
    # without a URL, and the claimed one until its claim runs out.
    assert await _indexed(stack) == sorted([*expected, claimed.job_id, not_yet])
    stack.clock.advance(3_600)
    later = await stack.port.webhooks_due(now=stack.now(), limit=10)
    assert [j.job_id for j in later] == [*expected, not_yet, claimed.job_id]


# --- retention ---------------------------------------------------------------------------


async def test_purge_keeps_a_job_whose_webhook_is_owed_until_it_is_settled(
    stack: Stack,
) -> None:
    owed = await stack.finished()
    stack.clock.advance(1)
    plain = await stack.finished(webhook_url=None)
    stack.clock.advance(100)

    # The oldest finished job is owed; it neither goes nor holds up the next.
    purged = await stack.port.purge_finished(completed_before=stack.now(), limit=1)

    assert purged == [plain]
    assert await stack.port.existing([owed, plain]) == {owed}
    # Even named directly (an index that lags), an owed job is not deleted.
    before = stack.now()
    assert not await store_upkeep.purge_job(stack.port._clients, stack.port._table, owed, before)
    given_up = await stack.claim_webhook(owed)
    assert await stack.attempted(given_up, delivered=False, next_due_at=None)
    assert await stack.port.purge_finished(completed_before=stack.now(), limit=10) == [owed]
    assert await stack.port.get(owed) is None


# --- signing secrets ---------------------------------------------------------------------


async def test_a_tenant_s_secrets_round_trip_and_a_rotation_replaces_them(stack: Stack) -> None:
    first = StoredSecret(tenant_id="t1", current="sealed-1", created_at=1_700_000_000.25)
    rotated = StoredSecret(
        tenant_id="t1",
        current="sealed-2",
        created_at=1_700_000_100.5,
        previous="sealed-1",
        previous_until=1_700_086_500.75,
    )
    assert await stack.secrets.get_secret("t1") is None

    await stack.secrets.put_secret(first)
    assert await stack.secrets.get_secret("t1") == first
    await stack.secrets.put_secret(rotated)
    assert await stack.secrets.get_secret("t1") == rotated
    await stack.secrets.put_secret(dataclasses.replace(rotated, previous=None, previous_until=None))

    assert await stack.secrets.get_secret("t1") == dataclasses.replace(
        rotated, previous=None, previous_until=None
    )
    assert await stack.secrets.get_secret("t2") is None
