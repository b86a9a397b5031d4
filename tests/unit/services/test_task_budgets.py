"""A task's own retry budgets and defaults reach the worker (issue 6, your own tasks)."""

from __future__ import annotations

from pydantic import Field

from ferryman.core.job import AttemptOutcome, JobStatus
from ferryman.core.retry import RetryPolicy
from ferryman.services.intake import Intake, SubmitRequest
from ferryman.tasks import PromptParts, TaskInput, TaskOutput, builtin_tasks
from ferryman.tasks.modules import task


class Question(TaskInput):
    question: str = Field(max_length=200)


class Answer(TaskOutput):
    text: str = Field(max_length=500)


@task(output=Answer, max_attempts=1, temperature=0.2, max_tokens=64)
def careful(given: Question) -> PromptParts:
    return PromptParts(system=None, prompt=given.question, max_tokens=None)


async def test_a_task_with_one_attempt_fails_after_its_first_retryable_failure(make_world):
    world = make_world(retry=RetryPolicy(max_attempts=5, initial_interval_seconds=0))
    tasks = builtin_tasks()
    tasks.register(careful)
    intake = Intake(
        store=world.store,
        ledger=world.store,
        queue=world.queue,
        tasks=tasks,
        control=world.control,
        clock=world.clock,
        idempotency_retention_seconds=60,
        # Tests script the sim model (input.simulate); deployments default to off.
        sim_scripts=True,
    )
    submission = await intake.submit(
        tenant_id="t1",
        request=SubmitRequest(
            task="careful",
            input={"question": "why?", "simulate": {"script": ["server_error", "ok"]}},
        ),
    )
    worker = world.worker(tasks=tasks)

    await worker.run_until_idle()
    world.clock.advance(100)
    await worker.run_until_idle()

    job = await world.job(submission.job.job_id)
    assert (job.status, job.error.code) == (JobStatus.FAILED, "attempts_exhausted")
    assert [a.outcome for a in await world.store.attempts(job.job_id)] == [AttemptOutcome.FAILED]


def test_a_tasks_temperature_and_answer_cap_go_with_its_calls():
    request = careful.build_request({"question": "why?"}, model="sim", attempt_no=1, job_id="j")
    assert (request.temperature, request.max_tokens) == (0.2, 64)
