"""TaskDefinition's defaults: what a job of the task runs with unless the deployment decides."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import Field

from ferryman.core.retry import RetryPolicy
from ferryman.tasks import PromptParts, TaskDefinition, TaskDefinitionError, TaskInput, TaskOutput
from ferryman.tasks.models import ModelInput, ModelOutput


class NoteIn(TaskInput):
    note: str = Field(max_length=100)
    max_tokens: int | None = None


class NoteOut(TaskOutput):
    tag: str


def render(given: NoteIn) -> PromptParts:
    return PromptParts(system=None, prompt=given.note, max_tokens=given.max_tokens)


def note_task(**overrides: Any) -> TaskDefinition[NoteIn]:
    options: dict[str, Any] = {
        "name": "note",
        "inputs": ModelInput(NoteIn),
        "outputs": ModelOutput(NoteOut),
        "render": render,
    }
    options.update(overrides)
    return TaskDefinition(**options)


def test_unset_defaults_mean_the_deployments_settings() -> None:
    task = note_task()
    assert task.default_model == "sim"
    assert (task.max_attempts, task.max_invalid_output_attempts) == (None, None)
    assert (task.max_tokens, task.temperature) == (None, None)
    deployment = RetryPolicy(max_attempts=5, max_invalid_output_attempts=2)
    assert task.retry_policy(deployment) is deployment
    request = task.build_request({"note": "hi"}, model="m", attempt_no=1, job_id="gen_1")
    assert request.max_tokens is None
    assert request.temperature is None


def test_a_tasks_retry_budgets_replace_the_deployments_and_keep_its_backoff() -> None:
    task = note_task(max_attempts=3, max_invalid_output_attempts=1)
    deployment = RetryPolicy(initial_interval_seconds=7.0, max_attempts=5)
    policy = task.retry_policy(deployment)
    assert (policy.max_attempts, policy.max_invalid_output_attempts) == (3, 1)
    assert policy.initial_interval_seconds == 7.0
    only_one = note_task(max_invalid_output_attempts=1).retry_policy(deployment)
    assert (only_one.max_attempts, only_one.max_invalid_output_attempts) == (5, 1)


def test_temperature_and_max_tokens_reach_the_model_request() -> None:
    task = note_task(temperature=0, max_tokens=400, default_model="fast")
    request = task.build_request({"note": "hi"}, model="gpt", attempt_no=2, job_id="gen_1")
    assert request.temperature == 0
    assert request.max_tokens == 400
    # A job's own max_tokens (from its render) wins over the task's default.
    request = task.build_request(
        {"note": "hi", "max_tokens": 9}, model="gpt", attempt_no=2, job_id="gen_1"
    )
    assert request.max_tokens == 9


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"name": ""}, "task name"),
        ({"name": "has space"}, "task name"),
        ({"name": "9lives"}, "task name"),
        ({"name": "x" * 129}, "task name"),
        ({"max_attempts": 0}, "max_attempts must be at least 1"),
        ({"max_invalid_output_attempts": 0}, "max_invalid_output_attempts"),
        ({"max_tokens": 0}, "max_tokens must be at least 1"),
        ({"max_tokens": 1.5}, "max_tokens must be a whole number"),
        ({"max_attempts": True}, "max_attempts must be a whole number"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": 2.5}, "temperature"),
        ({"default_model": ""}, "default model"),
    ],
)
def test_impossible_defaults_are_a_definition_error_naming_the_task(
    overrides: dict[str, Any], expected: str
) -> None:
    with pytest.raises(TaskDefinitionError, match=expected) as caught:
        note_task(**overrides)
    assert "task" in str(caught.value)


def test_names_may_hold_letters_digits_and_separators() -> None:
    assert note_task(name="triage.v2-beta_1").name == "triage.v2-beta_1"


def test_an_unbounded_input_string_is_refused_naming_the_field() -> None:
    class Loose(TaskInput):
        body: str
        nested: list[str] = Field(default_factory=list, max_length=3)

    with pytest.raises(TaskDefinitionError, match="body, nested") as caught:
        note_task(inputs=ModelInput(Loose))
    assert "'note'" in str(caught.value)


def test_codecs_refuse_models_that_are_not_task_models() -> None:
    with pytest.raises(TaskDefinitionError, match="TaskInput"):
        ModelInput(NoteOut)  # type: ignore[type-var]
    with pytest.raises(TaskDefinitionError, match="TaskOutput"):
        ModelOutput(NoteIn)  # type: ignore[arg-type]


def test_the_schemas_are_copies() -> None:
    task = note_task()
    task.input_schema["properties"].clear()
    task.output_schema["properties"].clear()
    assert "note" in task.input_schema["properties"]
    assert "tag" in task.output_schema["properties"]
    assert "simulate" in task.input_schema["properties"]
