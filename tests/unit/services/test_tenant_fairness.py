"""No tenant can starve another, and no client's script steers what tenants share (item 4)."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import InvalidRequestError
from ferryman.core.job import JobStatus
from ferryman.providers.simulated import SimulatedProvider
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.tasks import builtin_tasks


class TenantGatedProvider:
    """The sim, except that calls whose prompt starts with "slow" wait for a release."""

    def __init__(self) -> None:
        self._inner = SimulatedProvider()
        self.release = asyncio.Event()
        self.slow_started = 0

    @property
    def name(self) -> str:
        return "sim"

    def serves(self, model: str) -> bool:
        return model == "sim"

    async def invoke(self, request, *, timeout_seconds):
        if request.prompt.startswith("slow"):
            self.slow_started += 1
            await self.release.wait()
        return await self._inner.invoke(request, timeout_seconds=timeout_seconds)


async def test_one_tenants_slow_flood_does_not_hold_another_tenants_quick_jobs(
    make_world, eventually
):
    world = make_world()
    provider = TenantGatedProvider()
    slow = [await world.submit(f"slow {i}", tenant="a") for i in range(90)]
    quick = [await world.submit(f"quick {i}", tenant="b") for i in range(20)]
    worker = world.worker(providers=[provider], concurrency=8, tenant_max_share=0.5)
    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))
    try:
        await eventually(lambda: _all_are(world, quick, JobStatus.SUCCEEDED), within_seconds=10)
        # Tenant a never held more than its share of the 8 slots.
        assert provider.slow_started == 4
        assert JobStatus.SUCCEEDED not in await _statuses(world, slow)
    finally:
        provider.release.set()
        stop.set()
        await asyncio.wait_for(running, 10)


async def _all_are(world, jobs, status):
    return await _statuses(world, jobs) == {status}


async def _statuses(world, jobs):
    return {(await world.job(job.job_id)).status for job in jobs}


async def test_a_scripted_throttle_does_not_narrow_the_window_every_tenant_shares(make_world):
    world = make_world()
    for i in range(20):
        await world.submit(f"x{i}", tenant="mallory", simulate={"script": ["throttle", "ok"]})
    worker = world.worker(concurrency=16)
    window = worker._runner._limiters.get("sim", "sim").window

    await worker.run_until_idle(max_rounds=1)

    assert window.permits == 16


async def test_with_sim_scripts_off_a_script_is_refused_and_nothing_is_stored(make_world):
    world = make_world()
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=60,
        sim_scripts=False,
    )
    request = SubmitRequest(
        task="generate", input={"prompt": "hi", "simulate": {"script": ["throttle"]}}
    )

    with pytest.raises(InvalidRequestError) as refused:
        await intake.submit(tenant_id="t1", request=request)

    assert refused.value.errors[0]["loc"] == ["body", "input", "simulate"]
    assert "FERRYMAN_SIM_SCRIPTS" in refused.value.message
    assert (await world.queue.stats()).visible == 0


async def test_with_sim_scripts_off_a_stored_script_is_not_followed():
    provider = SimulatedProvider(scripts=False)
    request = (
        builtin_tasks()
        .get("generate")
        .build_request(
            {"prompt": "hi", "simulate": {"script": ["refuse"], "latency_ms": 600_000}},
            model="sim",
            attempt_no=1,
            job_id="gen_x",
        )
    )

    response = await asyncio.wait_for(provider.invoke(request, timeout_seconds=5), 5)

    assert "hi" in response.text
