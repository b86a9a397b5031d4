"""A task: what a job asks a model to do, and how its input and output are checked.

A task is an input side (what a client may send), a way to turn that input into a
prompt, and an output side (what the model must answer, as JSON). Every task asks
for JSON matching its output schema, so validating an answer is the same step for
every task and every provider.

The two sides are codecs, so one TaskDefinition serves every way of writing a task:
pydantic models (``tasks/models.py``: the built-ins and ``@task`` modules), JSON
Schemas (``tasks/schemas.py``: tasks declared in TOML), and a schema given per job
(``tasks/extract.py``).

Inputs and outputs are customer data: no error raised here quotes them, and none
is chained (``from None``) where a traceback would print them.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from ferryman.core.errors import InvalidOutputError
from ferryman.ports.provider import ModelRequest
from ferryman.tasks.simulate import SimulateOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from ferryman.core.retry import RetryPolicy

# Every task that names no model of its own runs on the simulated one.
DEFAULT_MODEL = "sim"
# How many schema violations an InvalidOutputError lists; the rest are counted.
MAX_REPORTED_ERRORS = 5
# Task names appear in URLs, metrics and OpenAPI component names: keep them plain.
_TASK_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,127}")
# Provider ranges differ (Anthropic 0-1, OpenAI 0-2); this refuses only nonsense.
MAX_TEMPERATURE = 2.0


class TaskDefinitionError(ValueError):
    """A task cannot be defined as written: a startup error that names the task."""


class TaskInput(BaseModel):
    """Base of every task's input model: strict, closed, and able to carry ``simulate``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    simulate: SimulateOptions | None = None


class TaskOutput(BaseModel):
    """Base of every task's output model; unknown fields break the schema."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PromptParts(NamedTuple):
    """What a task's render function returns: the prompt and, optionally, a system
    prompt and a max_tokens for this job (None: the task's default)."""

    system: str | None
    prompt: str
    max_tokens: int | None = None


InputT = TypeVar("InputT")
InputT_co = TypeVar("InputT_co", covariant=True)


class OutputViolationError(Exception):
    """An answer broke the output schema; ``violations`` say where, never what."""

    def __init__(self, violations: list[str]) -> None:
        super().__init__("; ".join(violations))
        self.violations = violations


class InputCodec(Protocol[InputT_co]):
    """How a task's input is described, validated at intake and read back by a worker."""

    def json_schema(self) -> dict[str, Any]:
        """The input's JSON Schema, ``simulate`` included (a new dict each call)."""
        ...

    def unbounded_text(self) -> list[str]:
        """The fields (dotted paths) that take free text with no length limit."""
        ...

    def validate(self, raw: object, *, task: str) -> dict[str, Any]:
        """The input normalised to JSON-able form, so equal requests hash equally.
        Raises InvalidRequestError whose errors have ``loc`` ["body", "input", ...]."""
        ...

    def load(self, stored: dict[str, Any], *, task: str) -> InputT_co:
        """A stored (already validated) input as the render function takes it.
        Raises InvalidRequestError if it no longer fits."""
        ...


class OutputCodec(Protocol):
    """How a task's answer is described and checked."""

    def json_schema(self) -> dict[str, Any]:
        """The output's JSON Schema as GET /v1/tasks shows it (a new dict each call)."""
        ...

    def asked_schema(self, job_input: dict[str, Any]) -> dict[str, Any]:
        """The schema the model is asked to follow for this job (read, never changed)."""
        ...

    def check(self, data: Any, *, asked: dict[str, Any] | None) -> dict[str, Any]:
        """The answer, validated; OutputViolationError otherwise. ``asked`` is the
        schema the request carried (None when the caller does not have it)."""
        ...


class TaskDefinition(Generic[InputT]):
    """One task: its name, its two codecs, its prompt builder and its defaults.

    The defaults are what a job of this task runs with unless the deployment decides:
    ``default_model`` is the alias used when a job names none; ``max_attempts``,
    ``max_invalid_output_attempts``, ``max_tokens`` and ``temperature`` are None when
    the deployment's setting (or the provider's default) applies.
    """

    __slots__ = (
        "_inputs",
        "_outputs",
        "_render",
        "default_model",
        "description",
        "max_attempts",
        "max_invalid_output_attempts",
        "max_tokens",
        "name",
        "origin",
        "temperature",
    )

    def __init__(
        self,
        *,
        name: str,
        inputs: InputCodec[InputT],
        outputs: OutputCodec,
        render: Callable[[InputT], PromptParts],
        default_model: str = DEFAULT_MODEL,
        description: str | None = None,
        origin: str = "built in",
        max_attempts: int | None = None,
        max_invalid_output_attempts: int | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
    ) -> None:
        where = f"task {name!r} ({origin})"
        if not isinstance(name, str) or not _TASK_NAME.fullmatch(name):
            raise TaskDefinitionError(
                f"{where}: a task name is 1-128 letters, digits, '_', '.' or '-', "
                "starting with a letter"
            )
        _check_defaults(
            where,
            default_model=default_model,
            max_attempts=max_attempts,
            max_invalid_output_attempts=max_invalid_output_attempts,
            max_tokens=max_tokens,
            temperature=temperature,
        )
        unbounded = inputs.unbounded_text()
        if unbounded:
            # Every free-text field a client can send has a documented length limit.
            raise TaskDefinitionError(
                f"{where}: give these input fields a maximum length "
                f"(max_length / maxLength): {', '.join(unbounded)}"
            )
        self.name = name
        self.description = description
        self.origin = origin
        self.default_model = default_model
        self.max_attempts = max_attempts
        self.max_invalid_output_attempts = max_invalid_output_attempts
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._inputs = inputs
        self._outputs = outputs
        self._render = render

    def __repr__(self) -> str:
        return f"TaskDefinition(name={self.name!r}, default_model={self.default_model!r})"

    @property
    def input_schema(self) -> dict[str, Any]:
        """The JSON Schema a job's ``input`` must follow (a copy, safe to change)."""
        return self._inputs.json_schema()

    def published_input_schema(self, *, simulate: bool) -> dict[str, Any]:
        """``input_schema`` as a deployment tells its clients: without the sim's
        ``simulate`` block where scripts are refused (``FERRYMAN_SIM_SCRIPTS`` off), so
        no input the document describes is refused."""
        schema = self.input_schema
        if not simulate:
            schema.get("properties", {}).pop("simulate", None)
        return schema

    @property
    def output_schema(self) -> dict[str, Any]:
        """The JSON Schema a model's answer must follow (a copy, safe to change)."""
        return self._outputs.json_schema()

    def retry_policy(self, deployment: RetryPolicy) -> RetryPolicy:
        """The deployment's retry policy with this task's budgets where it sets them."""
        changes: dict[str, int] = {}
        if self.max_attempts is not None:
            changes["max_attempts"] = self.max_attempts
        if self.max_invalid_output_attempts is not None:
            changes["max_invalid_output_attempts"] = self.max_invalid_output_attempts
        return dataclasses.replace(deployment, **changes) if changes else deployment

    def validate_input(self, raw: object) -> dict[str, Any]:
        """The input, validated and normalised to JSON-able form (absent optionals
        dropped), so equal requests hash equally. Raises InvalidRequestError with
        field errors."""
        return self._inputs.validate(raw, task=self.name)

    def build_request(
        self, job_input: dict[str, Any], *, model: str, attempt_no: int, job_id: str
    ) -> ModelRequest:
        """The model call for a stored (already validated) input.

        Raises InvalidRequestError if the stored input no longer fits the input model.
        """
        parts = self._render(self._inputs.load(job_input, task=self.name))
        extras: dict[str, Any] = {}
        simulate = job_input.get("simulate")
        if simulate is not None:
            # Already validated by load(); normalised again so the sim reads every field.
            options = SimulateOptions.model_validate(simulate)
            extras["simulate"] = options.model_dump(mode="json", exclude_none=True)
        return ModelRequest(
            model=model,
            task=self.name,
            prompt=parts.prompt,
            system=parts.system,
            max_tokens=parts.max_tokens if parts.max_tokens is not None else self.max_tokens,
            temperature=self.temperature,
            output_schema=self._outputs.asked_schema(job_input),
            attempt_no=attempt_no,
            job_id=job_id,
            extras=extras,
        )

    def parse_output(self, text: str, *, request: ModelRequest | None = None) -> dict[str, Any]:
        """The model's answer as a validated dict; InvalidOutputError if it is not JSON
        or breaks the output schema. The message names fields, never the text.

        ``request`` is the call that produced the answer: a task whose output schema
        is given per job (``extract``) checks the answer against the schema that
        request asked for, and can only check that it is a JSON object without it.
        """
        try:
            data = json.loads(text, parse_constant=_reject_constant)
        except json.JSONDecodeError as exc:
            raise InvalidOutputError(
                f"the model output is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            ) from None
        except (ValueError, RecursionError):
            raise InvalidOutputError(
                "the model output is not usable JSON (NaN/Infinity or nested too deeply)"
            ) from None
        asked = request.output_schema if request is not None else None
        try:
            return self._outputs.check(data, asked=asked)
        except OutputViolationError as exc:
            raise InvalidOutputError(
                f"the model output breaks the output schema of task {self.name!r}: "
                + describe_violations(exc.violations)
            ) from None


def describe_violations(violations: list[str]) -> str:
    """The first few violations, and how many more there are."""
    described = violations[:MAX_REPORTED_ERRORS]
    if len(violations) > MAX_REPORTED_ERRORS:
        described = [*described, f"and {len(violations) - MAX_REPORTED_ERRORS} more"]
    return "; ".join(described)


def _check_defaults(
    where: str,
    *,
    default_model: str,
    max_attempts: int | None,
    max_invalid_output_attempts: int | None,
    max_tokens: int | None,
    temperature: float | None,
) -> None:
    problems: list[str] = []
    if not isinstance(default_model, str) or not default_model:
        problems.append("the default model must be a model alias")
    for field, value in (
        ("max_attempts", max_attempts),
        ("max_invalid_output_attempts", max_invalid_output_attempts),
        ("max_tokens", max_tokens),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            problems.append(f"{field} must be a whole number")
        elif value is not None and value < 1:
            problems.append(f"{field} must be at least 1")
    if temperature is not None and (
        isinstance(temperature, bool)
        or not isinstance(temperature, int | float)
        or not 0 <= temperature <= MAX_TEMPERATURE
    ):
        problems.append(f"temperature must be a number from 0 to {MAX_TEMPERATURE:g}")
    if problems:
        raise TaskDefinitionError(f"{where}: " + "; ".join(problems))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")
