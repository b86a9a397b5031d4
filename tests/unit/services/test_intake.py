"""Intake: one logical job per (tenant, key, request); bad input stores nothing (I1, I7)."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import (
    IdempotencyKeyMismatchError,
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    PausedError,
    StoreUnavailableError,
)
from ferryman.core.job import DispatchState, EventKind, JobStatus
from ferryman.ports.control import Switch
from ferryman.services.intake import BATCH_SLICE_JOBS, BatchItem, Submission, SubmitRequest


async def _nothing_stored(world) -> None:
    page = await world.store.list_jobs(tenant_id=None)
    assert page.jobs == []
    assert (await world.queue.stats()).visible == 0


async def test_new_job_is_queued_dispatched_and_recorded(make_world) -> None:
    world = make_world()
    job = await world.submit("hi")
    assert job.job_id.startswith("gen_")
    assert job.status is JobStatus.QUEUED
    assert job.dispatch_state is DispatchState.DISPATCHED
    assert job.model == "sim"
    assert job.correlation_id.startswith("cor_")
    kinds = [e.kind for e in await world.store.events(job.job_id)]
    assert kinds[0] is EventKind.ACCEPTED
    assert (await world.queue.stats()).visible == 1


async def test_same_key_same_request_returns_the_same_job(make_world) -> None:
    world = make_world()
    first = await world.intake.submit(
        tenant_id="t1", request=SubmitRequest("generate", {"prompt": "a"}), idempotency_key="k1"
    )
    again = await world.intake.submit(
        tenant_id="t1", request=SubmitRequest("generate", {"prompt": "a"}), idempotency_key="k1"
    )
    assert not first.replayed
    assert again.replayed
    assert again.job.job_id == first.job.job_id
    assert (await world.queue.stats()).visible == 1


async def test_forty_concurrent_submits_with_one_key_make_one_job(make_world) -> None:
    world = make_world()
    request = SubmitRequest("generate", {"prompt": "same"})
    subs = await asyncio.gather(
        *(
            world.intake.submit(tenant_id="t1", request=request, idempotency_key="k")
            for _ in range(40)
        )
    )
    assert len({s.job.job_id for s in subs}) == 1
    assert sum(not s.replayed for s in subs) == 1
    assert await world.worker().run_until_idle() == 1
    assert world.provider.invocations == 1


async def test_same_key_different_request_is_rejected_and_stores_nothing(make_world) -> None:
    world = make_world()
    first = await world.submit("a", key="k1")
    with pytest.raises(IdempotencyKeyMismatchError):
        await world.submit("b", key="k1")
    page = await world.store.list_jobs(tenant_id=None)
    assert [j.job_id for j in page.jobs] == [first.job_id]


async def test_same_key_in_another_tenant_is_another_job(make_world) -> None:
    world = make_world()
    a = await world.submit("a", key="k1", tenant="t1")
    b = await world.submit("a", key="k1", tenant="t2")
    assert a.job_id != b.job_id


async def test_key_expires_after_retention(make_world) -> None:
    world = make_world()
    a = await world.submit("a", key="k1")
    world.clock.advance(3601)
    b = await world.submit("b", key="k1")
    assert a.job_id != b.job_id


@pytest.mark.parametrize(
    ("request_", "loc"),
    [
        (SubmitRequest("nope", {"prompt": "x"}), ["body", "task"]),
        (SubmitRequest("generate", {}), ["body", "input", "prompt"]),
        (SubmitRequest("generate", {"prompt": "x", "extra": 1}), ["body", "input", "extra"]),
        (
            SubmitRequest("generate", {"prompt": "x", "simulate": {"script": ["explode"]}}),
            ["body", "input", "simulate", "script", 0],
        ),
        (SubmitRequest("generate", {"prompt": "x"}, model="gpt-9"), ["body", "model"]),
        (
            SubmitRequest("generate", {"prompt": "x"}, metadata={"k": "v" * 5000}),
            ["body", "metadata"],
        ),
    ],
)
async def test_bad_input_is_refused_before_anything_is_stored(make_world, request_, loc) -> None:
    world = make_world()
    with pytest.raises(InvalidRequestError) as raised:
        await world.intake.submit(tenant_id="t1", request=request_, idempotency_key="k")
    assert any(list(e["loc"])[: len(loc)] == loc for e in raised.value.errors), raised.value.errors
    await _nothing_stored(world)
    assert world.provider.invocations == 0


@pytest.mark.parametrize("key", ["", "x" * 256, "caf\u00e9", "tab\there"])
async def test_bad_idempotency_key_is_refused(make_world, key) -> None:
    world = make_world()
    with pytest.raises(InvalidIdempotencyKeyError):
        await world.submit("a", key=key)
    await _nothing_stored(world)


async def test_paused_intake_refuses_and_stores_nothing(make_world) -> None:
    world = make_world()
    await world.operations.set_paused(Switch.INTAKE, True, actor="ops")
    with pytest.raises(PausedError) as raised:
        await world.submit("a")
    assert raised.value.retry_after_seconds > 0
    await _nothing_stored(world)
    await world.operations.set_paused(Switch.INTAKE, False, actor="ops")
    await world.submit("a")


async def test_outbox_path_sends_then_marks_dispatched(make_world) -> None:
    world = make_world(outbox=True)
    job = await world.submit("a")
    assert job.dispatch_state is DispatchState.DISPATCHED
    stored = await world.job(job.job_id)
    assert stored.dispatch_state is DispatchState.DISPATCHED
    deliveries = await world.queue.receive(max_messages=10, visibility_timeout_seconds=30)
    assert [d.message.job_id for d in deliveries] == [job.job_id]


@pytest.mark.parametrize("outbox", [False, True])
async def test_a_batch_stores_and_dispatches_each_good_item_and_refuses_the_rest(
    make_world, outbox: bool
) -> None:
    world = make_world(outbox=outbox)
    items = [
        BatchItem(SubmitRequest("generate", {"prompt": "one"}), idempotency_key="k1"),
        BatchItem(SubmitRequest("generate", {"prompt": "two"}), idempotency_key="bad\x01key"),
        BatchItem(SubmitRequest("generate", {"prompt": "x"}, model="no-such-model")),
        BatchItem(SubmitRequest("generate", {"prompt": "one"}), idempotency_key="k1"),
        BatchItem(SubmitRequest("generate", {"prompt": "three"})),
    ]

    one, bad_key, bad_model, replay, three = await world.intake.submit_many(
        tenant_id="t1", items=items, correlation_id="cor-batch"
    )

    assert isinstance(one, Submission)
    assert not one.replayed
    assert isinstance(bad_key, InvalidIdempotencyKeyError)
    assert isinstance(bad_model, InvalidRequestError)
    assert isinstance(replay, Submission)
    assert replay.replayed
    assert replay.job.job_id == one.job.job_id
    assert isinstance(three, Submission)
    # The outbox path dispatches each new job, as a single submit does.
    for job in (one.job, three.job):
        assert job.dispatch_state is DispatchState.DISPATCHED
        assert job.correlation_id == "cor-batch"
    assert (await world.queue.stats()).visible == 2


async def test_a_paused_intake_refuses_a_batch_and_stores_nothing(make_world) -> None:
    world = make_world()
    await world.operations.set_paused(Switch.INTAKE, True, actor="ops")
    with pytest.raises(PausedError):
        await world.intake.submit_many(
            tenant_id="t1", items=[BatchItem(SubmitRequest("generate", {"prompt": "a"}))]
        )
    await _nothing_stored(world)


def _batch(n: int, key_prefix: str = "k") -> list[BatchItem]:
    return [
        BatchItem(SubmitRequest("generate", {"prompt": str(i)}), idempotency_key=f"{key_prefix}{i}")
        for i in range(n)
    ]


async def test_a_batch_is_stored_in_slices_each_in_one_transaction(
    make_world, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world()
    sizes: list[int] = []
    real = world.store.create_many

    async def counting(jobs, **kwargs):
        sizes.append(len(jobs))
        return await real(jobs, **kwargs)

    monkeypatch.setattr(world.store, "create_many", counting)

    outcomes = await world.intake.submit_many(
        tenant_id="t1", items=_batch(BATCH_SLICE_JOBS * 2 + 7)
    )

    assert sizes == [BATCH_SLICE_JOBS, BATCH_SLICE_JOBS, 7]
    assert all(isinstance(o, Submission) and not o.replayed for o in outcomes)


async def test_a_store_failure_after_a_stored_slice_fails_only_the_rest_and_a_retry_converges(
    make_world, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world()
    real = world.store.create_many
    calls = 0

    async def failing_second(jobs, **kwargs):
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreUnavailableError("the disk is full")
        return await real(jobs, **kwargs)

    monkeypatch.setattr(world.store, "create_many", failing_second)
    items = _batch(BATCH_SLICE_JOBS + 30)

    outcomes = await world.intake.submit_many(tenant_id="t1", items=items)

    stored, failed = outcomes[:BATCH_SLICE_JOBS], outcomes[BATCH_SLICE_JOBS:]
    assert all(isinstance(o, Submission) for o in stored)
    assert len(failed) == 30 and all(isinstance(o, StoreUnavailableError) for o in failed)
    assert len((await world.store.list_jobs(tenant_id="t1", limit=200)).jobs) == BATCH_SLICE_JOBS
    # The same batch again: the stored jobs replay, the rest are stored now.
    again = await world.intake.submit_many(tenant_id="t1", items=items)
    assert [o.replayed for o in again] == [True] * BATCH_SLICE_JOBS + [False] * 30  # type: ignore[union-attr]
    assert [o.job.job_id for o in again[:BATCH_SLICE_JOBS]] == [o.job.job_id for o in stored]  # type: ignore[union-attr]


async def test_a_store_failure_before_anything_is_stored_fails_the_whole_batch(
    make_world, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = make_world()

    async def failing(jobs, **kwargs):
        raise StoreUnavailableError("the disk is full")

    monkeypatch.setattr(world.store, "create_many", failing)

    with pytest.raises(StoreUnavailableError):
        await world.intake.submit_many(tenant_id="t1", items=_batch(BATCH_SLICE_JOBS + 1))
    await _nothing_stored(world)
