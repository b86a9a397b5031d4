"""Model aliases at work: fallbacks, a provider paused on 401, and what each call cost."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.core.errors import (
    ContextLengthExceededError,
    FailureClass,
    ProviderUnauthorizedError,
    ThrottledError,
)
from ferryman.core.job import AttemptOutcome, EventKind, JobStatus
from ferryman.core.models import ModelAlias, Prices
from ferryman.core.retry import RetryPolicy
from ferryman.ports.provider import FinishReason, ModelResponse
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.verdicts import Verdict
from ferryman.tasks import builtin_tasks


class ScriptedProvider:
    """A provider answering from a list: an exception to raise, or a response."""

    def __init__(self, name, *answers, check_error=None):
        self._name = name
        self.answers = list(answers)
        self.calls = 0
        # What a probe of it (check) raises; None: it passes.
        self.check_error = check_error
        self.checks = 0

    @property
    def name(self):
        return self._name

    async def check(self):
        self.checks += 1
        if self.check_error is not None:
            raise self.check_error

    async def invoke(self, request, *, timeout_seconds):
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, Exception):
            raise answer
        return answer


def ok(text='{"text": "hello"}', **fields):
    return ModelResponse(
        text=text, input_tokens=1000, output_tokens=500, model="answering-model-2026", **fields
    )


PRICES = Prices(input_per_mtok_usd=1.0, output_per_mtok_usd=4.0)  # 0.001 + 0.002 = 0.003 USD


def _catalog(primary, *fallbacks):
    providers = [primary, *fallbacks]
    aliases = [
        ModelAlias(
            name="fast",
            provider=primary.name,
            model="fast-model",
            prices=PRICES,
            fallbacks=tuple(f"backup{i}" for i, _ in enumerate(fallbacks)),
        ),
        *(
            ModelAlias(name=f"backup{i}", provider=p.name, model="backup-model", prices=PRICES)
            for i, p in enumerate(fallbacks)
        ),
    ]
    return ModelCatalog(aliases=aliases, providers=providers)


async def _submit(world, catalog, prompt="hi"):
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
        tenant_id="t1",
        request=SubmitRequest(task="generate", input={"prompt": prompt}, model="fast"),
    )
    return submission.job


async def _drive(world, worker, rounds=20):
    for _ in range(rounds):
        for delivery in await world.queue.receive(max_messages=10, visibility_timeout_seconds=60):
            await worker.handle(delivery)
        world.clock.advance(1000)


async def test_a_call_records_its_model_cost_and_provider_id(make_world):
    world = make_world()
    primary = ScriptedProvider("openai", ok(provider_request_id="req-7"))
    catalog = _catalog(primary)
    job = await _submit(world, catalog)

    await _drive(world, world.worker(catalog=catalog))

    [attempt] = await world.store.attempts(job.job_id)
    assert (attempt.model, attempt.provider, attempt.provider_model) == (
        "fast",
        "openai",
        "answering-model-2026",
    )
    assert (attempt.cost_nano_usd, attempt.provider_request_id) == (3_000_000, "req-7")
    assert attempt.finish_reason == "complete"
    assert (attempt.tenant_id, attempt.task) == ("t1", "generate")


async def test_a_truncated_structured_answer_is_invalid_output_and_kept_for_debugging(make_world):
    world = make_world(retry=RetryPolicy(max_invalid_output_attempts=1))
    cut = ok(text='{"text": "an answer that was cu', finish_reason=FinishReason.LENGTH)
    catalog = _catalog(ScriptedProvider("openai", cut))
    job = await _submit(world, catalog)

    await _drive(world, world.worker(catalog=catalog))

    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.FAILED
    assert stored.error.failure_class is FailureClass.INVALID_OUTPUT
    [attempt] = await world.store.attempts(job.job_id)
    assert attempt.raw_output == '{"text": "an answer that was cu'
    assert attempt.cost_nano_usd == 3_000_000  # a truncated answer is still billed


async def test_a_model_that_stays_throttled_hands_the_job_to_its_fallback(make_world):
    world = make_world(retry=RetryPolicy(max_attempts=2, initial_interval_seconds=0))
    busy = ScriptedProvider("openai", ThrottledError("slow down", retry_after_seconds=1))
    backup = ScriptedProvider("anthropic", ok())
    catalog = _catalog(busy, backup)
    job = await _submit(world, catalog)

    await _drive(world, world.worker(catalog=catalog))

    stored = await world.job(job.job_id)
    assert stored.status is JobStatus.SUCCEEDED
    assert (busy.calls, backup.calls, stored.fallback_level) == (2, 1, 1)
    attempts = await world.store.attempts(job.job_id)
    assert [(a.model, a.outcome) for a in attempts] == [
        ("fast", AttemptOutcome.RETRY),
        ("fast", AttemptOutcome.RETRY),
        ("backup0", AttemptOutcome.SUCCEEDED),
    ]
    moved = [e for e in await world.store.events(job.job_id) if "fallback_model" in e.detail]
    assert [e.detail["fallback_model"] for e in moved] == ["backup0"]


async def test_an_input_too_long_for_its_model_moves_to_the_fallback_at_once(make_world):
    world = make_world()
    short = ScriptedProvider("openai", ContextLengthExceededError("context_length_exceeded"))
    long_context = ScriptedProvider("anthropic", ok())
    catalog = _catalog(short, long_context)
    job = await _submit(world, catalog)

    await _drive(world, world.worker(catalog=catalog))

    assert (await world.job(job.job_id)).status is JobStatus.SUCCEEDED
    assert (short.calls, long_context.calls) == (1, 1)


async def test_without_a_fallback_the_budgets_decide_as_before(make_world):
    world = make_world(retry=RetryPolicy(max_attempts=2, initial_interval_seconds=0))
    catalog = _catalog(ScriptedProvider("openai", ContextLengthExceededError()))
    job = await _submit(world, catalog)

    await _drive(world, world.worker(catalog=catalog))

    stored = await world.job(job.job_id)
    assert (stored.status, stored.error.code) == (JobStatus.FAILED, "context_length_exceeded")


async def test_a_provider_that_refuses_our_key_is_paused_instead_of_failing_every_job(
    make_world,
):
    world = make_world()
    refusing = ScriptedProvider(
        "openai",
        ProviderUnauthorizedError("invalid api key"),
        ok(),
        check_error=ProviderUnauthorizedError("invalid api key"),
    )
    catalog = _catalog(refusing)
    first = await _submit(world, catalog, "first")
    others = [await _submit(world, catalog, f"other {i}") for i in range(5)]
    worker = world.worker(catalog=catalog)

    [delivery] = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    # Its probe was refused too: the provider is unauthorised, and the job waits for it.
    assert await worker.handle(delivery) is Verdict.DEFERRED
    for delivery in await world.queue.receive(max_messages=10, visibility_timeout_seconds=60):
        assert await worker.handle(delivery) is Verdict.DEFERRED

    assert (refusing.calls, refusing.checks) == (1, 1)  # no other job was sent to be refused
    waiting = await world.job(first.job_id)
    assert (waiting.status, waiting.failure_count) == (JobStatus.QUEUED, 0)
    assert waiting.error.failure_class is FailureClass.UNAUTHORIZED
    assert await world.control.paused_providers() == {"openai"}
    [record] = await world.control.audit_log(limit=10)
    assert (record.target, record.actor) == ("provider:openai", "worker:w1")
    assert "refused" in (record.reason or "")
    # Waiting for the provider costs the waiting jobs nothing: their messages start anew.
    assert {(await world.job(j.job_id)).status for j in others} == {JobStatus.QUEUED}

    await world.control.set_provider_paused("openai", False, actor="ops", now=world.clock.now())
    world.clock.advance(31)
    await asyncio.sleep(1.1)  # past the worker's one-second look at the pauses
    await _drive(world, worker, rounds=3)
    everyone = [first, *others]
    assert {(await world.job(j.job_id)).status for j in everyone} == {JobStatus.SUCCEEDED}
    kinds = [e.kind for j in everyone for e in await world.store.events(j.job_id)]
    assert EventKind.DEAD_LETTERED not in kinds


def test_a_route_at_each_fallback_level_is_its_chains_model_and_its_provider():
    from ferryman.core.errors import ProviderBadRequestError as Unknown
    from ferryman.providers.simulated import SimulatedProvider

    sim, other = SimulatedProvider(), SimulatedProvider(name="other")
    catalog = ModelCatalog(
        aliases=[
            ModelAlias(name="big", provider="sim", model="m1", fallbacks=("small",)),
            ModelAlias(name="small", provider="other", model="m2"),
        ],
        providers=[sim, other],
    )
    routes = [catalog.route_at("big", level) for level in (-1, 0, 1, 2, 9)]
    assert [(r.alias.name, r.alias.model, r.provider) for r in routes] == [
        ("big", "m1", sim),
        ("big", "m1", sim),
        ("small", "m2", other),
        ("small", "m2", other),
        ("small", "m2", other),
    ]
    assert catalog.route_at("small", 0) == catalog.route("small")
    for level in (0, 1):
        with pytest.raises(Unknown):
            catalog.route_at("gone", level)
