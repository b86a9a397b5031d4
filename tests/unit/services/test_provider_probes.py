"""A provider is paused only once it is shown to refuse our credentials, probed again on a
backoff and resumed by itself; a refusal its probe contradicts fails that job alone.

Drives the worker step by step on the in-memory engine and a FakeClock, with a provider
whose calls and whose probe (``check``) are scripted separately.
"""

from __future__ import annotations

import asyncio
import re

import pytest
from prometheus_client import REGISTRY
from structlog.testing import capture_logs

from ferryman.core.errors import (
    AccountRefusedError,
    FailureClass,
    ProviderServerError,
    ProviderUnauthorizedError,
)
from ferryman.core.job import AttemptOutcome, EventKind, JobStatus
from ferryman.observability.logging import configure_logging, reset_logging
from ferryman.ports.control import AuditAction
from ferryman.ports.provider import ModelResponse
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.pauses import PAUSED_PROVIDER_RECHECK_SECONDS
from ferryman.services.probes import KeyCheck, ProbeSchedule
from ferryman.services.verdicts import Verdict
from ferryman.tasks import builtin_tasks

NAME = "gateway"
REFUSED_CALL = ProviderUnauthorizedError(f"openai provider {NAME!r} answered HTTP 403")


class Gateway:
    """A provider whose calls and whose probe are scripted apart: ``refuse_calls`` makes
    every call a 403 (or the error given), ``probe`` is what ``check`` raises (None:
    it passes), and ``probe_gate`` holds every probe until it is set."""

    def __init__(self) -> None:
        self.refuse_calls: Exception | None = REFUSED_CALL
        self.probe: Exception | None = None
        self.probe_gate: asyncio.Event | None = None
        self.calls = 0
        self.probes = 0
        self.refused = asyncio.Event()  # set once `expected_refusals` calls were refused
        self.expected_refusals = 0

    @property
    def name(self) -> str:
        return NAME

    async def invoke(self, request, *, timeout_seconds):
        self.calls += 1
        if self.refuse_calls is not None:
            if self.calls >= self.expected_refusals:
                self.refused.set()
            raise self.refuse_calls
        return ModelResponse(text='{"text": "hello"}', input_tokens=2, output_tokens=3)

    async def check(self) -> None:
        self.probes += 1
        if self.probe_gate is not None:
            await self.probe_gate.wait()
        if self.probe is not None:
            raise self.probe

    async def aclose(self) -> None:
        return None


@pytest.fixture
def gateway() -> Gateway:
    return Gateway()


async def _submit(world, catalog, *, tenant: str = "t1", prompt: str = "hi"):
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=60,
        catalog=catalog,
        sim_scripts=False,
    )
    submission = await intake.submit(
        tenant_id=tenant,
        request=SubmitRequest(task="generate", input={"prompt": prompt}, model=NAME),
    )
    return submission.job


async def _one(world):
    (delivery,) = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    return delivery


def _count(metric: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def _worker(world, gateway, **options):
    return world.worker(catalog=ModelCatalog.serving_own_names([gateway]), **options)


async def test_a_refusal_whose_probe_passes_fails_that_job_and_pauses_nothing(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    refused = await _submit(world, catalog, prompt="what the gateway refuses")
    accepted_probes = _count("ferryman_provider_probes_total", provider=NAME, result="accepted")

    worker = _worker(world, gateway)
    assert await worker.handle(await _one(world)) is Verdict.FAILED

    job = await world.job(refused.job_id)
    assert (job.error.code, job.error.failure_class) == ("unauthorized", FailureClass.UNAUTHORIZED)
    assert "refused this request itself" in job.error.message
    assert await world.control.provider_pauses() == {}
    assert gateway.probes == 1
    assert (
        _count("ferryman_provider_probes_total", provider=NAME, result="accepted")
        == accepted_probes + 1
    )
    # Another tenant's job for the same provider runs as usual.
    gateway.refuse_calls = None
    other = await _submit(world, catalog, tenant="t2")
    assert await worker.handle(await _one(world)) is Verdict.SUCCEEDED
    assert (await world.job(other.job_id)).status is JobStatus.SUCCEEDED


async def test_a_burst_of_refusals_costs_one_probe(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    jobs = [await _submit(world, catalog, tenant=f"t{i}") for i in range(10)]
    gateway.expected_refusals = 10
    gateway.probe_gate = asyncio.Event()
    worker = _worker(world, gateway, concurrency=16)

    async def open_the_gate_once_all_were_refused():
        await gateway.refused.wait()
        gateway.probe_gate.set()

    opener = asyncio.create_task(open_the_gate_once_all_were_refused())
    deliveries = await world.queue.receive(max_messages=10, visibility_timeout_seconds=60)
    verdicts = await asyncio.wait_for(
        asyncio.gather(*(worker.handle(d) for d in deliveries)), timeout=10
    )
    await opener

    assert verdicts == [Verdict.FAILED] * 10
    assert gateway.probes == 1  # ten refusals at once shared one probe
    # Refusals soon after reuse its verdict; once it is older than that, a new probe.
    await _submit(world, catalog)
    assert await worker.handle(await _one(world)) is Verdict.FAILED
    assert gateway.probes == 1
    world.clock.advance(11)
    await _submit(world, catalog)
    assert await worker.handle(await _one(world)) is Verdict.FAILED
    assert gateway.probes == 2
    assert {(await world.job(j.job_id)).status for j in jobs} == {JobStatus.FAILED}


async def test_a_refused_probe_pauses_the_provider_for_every_worker_and_the_job_waits(
    make_world, gateway
):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    first = await _submit(world, catalog)
    second = await _submit(world, catalog, tenant="t2")
    gateway.probe = ProviderUnauthorizedError("the models endpoint answered HTTP 401")
    pauses = _count("ferryman_provider_auto_pauses_total", provider=NAME)
    one, two = _worker(world, gateway), _worker(world, gateway)
    started = world.clock.now()

    configure_logging("info")
    try:
        with capture_logs() as logs:
            assert await one.handle(await _one(world)) is Verdict.DEFERRED  # given back
            assert await two.handle(await _one(world)) is Verdict.DEFERRED  # not sent
    finally:
        reset_logging()

    assert gateway.calls == 1
    pause = (await world.control.provider_pauses())[NAME]
    assert (pause.automatic, pause.actor, pause.since) == (True, "worker:w1", started)
    assert (pause.next_probe_at, pause.probe_interval_seconds) == (started + 30, 30)
    assert "refused" in pause.reason
    waiting = await world.job(first.job_id)
    # Back in the queue like the provider's other jobs (a sweeper never takes a queued,
    # dispatched job for a stalled one), its budgets untouched, the refusal its error.
    assert (waiting.status, waiting.failure_count, waiting.attempt_id) == (
        JobStatus.QUEUED,
        0,
        None,
    )
    assert "waits in the queue for it" in waiting.error.message
    (attempt,) = await world.store.attempts(first.job_id)
    assert (attempt.outcome, attempt.failure_class) == (
        AttemptOutcome.RETRY,
        FailureClass.UNAUTHORIZED,
    )
    released = (await world.store.events(first.job_id))[-1]
    assert (released.kind, released.detail["reason"]) == (EventKind.RELEASED, "provider_paused")
    # Both messages were put back for later (new ones: the deliveries are not counted).
    assert (await world.queue.stats()).visible == 0
    world.clock.advance(PAUSED_PROVIDER_RECHECK_SECONDS)
    deliveries = await world.queue.receive(max_messages=10, visibility_timeout_seconds=60)
    assert [d.receive_count for d in deliveries] == [1, 1]
    assert (await world.job(second.job_id)).status is JobStatus.QUEUED
    assert _count("ferryman_provider_auto_pauses_total", provider=NAME) == pauses + 1
    (paused,) = [line for line in logs if line["event"] == "provider.paused"]
    assert (paused["provider"], paused["automatic"], paused["log_level"]) == (NAME, True, "error")
    (probed,) = [line for line in logs if line["event"] == "provider.probed"]
    assert (probed["result"], probed["error_code"]) == ("refused", "unauthorized")


async def test_a_paused_provider_is_probed_on_a_backoff_and_resumes_by_itself(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    job = await _submit(world, catalog)
    gateway.probe = ProviderUnauthorizedError("401")
    worker = _worker(world, gateway)
    assert await worker.handle(await _one(world)) is Verdict.DEFERRED
    probes = worker._handler.probes
    paused_at = world.clock.now()
    resumes = _count("ferryman_provider_auto_resumes_total", provider=NAME)

    world.clock.advance(29)
    assert await probes.probe_due() == []  # not due yet
    world.clock.advance(1)
    assert await probes.probe_due() == [(NAME, KeyCheck.REFUSED)]  # still refused
    pause = (await world.control.provider_pauses())[NAME]
    assert (pause.next_probe_at, pause.probe_interval_seconds) == (paused_at + 90, 60)
    world.clock.advance(59)
    assert await probes.probe_due() == []
    gateway.probe = None  # the key was fixed
    gateway.refuse_calls = None
    world.clock.advance(1)
    configure_logging("info")
    try:
        with capture_logs() as logs:
            assert await probes.probe_due() == [(NAME, KeyCheck.ACCEPTED)]
    finally:
        reset_logging()

    assert await world.control.provider_pauses() == {}
    resumed = (await world.control.audit_log(limit=1))[0]
    assert (resumed.action, resumed.target, resumed.actor) == (
        AuditAction.RESUME,
        f"provider:{NAME}",
        "worker:w1",
    )
    assert _count("ferryman_provider_auto_resumes_total", provider=NAME) == resumes + 1
    (line,) = [line for line in logs if line["event"] == "provider.resumed"]
    assert line["paused_for_seconds"] == 90
    # The job that found the provider refusing runs once it is resumed, budget intact.
    assert await worker.handle(await _one(world)) is Verdict.SUCCEEDED
    done = await world.job(job.job_id)
    assert (done.status, done.failure_count) == (JobStatus.SUCCEEDED, 0)


async def test_each_probe_is_taken_by_one_process(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    await _submit(world, catalog)
    gateway.probe = ProviderUnauthorizedError("401")
    one, two = _worker(world, gateway), _worker(world, gateway)
    assert await one.handle(await _one(world)) is Verdict.DEFERRED
    assert gateway.probes == 1

    world.clock.advance(30)
    both = await asyncio.gather(one._handler.probes.probe_due(), two._handler.probes.probe_due())

    assert sorted(len(done) for done in both) == [0, 1]
    assert gateway.probes == 2


def test_probes_wait_30_seconds_doubling_to_10_minutes():
    schedule = ProbeSchedule()
    waits = [schedule.after(None)]
    for _ in range(6):
        waits.append(schedule.after(waits[-1]))
    assert waits == [30, 60, 120, 240, 480, 600, 600]
    with pytest.raises(ValueError, match="maximum"):
        ProbeSchedule(initial_seconds=60, maximum_seconds=30)
    with pytest.raises(ValueError, match="positive"):
        ProbeSchedule(initial_seconds=0)


async def test_an_operators_pause_is_never_probed_nor_lifted(make_world, gateway):
    world = make_world()
    worker = _worker(world, gateway)
    await world.control.set_provider_paused(NAME, True, actor="ops", now=world.clock.now())
    world.clock.advance(86_400)

    assert await worker._handler.probes.probe_due() == []
    assert gateway.probes == 0
    assert not (await world.control.provider_pauses())[NAME].automatic


async def test_an_operator_pausing_an_automatic_pause_makes_it_the_operators(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    await _submit(world, catalog)
    gateway.probe = ProviderUnauthorizedError("401")
    worker = _worker(world, gateway)
    assert await worker.handle(await _one(world)) is Verdict.DEFERRED
    await world.control.set_provider_paused(NAME, True, actor="ops", now=world.clock.now())
    gateway.probe = None
    world.clock.advance(3600)

    assert await worker._handler.probes.probe_due() == []
    assert NAME in await world.control.paused_providers()


async def test_an_account_refusal_pauses_at_once_and_waits_for_an_operator(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    job = await _submit(world, catalog)
    gateway.refuse_calls = AccountRefusedError("openai answered HTTP 429 (insufficient_quota)")
    worker = _worker(world, gateway)

    assert await worker.handle(await _one(world)) is Verdict.DEFERRED

    assert gateway.probes == 0  # the answer named the account: no probe can show it mended
    pause = (await world.control.provider_pauses())[NAME]
    assert pause.automatic and not pause.resumes_by_itself
    assert "account" in pause.reason
    waiting = await world.job(job.job_id)
    assert (waiting.status, waiting.failure_count, waiting.error.code) == (
        JobStatus.QUEUED,
        0,
        "account_refused",
    )
    world.clock.advance(86_400)
    assert await worker._handler.probes.probe_due() == []

    gateway.refuse_calls = None
    await world.control.set_provider_paused(NAME, False, actor="ops", now=world.clock.now())
    await asyncio.sleep(1.1)  # past the worker's one-second look at the pauses
    assert await worker.handle(await _one(world)) is Verdict.SUCCEEDED  # its message was due


async def test_a_probe_that_fails_otherwise_pauses_nothing_and_the_job_retries(make_world, gateway):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    job = await _submit(world, catalog)
    gateway.probe = ProviderServerError("the models endpoint answered HTTP 503")
    worker = _worker(world, gateway)

    assert await worker.handle(await _one(world)) is Verdict.RETRY_SCHEDULED

    retried = await world.job(job.job_id)
    assert retried.failure_count == 1  # a retry like a transient failure's: it counts
    assert "could not be checked" in retried.error.message
    assert await world.control.provider_pauses() == {}


async def test_a_running_worker_probes_and_resumes_a_due_provider(make_world, gateway, eventually):
    world = make_world()
    catalog = ModelCatalog.serving_own_names([gateway])
    await _submit(world, catalog)
    gateway.probe = ProviderUnauthorizedError("401")
    worker = _worker(world, gateway)
    assert await worker.handle(await _one(world)) is Verdict.DEFERRED
    gateway.probe = None
    gateway.refuse_calls = None
    world.clock.advance(30)

    stop = asyncio.Event()
    running = asyncio.create_task(worker.run(stop))

    async def resumed() -> bool:
        return await world.control.provider_pauses() == {}

    try:
        await eventually(resumed)
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)
    assert gateway.probes == 2


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"provider_probe_initial_seconds": 700}, "is above provider_probe_max_seconds (600)"),
        ({"provider_probe_initial_seconds": 0}, "FERRYMAN_PROVIDER_PROBE_INITIAL_SECONDS"),
        ({"provider_probe_max_seconds": -1}, "FERRYMAN_PROVIDER_PROBE_MAX_SECONDS"),
    ],
)
def test_probe_settings_out_of_order_or_range_are_refused(overrides, named):
    from ferryman.config import ConfigurationError, load_settings

    with pytest.raises(ConfigurationError, match=re.escape(named)):
        load_settings(**overrides)
