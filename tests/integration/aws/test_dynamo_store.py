"""DynamoJobStore against the emulator: every write one transaction, reads as the port says.

The store is driven as the services drive it: new jobs through ``create`` and
``create_many``, every change through the ledger's verbs (tests/ledger_reads.py), so
each behaviour is the one the contract suite holds every engine to, on DynamoDB.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.aws import layout, store_upkeep
from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.location import parse_aws_url
from ferryman.adapters.aws.store import DynamoJobStore
from ferryman.core import changes
from ferryman.core.clock import FakeClock
from ferryman.core.errors import (
    FailureClass,
    IdempotencyKeyMismatchError,
    StateConflictError,
    StoreUnavailableError,
)
from ferryman.core.idempotency import request_fingerprint
from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id
from ferryman.core.job import (
    DEAD_LETTERED_CODE,
    AttemptOutcome,
    AttemptReport,
    DispatchState,
    EventKind,
    Job,
    JobError,
    JobStatus,
)
from ferryman.ports.store import LIST_ITEM_BYTES, Accepted, UsageGroup
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

pytestmark = pytest.mark.timeout(120)

DAY = 86_400.0
SUCCEEDED = AttemptReport(outcome=AttemptOutcome.SUCCEEDED)
LEASE_LOST = AttemptReport(outcome=AttemptOutcome.LEASE_LOST, latency_ms=99)
TRANSIENT = JobError(code="timeout", failure_class=FailureClass.TRANSIENT, message="slow")


@dataclasses.dataclass
class Stack:
    port: DynamoJobStore
    store: LedgerWithReads
    clock: FakeClock

    def now(self) -> float:
        return self.clock.now()

    def job(self, **overrides: Any) -> Job:
        input_ = overrides.get("input", {"prompt": "Hello"})
        now = self.now()
        fields: dict[str, Any] = {
            "tenant_id": "t1",
            "job_id": new_job_id(),
            "task": overrides.get("task", "generate"),
            "model": "sim",
            "input": input_,
            "request_hash": request_fingerprint(task="generate", input=input_, model="sim"),
            "created_at": now,
            "updated_at": now,
            "correlation_id": new_correlation_id(),
        }
        fields.update(overrides)
        return Job(**fields)

    async def accept(self, job: Job, *, retention: float = DAY) -> Accepted:
        """Intake's outbox path: create, (send,) mark dispatched."""
        accepted = await self.store.create(
            job, idempotency_expires_at=self.now() + retention, now=self.now()
        )
        if accepted.created:
            await self.store.mark_dispatched(job.job_id, now=self.now())
        return accepted

    async def claim(self, job_id: str, *, lease: float = 60.0, worker: str = "w1") -> Job:
        result = await self.store.claim(
            job_id,
            attempt_id=new_attempt_id(),
            worker_id=worker,
            now=self.now(),
            lease_until=self.now() + lease,
            max_deliveries_without_outcome=10,
        )
        assert result.claimed
        return result.job

    async def finished(self, **overrides: Any) -> str:
        job = self.job(**overrides)
        await self.accept(job)
        claimed = await self.claim(job.job_id)
        await self.store.succeed(
            job.job_id,
            attempt_id=claimed.attempt_id,
            now=self.now(),
            result_ref="r",
            report=SUCCEEDED,
        )
        return job.job_id


@pytest.fixture
async def stack(aws_url: str) -> AsyncIterator[Stack]:
    location = parse_aws_url(aws_url)
    clock = FakeClock()
    async with open_clients() as clients:
        port = DynamoJobStore(clients, location.table, clock=clock)
        yield Stack(port=port, store=LedgerWithReads(port), clock=clock)


def _summary_ids(page: Any) -> list[str]:
    return [job.job_id for job in page.jobs]


# --- create -----------------------------------------------------------------------


async def test_create_stores_the_job_exactly_with_its_accepted_event(stack: Stack) -> None:
    odd = {"text": "héllo ☃ \U0001f600", "big": 2**70, "neg": -(2**63) - 1, "huge": 1e308}
    job = stack.job(input=odd, metadata={"n": 1.5, "deep": [{"x": None}]}, idempotency_key="k")

    accepted = await stack.store.create(
        job, idempotency_expires_at=stack.now() + 60, now=stack.now()
    )

    stored = await stack.store.get(job.job_id)
    assert accepted.created is True
    assert stored == accepted.job
    assert stored is not None
    assert stored.input == odd
    assert type(stored.input["big"]) is int and type(stored.input["neg"]) is int
    assert (stored.status, stored.dispatch_state) == (JobStatus.QUEUED, DispatchState.PENDING)
    assert [e.kind for e in await stack.store.events(job.job_id)] == [EventKind.ACCEPTED]
    assert await stack.store.get(job.job_id, tenant_id="t2") is None
    assert stack.port.enqueues_with_job is False


async def _raw_items_of(stack: Stack, pk: str) -> dict[str, dict[str, Any]]:
    """The table's items under a partition key, by sort key."""
    items: dict[str, dict[str, Any]] = {}
    query: dict[str, Any] = {
        "TableName": stack.port._table,
        "KeyConditionExpression": "pk = :p",
        "ExpressionAttributeValues": {":p": {"S": pk}},
        "ConsistentRead": True,
    }
    while True:
        response = await stack.port._clients.dynamodb.query(**query)
        items.update((item["sk"]["S"], item) for item in response["Items"])
        if "LastEvaluatedKey" not in response:
            return items
        query["ExclusiveStartKey"] = response["LastEvaluatedKey"]


async def _raw_items(stack: Stack, job_id: str) -> dict[str, dict[str, Any]]:
    """The table's items under a job's partition key, by sort key."""
    return await _raw_items_of(stack, layout.job_pk(job_id))


async def test_the_input_has_an_item_of_its_own_so_changes_rewrite_a_small_one(
    stack: Stack,
) -> None:
    prompt = "a long prompt " * 20_000  # 280 KB
    job = stack.job(input={"prompt": prompt})
    await stack.accept(job)
    claimed = await stack.claim(job.job_id)

    items = await _raw_items(stack, job.job_id)
    assert "input" not in items[layout.JOB_SK]
    assert prompt in items[layout.INPUT_SK]["input"]["S"]
    assert len(str(items[layout.JOB_SK])) < 2_000  # what every change rewrites
    assert claimed.input == {"prompt": prompt}
    assert (await stack.store.get_many([job.job_id]))[job.job_id].input == {"prompt": prompt}


async def test_the_same_key_and_request_replays_the_job(stack: Stack) -> None:
    first = await stack.accept(stack.job(idempotency_key="k"))

    again = await stack.accept(stack.job(idempotency_key="k"))

    assert (again.created, again.job.job_id) == (False, first.job.job_id)
    assert again.job.dispatch_state is DispatchState.DISPATCHED  # as stored now
    assert (await stack.store.usage("t1")).stored == 1


async def test_the_same_key_with_another_request_is_refused_and_stores_nothing(
    stack: Stack,
) -> None:
    await stack.accept(stack.job(idempotency_key="k"))
    other = stack.job(idempotency_key="k", input={"prompt": "other"})

    with pytest.raises(IdempotencyKeyMismatchError):
        await stack.accept(other)

    assert await stack.store.get(other.job_id) is None
    assert (await stack.store.usage("t1")).stored == 1


async def test_an_expired_key_names_a_new_job_even_before_ttl_deletes_it(stack: Stack) -> None:
    first = await stack.accept(stack.job(idempotency_key="k"), retention=10)
    stack.clock.advance(10)  # expires_at == now: expired

    again = await stack.accept(stack.job(idempotency_key="k", input={"prompt": "new"}))

    assert again.created is True
    assert again.job.job_id != first.job.job_id
    replay = await stack.accept(stack.job(idempotency_key="k", input={"prompt": "new"}))
    assert (replay.created, replay.job.job_id) == (False, again.job.job_id)


async def test_a_job_id_in_use_is_a_conflict(stack: Stack) -> None:
    first = await stack.accept(stack.job())

    with pytest.raises(StateConflictError):
        await stack.accept(stack.job(job_id=first.job.job_id, input={"prompt": "x"}))


async def test_a_job_over_max_job_bytes_is_refused_naming_the_limit(stack: Stack) -> None:
    limit = stack.port.capabilities.max_job_bytes
    assert limit is not None
    big = stack.job(input={"prompt": "x" * limit})

    with pytest.raises(ValueError, match=str(limit)):
        await stack.accept(big)
    with pytest.raises(ValueError, match=str(limit)):
        await stack.store.create_many([big], idempotency_expires_at=None, now=stack.now())

    assert await stack.store.get(big.job_id) is None


# --- create_many ------------------------------------------------------------------


async def test_a_batch_resolves_one_key_twice_in_order(stack: Stack) -> None:
    a1 = stack.job(idempotency_key="a")
    a2 = stack.job(idempotency_key="a")  # the same request: replays a1
    a3 = stack.job(idempotency_key="a", input={"prompt": "other"})  # mismatch
    free = stack.job()

    outcomes = await stack.store.create_many(
        [a1, a2, a3, free], idempotency_expires_at=stack.now() + 60, now=stack.now()
    )

    first, second, third, fourth = outcomes
    assert isinstance(first, Accepted) and first.created
    assert isinstance(second, Accepted) and not second.created
    assert second.job.job_id == a1.job_id
    assert isinstance(third, IdempotencyKeyMismatchError)
    assert isinstance(fourth, Accepted) and fourth.created
    assert (await stack.store.usage("t1")).stored == 2
    assert await stack.store.get(a2.job_id) is None


async def test_fifty_jobs_in_chunks_settle_each_stored_key_per_item(stack: Stack) -> None:
    """Keys k0..k9 are stored first; a batch of 50 repeats them (even: the same request,
    odd: another), chunked as intake chunks it; every outcome is the item's own."""
    stored = {}
    for i in range(10):
        stored[i] = (await stack.accept(stack.job(idempotency_key=f"k{i}"))).job.job_id
    jobs = [
        stack.job(idempotency_key=f"k{i}", input={"prompt": "Hello" if i % 2 == 0 else "x"})
        if i < 10
        else stack.job(idempotency_key=f"new{i}")
        for i in range(50)
    ]
    size = stack.port.capabilities.max_atomic_batch
    assert size is not None and size < 50

    outcomes: list[Any] = []
    for start in range(0, 50, size):
        outcomes += await stack.store.create_many(
            jobs[start : start + size], idempotency_expires_at=stack.now() + 60, now=stack.now()
        )

    for i, outcome in enumerate(outcomes):
        if i < 10 and i % 2 == 0:
            assert isinstance(outcome, Accepted) and not outcome.created
            assert outcome.job.job_id == stored[i]
        elif i < 10:
            assert isinstance(outcome, IdempotencyKeyMismatchError)
        else:
            assert isinstance(outcome, Accepted) and outcome.created
    assert (await stack.store.usage("t1")).stored == 50


async def test_a_batch_over_max_atomic_batch_is_refused_with_nothing_stored(stack: Stack) -> None:
    size = stack.port.capabilities.max_atomic_batch
    assert size == 23  # (100 items - 8 counter shards) // 4 items per keyed job
    jobs = [stack.job(idempotency_key=f"k{i}") for i in range(size + 1)]

    with pytest.raises(ValueError, match=str(size)):
        await stack.store.create_many(jobs, idempotency_expires_at=None, now=stack.now())

    assert (await stack.store.usage("t1")).stored == 0


async def test_a_full_batch_is_stored_whole_and_a_clash_stores_none_of_it(stack: Stack) -> None:
    size = stack.port.capabilities.max_atomic_batch
    assert size is not None
    existing = await stack.accept(stack.job())
    clash = stack.job(job_id=existing.job.job_id)
    jobs = [stack.job(idempotency_key=f"k{i}") for i in range(size - 1)]

    with pytest.raises(StateConflictError):
        await stack.store.create_many([*jobs, clash], idempotency_expires_at=None, now=stack.now())
    assert (await stack.store.usage("t1")).stored == 1

    fresh = [stack.job(idempotency_key=f"k{i}") for i in range(size)]
    outcomes = await stack.store.create_many(fresh, idempotency_expires_at=None, now=stack.now())
    assert all(isinstance(o, Accepted) and o.created for o in outcomes)
    assert (await stack.store.usage("t1")).stored == size + 1


# --- apply --------------------------------------------------------------------------


async def test_a_change_from_a_stale_revision_writes_nothing(stack: Stack) -> None:
    job = (await stack.accept(stack.job())).job
    stale = await stack.store.get(job.job_id)
    assert stale is not None
    await stack.store.request_cancel(job.job_id, tenant_id="t1", now=stack.now())
    events_before = await stack.store.events(job.job_id)
    after_cancel = await stack.store.get(job.job_id)

    change = changes.claim(
        stale,
        attempt_id=new_attempt_id(),
        worker_id="w",
        now=stack.now(),
        lease_until=stack.now() + 60,
        max_deliveries_without_outcome=10,
    )

    assert await stack.port.apply(change) is False
    assert await stack.store.get(job.job_id) == after_cancel
    assert await stack.store.events(job.job_id) == events_before
    assert await stack.store.attempts(job.job_id) == []
    assert (await stack.store.usage("t1")).unfinished == 0


async def test_a_heartbeat_is_one_conditional_write_and_a_stale_one_writes_nothing(
    stack: Stack,
) -> None:
    job = (await stack.accept(stack.job())).job
    claimed = await stack.claim(job.job_id)
    renew = changes.renew_lease(
        claimed, attempt_id=claimed.attempt_id, now=stack.now(), lease_until=stack.now() + 90
    )
    assert (renew.events, renew.opened, renew.closed, renew.backlog_delta) == ((), None, (), 0)

    assert await stack.port.apply(renew) is True
    assert await stack.port.apply(renew) is False  # its revision moved: the first wrote it
    stored = await stack.store.get(job.job_id)
    assert stored == renew.after


async def test_a_change_to_a_job_that_is_gone_is_not_written(stack: Stack) -> None:
    job = stack.job()
    change = changes.mark_dispatched(
        dataclasses.replace(job, revision=1), now=stack.now(), redispatch=False
    )
    assert change is not None

    assert await stack.port.apply(change) is False
    assert await stack.store.get(job.job_id) is None


async def test_claim_heartbeat_and_publish_through_the_ledger(stack: Stack) -> None:
    job = (await stack.accept(stack.job())).job
    claimed = await stack.claim(job.job_id)
    stack.clock.advance(5)
    lease = await stack.store.renew_lease(
        job.job_id, attempt_id=claimed.attempt_id, now=stack.now(), lease_until=stack.now() + 60
    )
    assert lease.held

    done = await stack.store.succeed(
        job.job_id,
        attempt_id=claimed.attempt_id,
        now=stack.now(),
        result_ref="ref-1",
        report=dataclasses.replace(SUCCEEDED, input_tokens=3, output_tokens=4, model="sim"),
    )

    assert done is not None and done.status is JobStatus.SUCCEEDED
    assert await stack.store.get(job.job_id) == done
    assert [(e.seq, e.kind) for e in await stack.store.events(job.job_id)] == [
        (1, EventKind.ACCEPTED),
        (2, EventKind.DISPATCHED),
        (3, EventKind.CLAIMED),
        (4, EventKind.SUCCEEDED),
    ]
    [attempt] = await stack.store.attempts(job.job_id)
    assert (attempt.outcome, attempt.input_tokens, attempt.ended_at) == (
        AttemptOutcome.SUCCEEDED,
        3,
        stack.now(),
    )
    usage = await stack.store.usage("t1")
    assert (usage.unfinished, usage.stored) == (0, 1)


async def test_an_attempt_keeps_its_first_ending_but_abandoned_is_corrected(
    stack: Stack,
) -> None:
    job = (await stack.accept(stack.job())).job
    first = await stack.claim(job.job_id, lease=60)
    stack.clock.advance(61)
    second = await stack.claim(job.job_id, worker="w2")  # takes over: first abandoned
    attempts = await stack.store.attempts(job.job_id)
    assert [a.outcome for a in attempts] == [AttemptOutcome.ABANDONED, None]

    await stack.store.end_attempt(
        job.job_id, attempt_id=first.attempt_id, now=stack.now(), report=LEASE_LOST
    )
    corrected = (await stack.store.attempts(job.job_id))[0]
    assert (corrected.outcome, corrected.latency_ms) == (AttemptOutcome.LEASE_LOST, 99)

    await stack.store.schedule_retry(
        job.job_id,
        attempt_id=second.attempt_id,
        now=stack.now(),
        not_before=stack.now(),
        error=TRANSIENT,
        report=AttemptReport(outcome=AttemptOutcome.RETRY, failure_class=FailureClass.TRANSIENT),
    )
    # A late ending for an attempt that ended on its own: the change is written, the
    # attempt keeps its own account.
    later = changes.lease_lost(
        await stack.store.get(job.job_id),  # type: ignore[arg-type]
        dataclasses.replace((await stack.store.attempts(job.job_id))[1], outcome=None),
        now=stack.now(),
        report=LEASE_LOST,
    )
    assert later is not None
    assert await stack.port.apply(later) is True
    kept = (await stack.store.attempts(job.job_id))[1]
    assert (kept.outcome, kept.failure_class) == (AttemptOutcome.RETRY, FailureClass.TRANSIENT)
    assert (await stack.store.events(job.job_id))[-1].kind is EventKind.LEASE_LOST


async def test_a_cancel_of_a_running_job_nudges_this_process(stack: Stack) -> None:
    job = (await stack.accept(stack.job())).job
    other = (await stack.accept(stack.job())).job
    await stack.claim(job.job_id)
    since = stack.port.cancel_hints.generation

    await stack.store.request_cancel(job.job_id, tenant_id="t1", now=stack.now())

    assert stack.port.cancel_hints.generation == since + 1
    assert await stack.store.cancel_requested([job.job_id, other.job_id, "gen_gone"]) == {
        job.job_id
    }
    assert await stack.store.existing([job.job_id, "gen_gone"]) == {job.job_id}
    assert set(await stack.store.get_many([job.job_id, other.job_id, "gen_gone"])) == {
        job.job_id,
        other.job_id,
    }


# --- lists --------------------------------------------------------------------------


async def test_lists_page_newest_first_by_cursor_for_a_tenant_and_for_all(stack: Stack) -> None:
    mine = [(await stack.accept(stack.job())).job.job_id for _ in range(7)]
    theirs = [(await stack.accept(stack.job(tenant_id="t2"))).job.job_id for _ in range(5)]

    def walk_ids() -> list[str]:
        return []

    async def walk(tenant_id: str | None, limit: int) -> list[str]:
        seen, cursor = walk_ids(), None
        while True:
            page = await stack.store.list_jobs(tenant_id=tenant_id, limit=limit, cursor=cursor)
            seen += _summary_ids(page)
            if page.next_cursor is None:
                return seen
            assert page.next_cursor == page.jobs[-1].job_id
            cursor = page.next_cursor

    assert await walk("t1", 3) == sorted(mine, reverse=True)
    assert await walk("t2", 2) == sorted(theirs, reverse=True)
    assert await walk(None, 4) == sorted(mine + theirs, reverse=True)
    last = await stack.store.list_jobs(tenant_id="t1", limit=7)
    assert last.next_cursor is None


async def test_lists_filter_by_status_task_and_error_code(stack: Stack) -> None:
    queued = (await stack.accept(stack.job())).job.job_id
    other_task = (await stack.accept(stack.job(task="classify_ticket"))).job.job_id
    failing = (await stack.accept(stack.job())).job.job_id
    await stack.store.fail_unowned(
        failing, now=stack.now(), error=TRANSIENT, kind=EventKind.FAILED, detail={}
    )
    await stack.accept(stack.job(tenant_id="t2"))

    async def ids(**filters: Any) -> list[str]:
        return _summary_ids(await stack.store.list_jobs(**filters))

    assert await ids(tenant_id="t1", status=JobStatus.FAILED) == [failing]
    assert await ids(tenant_id=None, status=JobStatus.FAILED) == [failing]
    assert await ids(tenant_id="t1", task="classify_ticket") == [other_task]
    assert await ids(tenant_id=None, error_code="timeout") == [failing]
    assert await ids(tenant_id="t1", error_code="other") == []
    assert await ids(tenant_id="t1", status=JobStatus.QUEUED, limit=1) == [other_task]
    named = await ids(tenant_id="t1", job_ids=[queued, failing, "gen_gone"])
    assert named == sorted([queued, failing], reverse=True)
    assert await ids(tenant_id="t2", job_ids=[queued]) == []
    assert await ids(tenant_id="t1", job_ids=[]) == []
    [summary] = (await stack.store.list_jobs(tenant_id="t1", job_ids=[failing])).jobs
    assert summary.error == TRANSIENT


async def test_a_page_ends_before_the_job_that_would_take_it_over_its_budget(
    stack: Stack,
) -> None:
    ids = [
        (await stack.accept(stack.job(metadata={"pad": "é" * 100}))).job.job_id for _ in range(4)
    ]
    weight = LIST_ITEM_BYTES + len('{"pad":""}') + 200  # é is two bytes

    page = await stack.store.list_jobs(tenant_id="t1", max_bytes=2 * weight + 1)
    assert _summary_ids(page) == sorted(ids, reverse=True)[:2]
    assert page.listed_bytes == 2 * weight
    assert page.next_cursor == page.jobs[-1].job_id

    tiny = await stack.store.list_jobs(tenant_id=None, max_bytes=1)
    assert len(tiny.jobs) == 1 and tiny.listed_bytes == weight
    rest = await stack.store.list_jobs(
        tenant_id=None, cursor=page.next_cursor, max_bytes=10 * weight
    )
    assert _summary_ids(rest) == sorted(ids, reverse=True)[2:]
    assert rest.next_cursor is None


async def test_the_dead_letter_list_reads_only_dead_letters_and_a_replay_leaves_it(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_letter = JobError(
        code=DEAD_LETTERED_CODE, failure_class=FailureClass.TRANSIENT, message="redriven"
    )
    for _ in range(5):
        await stack.accept(stack.job())
    other_failure = (await stack.accept(stack.job())).job.job_id
    await stack.store.fail_unowned(
        other_failure, now=stack.now(), error=TRANSIENT, kind=EventKind.FAILED, detail={}
    )
    dead = []
    for tenant in ("t1", "t2"):
        job_id = (await stack.accept(stack.job(tenant_id=tenant))).job.job_id
        await stack.store.fail_unowned(
            job_id, now=stack.now(), error=dead_letter, kind=EventKind.DEAD_LETTERED, detail={}
        )
        dead.append(job_id)
    dynamodb = stack.port._clients.dynamodb
    read: list[str] = []
    batch_get_item = dynamodb.batch_get_item

    async def counted(**kwargs: Any) -> Any:
        for request in kwargs["RequestItems"].values():
            read.extend(k["pk"]["S"].removeprefix("job#") for k in request["Keys"])
        return await batch_get_item(**kwargs)

    monkeypatch.setattr(dynamodb, "batch_get_item", counted)

    page = await stack.store.list_jobs(
        tenant_id=None, status=JobStatus.FAILED, error_code=DEAD_LETTERED_CODE
    )

    assert _summary_ids(page) == sorted(dead, reverse=True)
    assert sorted(read) == sorted(dead)  # the other 7 jobs were never read
    await stack.store.replay(dead[0], now=stack.now(), actor="ops", reason="r", include_failed=True)
    again = await stack.store.list_jobs(
        tenant_id=None, status=JobStatus.FAILED, error_code=DEAD_LETTERED_CODE
    )
    assert _summary_ids(again) == [dead[1]]
    assert "lpk" not in (await _raw_items(stack, dead[0]))[layout.JOB_SK]


# --- usage --------------------------------------------------------------------------


async def test_counters_follow_creates_finishes_replays_and_purges(stack: Stack) -> None:
    done = await stack.finished()
    failing = (await stack.accept(stack.job())).job.job_id
    await stack.accept(stack.job())
    await stack.accept(stack.job(tenant_id="t2"))
    usage = await stack.store.usage("t1")
    assert (usage.unfinished, usage.stored) == (2, 3)

    await stack.store.fail_unowned(
        failing, now=stack.now(), error=TRANSIENT, kind=EventKind.DEAD_LETTERED, detail={}
    )
    assert (await stack.store.usage("t1")).unfinished == 1
    await stack.store.replay(failing, now=stack.now(), actor="ops", reason="r", include_failed=True)
    assert (await stack.store.usage("t1")).unfinished == 2
    stack.clock.advance(10)
    assert await stack.store.purge_finished(completed_before=stack.now(), limit=10) == [done]
    usage = await stack.store.usage("t1")
    assert (usage.unfinished, usage.stored) == (2, 2)
    assert (await stack.store.usage("nobody")).stored == 0


async def test_usage_reports_group_by_day_model_and_task(stack: Stack) -> None:
    start = stack.now()

    async def run(*, task: str = "generate", tenant_id: str = "t1", cost: int = 100) -> None:
        job = (await stack.accept(stack.job(task=task, tenant_id=tenant_id))).job
        first = await stack.claim(job.job_id)
        await stack.store.schedule_retry(
            job.job_id,
            attempt_id=first.attempt_id,
            now=stack.now(),
            not_before=stack.now(),
            error=TRANSIENT,
            report=AttemptReport(
                outcome=AttemptOutcome.RETRY,
                failure_class=FailureClass.TRANSIENT,
                model="fast",
                cost_nano_usd=cost,
                input_tokens=10,
                output_tokens=1,
            ),
        )
        second = await stack.claim(job.job_id)
        await stack.store.succeed(
            job.job_id,
            attempt_id=second.attempt_id,
            now=stack.now(),
            result_ref="r",
            report=AttemptReport(
                outcome=AttemptOutcome.SUCCEEDED,
                model="backup",
                cost_nano_usd=1000,
                finish_reason="stop",
                input_tokens=5,
            ),
        )

    await run()
    stack.clock.advance(DAY)
    await run(task="classify_ticket")
    await run(tenant_id="t2")
    end = stack.now() + 1

    by_model = await stack.store.usage_report(
        tenant_id="t1", start=start, end=end, group_by=UsageGroup.MODEL
    )
    assert [(r.key, r.calls, r.failed_calls) for r in by_model] == [
        ("backup", 2, 0),
        ("fast", 2, 2),
    ]
    backup, fast = by_model
    assert (backup.cost_nano_usd, backup.wasted_nano_usd, backup.unknown_usage_calls) == (
        2000,
        0,
        2,
    )
    assert (fast.input_tokens, fast.output_tokens, fast.wasted_nano_usd) == (20, 2, 200)
    by_task = await stack.store.usage_report(
        tenant_id=None, start=start, end=end, group_by=UsageGroup.TASK
    )
    assert [(r.key, r.calls) for r in by_task] == [("classify_ticket", 2), ("generate", 4)]
    by_day = await stack.store.usage_report(
        tenant_id="t1", start=start, end=end, group_by=UsageGroup.DAY
    )
    assert [(r.key, r.calls) for r in by_day] == [
        (layout.utc_day(start), 2),
        (layout.utc_day(start + DAY), 2),
    ]
    first_day = await stack.store.usage_report(
        tenant_id="t1", start=start, end=start + 1, group_by=UsageGroup.DAY
    )
    assert [(r.key, r.calls) for r in first_day] == [(layout.utc_day(start), 2)]
    assert (
        await stack.store.usage_report(
            tenant_id="t1", start=end, end=start, group_by=UsageGroup.DAY
        )
        == []
    )


# --- upkeep -------------------------------------------------------------------------


async def test_stalled_lists_only_jobs_nothing_drives_oldest_first(stack: Stack) -> None:
    pending = stack.job()
    await stack.store.create(pending, idempotency_expires_at=None, now=stack.now())
    stack.clock.advance(1)
    lost = (await stack.accept(stack.job())).job.job_id
    await stack.claim(lost, lease=10)
    stack.clock.advance(1)
    waiting = (await stack.accept(stack.job())).job.job_id  # its message drives it
    running = (await stack.accept(stack.job())).job.job_id
    claimed = await stack.claim(running, lease=10)
    await stack.finished()
    stack.clock.advance(400)
    await stack.store.renew_lease(
        running, attempt_id=claimed.attempt_id, now=stack.now() - 395, lease_until=stack.now()
    )

    found = await stack.store.stalled(now=stack.now(), older_than_seconds=300, limit=100)

    assert [j.job_id for j in found] == [pending.job_id, lost]
    assert waiting not in {j.job_id for j in found}
    one = await stack.store.stalled(now=stack.now(), older_than_seconds=300, limit=1)
    assert [j.job_id for j in one] == [pending.job_id]
    assert await stack.store.stalled(now=stack.now(), older_than_seconds=300, limit=0) == []


async def test_purge_finished_deletes_old_jobs_whole_oldest_first(stack: Stack) -> None:
    old = [await stack.finished(idempotency_key=f"k{i}") for i in range(3)]
    stack.clock.advance(100)
    recent = await stack.finished()
    unfinished = (await stack.accept(stack.job())).job.job_id
    stack.clock.advance(100)

    first = await stack.store.purge_finished(completed_before=stack.now() - 150, limit=2)
    second = await stack.store.purge_finished(completed_before=stack.now() - 150, limit=2)

    assert first == old[:2]
    assert second == old[2:]
    for job_id in old:
        assert await stack.store.get(job_id) is None
        assert await _raw_items(stack, job_id) == {}  # its input's item went with it
        assert await stack.store.events(job_id) == []
        assert await stack.store.attempts(job_id) == []
    assert await stack.store.existing([*old, recent, unfinished]) == {recent, unfinished}
    again = await stack.accept(stack.job(idempotency_key="k0"))  # its key went with it
    assert again.created is True
    assert await stack.store.purge_finished(completed_before=stack.now(), limit=0) == []


async def _long_history(stack: Stack, job_id: str, events: int) -> None:
    """``events`` more event items under the job (a history over one transaction's room)."""
    for start in range(0, events, 25):
        await stack.port._clients.dynamodb.batch_write_item(
            RequestItems={
                stack.port._table: [
                    {
                        "PutRequest": {
                            "Item": {
                                "pk": {"S": layout.job_pk(job_id)},
                                "sk": {"S": layout.event_sk(1_000 + n)},
                            }
                        }
                    }
                    for n in range(start, min(events, start + 25))
                ]
            }
        )


async def test_a_purge_of_a_long_history_deletes_it_whole(stack: Stack) -> None:
    job_id = await stack.finished()
    await _long_history(stack, job_id, 150)
    stack.clock.advance(100)

    assert await stack.store.purge_finished(completed_before=stack.now(), limit=10) == [job_id]

    assert await _raw_items(stack, job_id) == {}
    assert await _raw_items_of(stack, layout.PURGING_PK) == {}


async def test_a_purge_stopped_after_its_transaction_is_finished_by_the_next(
    stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    job_id = await stack.finished()
    await _long_history(stack, job_id, 150)
    stack.clock.advance(100)

    async def killed(*_: Any) -> None:
        raise StoreUnavailableError("the process stopped here")

    with monkeypatch.context() as patched:
        patched.setattr(store_upkeep, "_delete_keys", killed)
        with pytest.raises(StoreUnavailableError):
            await stack.store.purge_finished(completed_before=stack.now(), limit=10)
    assert await stack.store.get(job_id) is None  # the transaction was made
    assert len(await _raw_items(stack, job_id)) > 0  # and the rest was left
    assert list(await _raw_items_of(stack, layout.PURGING_PK)) == [job_id]

    assert await stack.store.purge_finished(completed_before=stack.now(), limit=10) == []

    assert await _raw_items(stack, job_id) == {}
    assert await _raw_items_of(stack, layout.PURGING_PK) == {}


async def test_purge_expired_keys_deletes_only_expired_entries(stack: Stack) -> None:
    await stack.accept(stack.job(idempotency_key="short"), retention=10)
    await stack.accept(stack.job(idempotency_key="long"), retention=1000)
    forever = stack.job(idempotency_key="forever")
    await stack.store.create(forever, idempotency_expires_at=None, now=stack.now())
    stack.clock.advance(11)

    assert await stack.store.purge_expired_keys(now=stack.now(), limit=10) == 1
    assert await stack.store.purge_expired_keys(now=stack.now(), limit=10) == 0
    stack.clock.advance(10_000)
    assert await stack.store.purge_expired_keys(now=stack.now(), limit=10) == 1
    replay = await stack.accept(stack.job(idempotency_key="forever"))
    assert (replay.created, replay.job.job_id) == (False, forever.job_id)


# --- health ---------------------------------------------------------------------------


async def test_ping_reads_and_writes_and_a_missing_table_is_unavailable(stack: Stack) -> None:
    await stack.port.ping()
    await stack.port.ping(write=True)
    await stack.port.ping(write=True)

    async with open_clients() as clients:
        missing = DynamoJobStore(clients, "no-such-table", clock=stack.clock)
        with pytest.raises(StoreUnavailableError, match="ferryman migrate"):
            await missing.ping()
