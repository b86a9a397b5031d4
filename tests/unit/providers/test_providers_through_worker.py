"""Every failure class of every provider, through the worker: each ends as the retry
rules say (docs/architecture.md, Failure classes), not just as the adapter raises it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
import fake_anthropic
import fake_openai
import pytest
from botocore.stub import Stubber
from sample_requests import VALID_TICKET

from ferryman.core.errors import FailureClass
from ferryman.core.job import AttemptOutcome, JobStatus
from ferryman.providers.bedrock import BedrockProvider
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.services.verdicts import Verdict
from ferryman.tasks import builtin_tasks

TICKET = json.loads(VALID_TICKET)
TOOL = "classify_ticket_answer"


@dataclass
class Rig:
    """One provider, and how to make its API answer each way."""

    provider: Any
    script: dict[str, Any]
    server: Any = None  # the fake HTTP API, or
    stub: Stubber | None = None  # the Stubber behind a boto3 client
    # How to make a probe of the provider (its check) pass or be refused.
    probe: dict[str, Any] | None = None

    def answer(self, scenario: str, *, probe: str = "accepted") -> None:
        reply = self.script[scenario]
        if self.stub is None:
            self.server.then(reply)
        else:
            reply(self.stub)
        if self.probe is not None:
            self.probe[probe]()


def _openai(openai_server, openai_provider) -> Rig:
    script = {
        "ok": fake_openai.answer(VALID_TICKET),
        "throttled": fake_openai.error(
            429, "requests", "rate_limit_exceeded", headers={"retry-after": "7"}
        ),
        "transient": fake_openai.error(503, "server_error"),
        "bad_request": fake_openai.error(400, "invalid_request_error", "context_length_exceeded"),
        "unauthorized": fake_openai.error(401, "invalid_request_error", "invalid_api_key"),
        "safety": fake_openai.answer(None, refusal="no"),
        "truncated": fake_openai.answer('{"category": "bil', finish="length"),
    }

    def models(reply):
        def set_reply() -> None:
            openai_server.models_reply = reply

        return set_reply

    probe = {
        "accepted": models(None),
        "refused": models(fake_openai.error(401, "invalid_request_error", "invalid_api_key")),
    }
    return Rig(provider=openai_provider(), script=script, server=openai_server, probe=probe)


def _anthropic(anthropic_server, anthropic_provider) -> Rig:
    script = {
        "ok": fake_anthropic.message(VALID_TICKET),
        "throttled": fake_anthropic.error(429, "rate_limit_error", headers={"retry-after": "7"}),
        # (529, Anthropic's overload, is THROTTLED; its plain server error is a 500.)
        "transient": fake_anthropic.error(500, "api_error"),
        "bad_request": fake_anthropic.error(400, "invalid_request_error"),
        "unauthorized": fake_anthropic.error(401, "authentication_error"),
        "safety": fake_anthropic.message(None, stop_reason="refusal"),
        "truncated": fake_anthropic.message('{"category": "bil', stop_reason="max_tokens"),
    }
    probe = {
        "accepted": lambda: None,  # its models list, as the fake answers by default
        "refused": lambda: anthropic_server.then(fake_anthropic.error(401, "authentication_error")),
    }
    return Rig(provider=anthropic_provider(), script=script, server=anthropic_server, probe=probe)


def _client_error(code: str, status: int):
    def add(stub: Stubber) -> None:
        stub.add_client_error("converse", service_error_code=code, http_status_code=status)

    return add


def _converse(answer: Any, stop: str):
    def add(stub: Stubber) -> None:
        content = [{"toolUse": {"toolUseId": "t1", "name": TOOL, "input": answer}}]
        stub.add_response(
            "converse",
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": {"inputTokens": 25, "outputTokens": 11, "totalTokens": 36},
                "metrics": {"latencyMs": 1},
                "ResponseMetadata": {"RequestId": "bedrock-req", "HTTPStatusCode": 200},
            },
        )

    return add


def _bedrock() -> Rig:
    def client(service: str) -> Any:
        return boto3.client(
            service, region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
        )

    runtime, control = client("bedrock-runtime"), client("bedrock")
    stub, control_stub = Stubber(runtime), Stubber(control)
    stub.activate()
    control_stub.activate()
    script = {
        "ok": _converse(TICKET, "tool_use"),
        "throttled": _client_error("ThrottlingException", 429),
        "transient": _client_error("ServiceUnavailableException", 503),
        "bad_request": _client_error("ValidationException", 400),
        "unauthorized": _client_error("AccessDeniedException", 403),
        "safety": _converse({}, "content_filtered"),
        "truncated": _converse({"category": "billing"}, "max_tokens"),
    }
    provider = BedrockProvider(name="bedrock-fake", client=runtime, control_client=control)
    probe = {
        "accepted": lambda: control_stub.add_response(
            "list_foundation_models", {"modelSummaries": []}
        ),
        "refused": lambda: control_stub.add_client_error(
            "list_foundation_models",
            service_error_code="AccessDeniedException",
            http_status_code=403,
        ),
    }
    return Rig(provider=provider, script=script, stub=stub, probe=probe)


@pytest.fixture(params=["openai", "anthropic", "bedrock"])
async def rig(request, openai_server, openai_provider, anthropic_server, anthropic_provider):
    if request.param == "openai":
        yield _openai(openai_server, openai_provider)
    elif request.param == "anthropic":
        yield _anthropic(anthropic_server, anthropic_provider)
    else:
        built = _bedrock()
        yield built
        await built.provider.aclose()


async def _run_once(world, rig: Rig, scenario: str, *, probe: str = "accepted"):
    """Submit a classify_ticket job for the rig's model, answer it ``scenario``'s way
    (and a probe of the provider ``probe``'s way), and let a worker handle its one
    delivery."""
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=builtin_tasks(),
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=3600,
        catalog=ModelCatalog.serving_own_names([rig.provider]),
        sim_scripts=False,
    )
    submitted = await intake.submit(
        tenant_id="t1",
        request=SubmitRequest(
            "classify_ticket", {"ticket": "I was charged twice"}, model=rig.provider.name
        ),
        idempotency_key=None,
    )
    rig.answer(scenario, probe=probe)
    worker = world.worker(providers=[rig.provider])
    (delivery,) = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    verdict = await worker.handle(delivery)
    job = await world.job(submitted.job.job_id)
    attempts = await world.store.attempts(job.job_id)
    return verdict, job, attempts


async def test_a_good_answer_is_published_with_its_usage(make_world, rig):
    world = make_world()
    verdict, job, attempts = await _run_once(world, rig, "ok")
    assert verdict is Verdict.SUCCEEDED
    view = await world.jobs.get("t1", job.job_id)
    assert view.result == TICKET
    (attempt,) = attempts
    assert attempt.outcome is AttemptOutcome.SUCCEEDED
    assert attempt.input_tokens > 0 and attempt.output_tokens > 0
    assert attempt.provider_request_id


async def test_throttled_is_retried_after_the_providers_wait(make_world, rig):
    world = make_world()
    verdict, job, attempts = await _run_once(world, rig, "throttled")
    assert verdict is Verdict.RETRY_SCHEDULED
    assert job.error.failure_class is FailureClass.THROTTLED
    assert attempts[0].outcome is AttemptOutcome.RETRY
    if rig.stub is None:  # Bedrock's throttling names no wait; the HTTP APIs said 7 s
        assert job.not_before - world.clock.now() >= 7


async def test_transient_is_retried(make_world, rig):
    world = make_world()
    verdict, job, _ = await _run_once(world, rig, "transient")
    assert verdict is Verdict.RETRY_SCHEDULED
    assert job.error.failure_class is FailureClass.TRANSIENT


@pytest.mark.parametrize(
    ("scenario", "failure_class"),
    [
        ("bad_request", FailureClass.INVALID_REQUEST),
        ("unauthorized", FailureClass.UNAUTHORIZED),
        ("safety", FailureClass.SAFETY_REJECTED),
    ],
)
async def test_final_failures_fail_the_job_at_once(make_world, rig, scenario, failure_class):
    world = make_world()
    verdict, job, attempts = await _run_once(world, rig, scenario)
    assert verdict is Verdict.FAILED
    assert job.status is JobStatus.FAILED
    assert job.error.failure_class is failure_class
    assert [a.outcome for a in attempts] == [AttemptOutcome.FAILED]


async def test_a_truncated_structured_answer_is_invalid_output(make_world, rig):
    world = make_world()
    verdict, job, attempts = await _run_once(world, rig, "truncated")
    assert verdict is Verdict.RETRY_SCHEDULED  # INVALID_OUTPUT has a budget of its own
    assert job.error.failure_class is FailureClass.INVALID_OUTPUT
    assert attempts[0].failure_class is FailureClass.INVALID_OUTPUT


async def test_a_refusal_whose_probe_is_refused_pauses_the_provider_and_the_job_waits(
    make_world, rig
):
    world = make_world()
    verdict, job, attempts = await _run_once(world, rig, "unauthorized", probe="refused")
    assert verdict is Verdict.DEFERRED  # given back to the queue
    assert job.status is JobStatus.QUEUED
    assert job.failure_count == 0  # waiting for its provider spends no attempt
    assert job.error.failure_class is FailureClass.UNAUTHORIZED
    assert [a.outcome for a in attempts] == [AttemptOutcome.RETRY]
    pause = (await world.control.provider_pauses())[rig.provider.name]
    assert pause.automatic and pause.resumes_by_itself


async def test_a_refusal_whose_probe_passes_fails_the_job_alone(make_world, rig):
    world = make_world()
    verdict, job, _ = await _run_once(world, rig, "unauthorized", probe="accepted")
    assert verdict is Verdict.FAILED
    assert "refused this request itself" in job.error.message
    assert await world.control.provider_pauses() == {}
