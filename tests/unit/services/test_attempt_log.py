"""The ``attempt.ended`` line says which model and provider a call went to, how the attempt
ended and why it failed: an operator reading logs needs no other lookup. Never the
prompt, the output or an error's text."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from ferryman.observability.logging import configure_logging, reset_logging
from ferryman.services.verdicts import Verdict

PROMPT = "the prompt that must never be logged"


async def _ended_line(world, script: list[str]) -> tuple[Verdict, dict]:
    job = await world.submit(PROMPT, simulate={"script": script})
    (delivery,) = await world.queue.receive(max_messages=1, visibility_timeout_seconds=60)
    configure_logging("info")
    try:
        with capture_logs() as logs:
            verdict = await world.worker().handle(delivery)
    finally:
        reset_logging()
    (line,) = [line for line in logs if line["event"] == "attempt.ended"]
    assert line["job_id"] == job.job_id
    assert PROMPT not in repr(logs)
    return verdict, line


@pytest.mark.parametrize(
    ("script", "verdict", "outcome", "failure_class", "error_code"),
    [
        (["ok"], Verdict.SUCCEEDED, "succeeded", None, None),
        (["server_error"], Verdict.RETRY_SCHEDULED, "retry", "TRANSIENT", "server_error"),
        (["bad_request"], Verdict.FAILED, "failed", "INVALID_REQUEST", "bad_request"),
        (["refuse"], Verdict.FAILED, "failed", "SAFETY_REJECTED", "safety_rejected"),
    ],
)
async def test_the_line_names_model_provider_outcome_and_failure(
    make_world, script, verdict, outcome, failure_class, error_code
):
    got, line = await _ended_line(make_world(), script)
    assert got is verdict
    assert line["model"] == "sim"  # the alias the call ran under
    assert line["provider"] == "sim"
    assert "provider_model" in line  # the sim names none; HTTP providers do
    assert line["outcome"] == outcome
    assert line["failure_class"] == failure_class
    assert line["error_code"] == error_code
    assert line["verdict"] == str(verdict)
    assert isinstance(line["latency_ms"], int)
