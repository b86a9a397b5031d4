"""A tenant's backlog and storage are bounded; old finished jobs go away (item 13)."""

from __future__ import annotations

import pytest

from ferryman.core.errors import BacklogQuotaExceededError, StorageQuotaExceededError
from ferryman.core.job import JobStatus
from ferryman.services.intake import Intake, SubmitRequest, TenantQuotas
from ferryman.services.retention import Retention
from ferryman.tasks import builtin_tasks


def _intake(world, **quotas) -> Intake:
    return Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=60,
        quotas=TenantQuotas(**quotas),
        sim_scripts=False,
    )


async def _submit(intake, tenant="t1", prompt="hi"):
    return await intake.submit(
        tenant_id=tenant, request=SubmitRequest(task="generate", input={"prompt": prompt})
    )


async def test_a_tenant_over_its_backlog_is_refused_others_are_not(make_world):
    world = make_world()
    intake = _intake(world, max_backlog=2)
    await _submit(intake)
    await _submit(intake)

    with pytest.raises(BacklogQuotaExceededError, match="FERRYMAN_TENANT_MAX_BACKLOG"):
        await _submit(intake, prompt="third")
    await _submit(intake, tenant="t2")  # another tenant's backlog is its own

    assert (await world.store.usage("t1")).unfinished == 2
    await world.worker().run_until_idle()  # finished jobs leave the backlog
    await _submit(intake, prompt="third")


async def test_a_tenant_over_its_stored_jobs_is_refused_until_old_ones_are_purged(make_world):
    world = make_world()
    intake = _intake(world, max_stored_jobs=1)
    await _submit(intake)
    await world.worker().run_until_idle()

    with pytest.raises(StorageQuotaExceededError, match="purge"):
        await _submit(intake, prompt="more")

    world.clock.advance(100)
    report = await Retention(store=world.store, clock=world.clock).purge(older_than_seconds=50)
    assert report.jobs == 1
    await _submit(intake, prompt="more")


async def test_purge_never_touches_unfinished_jobs_and_goes_in_batches(make_world):
    world = make_world()
    finished = [await world.submit(f"done {i}") for i in range(5)]
    await world.worker().run_until_idle()
    waiting = await world.submit("still waiting")
    world.clock.advance(1000)
    retention = Retention(store=world.store, clock=world.clock, batch_size=2)

    partial = await retention.purge(older_than_seconds=10, max_batches=2)
    rest = await retention.purge(older_than_seconds=10)

    assert (partial.jobs, partial.batches, partial.more) == (4, 2, True)
    assert (rest.jobs, rest.more) == (1, False)
    assert [await world.store.get(job.job_id) for job in finished] == [None] * 5
    assert (await world.job(waiting.job_id)).status is JobStatus.QUEUED


async def test_the_sweeper_purges_when_a_retention_period_is_set(make_world):
    world = make_world()
    job = await world.submit("old")
    await world.worker().run_until_idle()
    world.clock.advance(3600)
    retention = Retention(store=world.store, clock=world.clock)

    without = await world.sweeper(retention=retention).sweep_once()
    with_period = await world.sweeper(retention=retention, retention_seconds=60).sweep_once()

    assert (without.purged, with_period.purged) == (0, 1)
    assert await world.store.get(job.job_id) is None
