"""A provider answer without usage is unknown, end to end: null tokens and cost on the
attempt (never 0 tokens and $0 at a priced alias), a warning and a metric, a usage report
that counts the call apart, and a token budget that keeps the call's estimate."""

from __future__ import annotations

import boto3
import fake_anthropic
import fake_openai
import pytest
from botocore.stub import Stubber
from prometheus_client import REGISTRY
from sample_requests import VALID_TICKET, classify_request
from structlog.testing import capture_logs

from ferryman.core.job import AttemptOutcome, JobStatus
from ferryman.core.models import ModelAlias, Prices
from ferryman.observability.logging import configure_logging, reset_logging
from ferryman.ports.store import UsageGroup
from ferryman.providers.bedrock import BedrockProvider
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.limiter import CallBudget
from ferryman.services.verdicts import Verdict
from ferryman.tasks import builtin_tasks

ALIAS = "priced"
PRICES = Prices(input_per_mtok_usd=1.0, output_per_mtok_usd=4.0)
TOKENS_PER_MINUTE = 6.0  # a budget of 0.1 token a second: nothing refills during a test


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_openai_without_usage_reports_unknown_not_zero(
    openai_server, openai_provider, stream
):
    openai_server.then(fake_openai.answer(VALID_TICKET, usage=None))
    response = await openai_provider(stream=stream).invoke(classify_request(), timeout_seconds=5)
    assert (response.input_tokens, response.output_tokens) == (None, None)


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_anthropic_without_usage_reports_unknown_not_zero(
    anthropic_server, anthropic_provider, stream
):
    anthropic_server.then(fake_anthropic.message(VALID_TICKET, usage=None))
    provider = anthropic_provider(stream=stream)
    response = await provider.invoke(classify_request(), timeout_seconds=5)
    assert (response.input_tokens, response.output_tokens) == (None, None)


class _ConverseWithoutUsage:
    """A Bedrock runtime client whose answer carries no usage (Stubber would refuse the
    shape: the service model requires it, which is what a broken endpoint ignores)."""

    def converse(self, **arguments):
        tool = {"toolUseId": "t1", "name": "classify_ticket_answer", "input": {}}
        return {
            "output": {"message": {"role": "assistant", "content": [{"toolUse": tool}]}},
            "stopReason": "tool_use",
            "ResponseMetadata": {"RequestId": "bedrock-req"},
        }


async def test_bedrock_without_usage_reports_unknown_not_zero():
    control = boto3.client(
        "bedrock", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    Stubber(control).activate()
    provider = BedrockProvider(name="b", client=_ConverseWithoutUsage(), control_client=control)
    try:
        response = await provider.invoke(classify_request(), timeout_seconds=5)
    finally:
        await provider.aclose()
    assert (response.input_tokens, response.output_tokens) == (None, None)


def _unknown_count(provider: str) -> float:
    value = REGISTRY.get_sample_value(
        "ferryman_usage_unknown_total", {"provider": provider, "model": ALIAS}
    )
    return value or 0.0


async def _run_one(world, provider):
    """One classify_ticket job on a priced alias of ``provider`` (its answer scripted by
    the caller), run by a worker with a token budget."""
    catalog = ModelCatalog(
        aliases=[ModelAlias(name=ALIAS, provider=provider.name, model="m", prices=PRICES)],
        providers=[provider],
    )
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=3600,
        catalog=catalog,
        sim_scripts=False,
    )
    submitted = await intake.submit(
        tenant_id="t1",
        request=SubmitRequest("classify_ticket", {"ticket": "charged twice"}, model=ALIAS),
        idempotency_key=None,
    )
    worker = world.worker(
        catalog=catalog,
        providers=[provider],
        budgets={provider.name: CallBudget(tokens_per_minute=TOKENS_PER_MINUTE)},
    )
    (delivery,) = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    configure_logging("info")
    try:
        with capture_logs() as logs:
            assert await worker.handle(delivery) is Verdict.SUCCEEDED
    finally:
        reset_logging()
    (attempt,) = await world.store.attempts(submitted.job.job_id)
    limiter = worker._runner._limiters.get(provider.name, "m")
    return attempt, logs, limiter.token_balance


async def test_an_answer_without_usage_is_recorded_unknown_warned_and_counted(
    make_world, openai_server, openai_provider
):
    world = make_world()
    provider = openai_provider()
    openai_server.then(fake_openai.answer(VALID_TICKET, usage=None))
    before = _unknown_count(provider.name)

    attempt, logs, balance = await _run_one(world, provider)

    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert (attempt.input_tokens, attempt.output_tokens, attempt.cost_nano_usd) == (
        None,
        None,
        None,
    )
    assert attempt.finish_reason == "stop"
    assert _unknown_count(provider.name) == before + 1
    (warning,) = [line for line in logs if line["event"] == "provider.usage_unknown"]
    assert warning["log_level"] == "warning"
    assert (warning["provider"], warning["model"]) == (provider.name, ALIAS)
    assert warning["missing"] == "input_tokens,output_tokens"
    assert "charged twice" not in repr(warning)  # never the prompt
    world.clock.advance(1)
    (row,) = await world.store.usage_report(
        tenant_id="t1", start=0, end=world.clock.now(), group_by=UsageGroup.MODEL
    )
    assert (row.calls, row.unknown_usage_calls, row.input_tokens, row.cost_nano_usd) == (
        1,
        1,
        0,
        0,
    )
    # The token budget keeps the call's estimate spent (hundreds of tokens), as it
    # would not if the call were taken to have used nothing.
    assert balance is not None and balance < -100


async def test_an_answer_with_usage_is_priced_and_refunds_the_estimate(
    make_world, openai_server, openai_provider
):
    world = make_world()
    provider = openai_provider()
    openai_server.then(fake_openai.answer(VALID_TICKET, usage=(3, 2)))
    before = _unknown_count(provider.name)

    attempt, logs, balance = await _run_one(world, provider)

    assert (attempt.input_tokens, attempt.output_tokens) == (3, 2)
    assert attempt.cost_nano_usd == PRICES.cost_nano_usd(3, 2) > 0
    assert _unknown_count(provider.name) == before
    assert not [line for line in logs if line["event"] == "provider.usage_unknown"]
    assert balance is not None and balance > -10  # 5 used, the estimate given back


async def test_the_warning_is_written_once_a_minute_and_counted_every_time(
    make_world, openai_server, openai_provider
):
    world = make_world()
    provider = openai_provider()
    before = _unknown_count(provider.name)
    catalog = ModelCatalog(
        aliases=[ModelAlias(name=ALIAS, provider=provider.name, model="m", prices=PRICES)],
        providers=[provider],
    )
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=3600,
        catalog=catalog,
        sim_scripts=False,
    )
    for _ in range(3):
        openai_server.then(fake_openai.answer(VALID_TICKET, usage=None))
        await intake.submit(
            tenant_id="t1",
            request=SubmitRequest("classify_ticket", {"ticket": "x"}, model=ALIAS),
            idempotency_key=None,
        )
    worker = world.worker(catalog=catalog, providers=[provider])
    configure_logging("info")
    try:
        with capture_logs() as logs:
            assert await worker.run_until_idle() == 3
    finally:
        reset_logging()
    assert _unknown_count(provider.name) == before + 3
    warnings = [line for line in logs if line["event"] == "provider.usage_unknown"]
    assert len(warnings) == 1
    jobs = await world.store.list_jobs(tenant_id="t1")
    assert {job.status for job in jobs.jobs} == {JobStatus.SUCCEEDED}
