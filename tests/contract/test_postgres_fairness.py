"""Fair shares across worker processes on one PostgreSQL.

One tenant floods the queue with slow jobs; two worker processes (real subprocesses,
each letting one tenant hold FERRYMAN_TENANT_MAX_SHARE=0.5 of its slots) take as many
as the share allows. Another tenant then submits quick jobs. They must not wait for a
flood job to finish: they run in the slots the flood may not hold. The check reads
the jobs' own times, not the wall clock: no flood job completed before the first
quick one did, and at most one round of the flood completed before the last quick
one. (With a share of 1 the flood holds every slot, and the quick jobs wait for its
first round: the first check fails.)
"""

from __future__ import annotations

import asyncio
import math

import pytest

from ferryman.config import Settings
from ferryman.core.job import JobStatus
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

pytestmark = pytest.mark.timeout(120)

WORKERS = 2
CONCURRENCY = 4
SHARE = 0.5
FLOOD_JOBS = 40
FLOOD_LATENCY_MS = 3000
QUICK_JOBS = 20
QUICK_LATENCY_MS = 10


def _request(latency_ms: int, n: int) -> SubmitRequest:
    return SubmitRequest(
        task="generate", input={"prompt": f"job {n}", "simulate": {"latency_ms": latency_ms}}
    )


async def test_a_flood_does_not_hold_another_tenants_jobs_behind_it(
    postgres_scratch, worker_process
):
    url = postgres_scratch()
    settings = Settings(
        database_url=url, results_url="db", postgres_pool_max_size=3, sim_scripts=True
    )
    flood_slots = WORKERS * math.floor(CONCURRENCY * SHARE)
    async with open_runtime(settings) as runtime:
        flood = [
            (
                await runtime.intake.submit(
                    tenant_id="flood", request=_request(FLOOD_LATENCY_MS, n)
                )
            ).job.job_id
            for n in range(FLOOD_JOBS)
        ]
        for _ in range(WORKERS):
            worker_process(
                url,
                worker_concurrency=str(CONCURRENCY),
                tenant_max_share=str(SHARE),
                sim_scripts="true",
            )
        await _wait_until(runtime, flood, JobStatus.PROCESSING, flood_slots)
        quick = [
            (
                await runtime.intake.submit(
                    tenant_id="quick", request=_request(QUICK_LATENCY_MS, n)
                )
            ).job.job_id
            for n in range(QUICK_JOBS)
        ]
        quick_done = await _wait_until(runtime, quick, JobStatus.SUCCEEDED, QUICK_JOBS)
        flood_jobs = [await runtime.store.get(job_id) for job_id in flood]

    flood_done = sorted(
        job.completed_at for job in flood_jobs if job is not None and job.completed_at is not None
    )
    assert not [t for t in flood_done if t <= min(quick_done)], "quick jobs waited for the flood"
    assert len([t for t in flood_done if t <= max(quick_done)]) <= flood_slots


async def _wait_until(runtime, job_ids: list[str], status: JobStatus, count: int) -> list[float]:
    """Once ``count`` of the jobs are in ``status``: the completion times of those done."""
    for _ in range(600):
        jobs = [job for job_id in job_ids if (job := await runtime.store.get(job_id)) is not None]
        if sum(1 for job in jobs if job.status is status) >= count:
            return [job.completed_at for job in jobs if job.completed_at is not None]
        await asyncio.sleep(0.1)
    raise AssertionError(f"fewer than {count} jobs reached {status} within a minute")
