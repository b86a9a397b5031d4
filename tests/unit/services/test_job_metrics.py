"""The job series, as the metrics observer keeps them: each fact counted once, from
the change that wrote it, whichever service made it."""

from __future__ import annotations

from ferryman.core.job import JobStatus
from ferryman.observability import metrics


def _value(metric, **labels) -> float:
    return metrics.child(metric, **labels)._value.get()


def _outcomes(status: str, failure_class: str = "") -> float:
    return _value(
        metrics.JOB_OUTCOMES,
        task="generate",
        tenant="",
        status=status,
        failure_class=failure_class,
    )


async def test_a_job_run_to_success_counts_each_fact_once(make_world):
    world = make_world()
    accepted = _value(metrics.JOBS_ACCEPTED, task="generate", tenant="")
    succeeded = _outcomes("SUCCEEDED")
    ended = _value(metrics.ATTEMPTS_ENDED, outcome="succeeded")
    calls = _value(metrics.INVOCATIONS, task="generate", model="sim")
    in_flight = metrics.IN_FLIGHT._value.get()

    job = await world.submit()
    assert _value(metrics.JOBS_ACCEPTED, task="generate", tenant="") == accepted + 1
    await world.worker().run_until_idle()

    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert _outcomes("SUCCEEDED") == succeeded + 1
    assert _value(metrics.ATTEMPTS_ENDED, outcome="succeeded") == ended + 1
    assert _value(metrics.INVOCATIONS, task="generate", model="sim") == calls + 1
    assert metrics.IN_FLIGHT._value.get() == in_flight


async def test_a_job_cancelled_before_it_ran_counts_as_an_outcome(make_world):
    """Completion is found by the ledger, not by the worker: a client's cancel of a
    queued job ends it as surely as a worker's write."""
    world = make_world()
    cancelled = _outcomes("CANCELLED")
    job = await world.submit()

    await world.store.request_cancel(job.job_id, tenant_id="t1", now=world.clock.now())

    assert (await world.job(job.job_id)).status is JobStatus.CANCELLED
    assert _outcomes("CANCELLED") == cancelled + 1
    await world.worker().run_until_idle()  # its message finds it finished: nothing more
    assert _outcomes("CANCELLED") == cancelled + 1


async def test_a_scheduled_retry_counts_once_by_its_failure_class(make_world):
    world = make_world()
    retries = _value(metrics.RETRIES, failure_class="TRANSIENT")
    await world.submit(simulate={"script": ["server_error", "ok"]})

    await world.worker().run_until_idle()

    assert _value(metrics.RETRIES, failure_class="TRANSIENT") == retries + 1
