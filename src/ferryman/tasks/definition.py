"""A task: what a job asks a model to do, and how its input and output are checked.

A task is an input model (what a client may send), a way to turn that input into
a prompt, and an output model (what the model must answer, as JSON). Every task
asks for JSON matching its output schema, so validating an answer is the same
step for every task and every provider.

Inputs and outputs are customer data: no error raised here quotes them. Pydantic
errors do quote the offending value, so they are translated to field locations
and templated messages, and never chained (``from None``) where a traceback
would print them.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Generic, NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from ferryman.core.errors import InvalidOutputError, InvalidRequestError
from ferryman.ports.provider import ModelRequest
from ferryman.tasks.simulate import SimulateOptions

if TYPE_CHECKING:
    from collections.abc import Callable

    from pydantic_core import ErrorDetails

# How many schema violations an InvalidOutputError lists; the rest are counted.
_MAX_REPORTED_ERRORS = 5


class TaskInput(BaseModel):
    """Base of every task's input model: strict, closed, and able to carry ``simulate``."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    simulate: SimulateOptions | None = None


class TaskOutput(BaseModel):
    """Base of every task's output model; unknown fields break the schema."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class PromptParts(NamedTuple):
    system: str | None
    prompt: str
    max_tokens: int | None


InputT = TypeVar("InputT", bound=TaskInput)


class TaskDefinition(Generic[InputT]):
    """One task: its name, input and output models, default model and prompt builder."""

    __slots__ = (
        "_output_schema",
        "_render",
        "default_model",
        "input_model",
        "name",
        "output_model",
    )

    def __init__(
        self,
        *,
        name: str,
        input_model: type[InputT],
        output_model: type[TaskOutput],
        default_model: str,
        render: Callable[[InputT], PromptParts],
    ) -> None:
        unbounded = unbounded_text_fields(input_model)
        if unbounded:
            # Every free-text field a client can send has a documented length limit.
            raise ValueError(
                f"task {name!r}: give these input fields a max_length: {', '.join(unbounded)}"
            )
        self.name = name
        self.input_model = input_model
        self.output_model = output_model
        self.default_model = default_model
        self._render = render
        # Built once and shared by every request of this task: providers only read it.
        self._output_schema: dict[str, Any] = output_model.model_json_schema()

    def __repr__(self) -> str:
        return f"TaskDefinition(name={self.name!r}, default_model={self.default_model!r})"

    @property
    def output_schema(self) -> dict[str, Any]:
        """The JSON schema a model's answer must follow (a copy, safe to change)."""
        return json.loads(json.dumps(self._output_schema))  # type: ignore[no-any-return]

    def validate_input(self, raw: object) -> dict[str, Any]:
        """The input, validated and normalised to JSON-able form (absent optionals dropped),
        so equal requests hash equally. Raises InvalidRequestError with field errors."""
        try:
            parsed = self.input_model.model_validate(raw)
        except ValidationError as exc:
            raise InvalidRequestError(
                f"the input is not valid for task {self.name!r}",
                errors=_field_errors(exc, prefix=("body", "input")),
            ) from None
        return parsed.model_dump(mode="json", exclude_none=True)

    def build_request(
        self, job_input: dict[str, Any], *, model: str, attempt_no: int, job_id: str
    ) -> ModelRequest:
        """The model call for a stored (already validated) input.

        Raises InvalidRequestError if the stored input no longer fits the input model.
        """
        parsed = self._parse_stored(job_input)
        parts = self._render(parsed)
        extras: dict[str, Any] = {}
        if parsed.simulate is not None:
            extras["simulate"] = parsed.simulate.model_dump(mode="json", exclude_none=True)
        return ModelRequest(
            model=model,
            task=self.name,
            prompt=parts.prompt,
            system=parts.system,
            max_tokens=parts.max_tokens,
            output_schema=self._output_schema,
            attempt_no=attempt_no,
            job_id=job_id,
            extras=extras,
        )

    def parse_output(self, text: str) -> dict[str, Any]:
        """The model's answer as a validated dict; InvalidOutputError if it is not JSON
        or breaks the output schema. The message names fields, never the text."""
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
        try:
            parsed = self.output_model.model_validate(data)
        except ValidationError as exc:
            raise InvalidOutputError(
                f"the model output breaks the output schema of task {self.name!r}: "
                + _describe_violations(exc)
            ) from None
        return parsed.model_dump(mode="json", exclude_none=True)

    def _parse_stored(self, job_input: dict[str, Any]) -> InputT:
        try:
            return self.input_model.model_validate(job_input)
        except ValidationError as exc:
            raise InvalidRequestError(
                f"the stored input no longer fits task {self.name!r}",
                errors=_field_errors(exc, prefix=("input",)),
            ) from None


def unbounded_text_fields(model: type[BaseModel]) -> list[str]:
    """The input fields (dotted paths, at any depth) that take free text with no
    maxLength: a client could fill the whole body with one of them."""
    schema = model.model_json_schema()
    definitions: dict[str, Any] = schema.get("$defs", {})
    found: list[str] = []
    pending: list[tuple[str, Any]] = [("", schema)]
    seen_refs: set[str] = set()
    while pending:
        path, node = pending.pop()
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in seen_refs:
            seen_refs.add(ref)
            pending.append((path, definitions.get(ref.rsplit("/", 1)[-1])))
        if node.get("type") == "string" and not {"maxLength", "enum", "const"} & node.keys():
            found.append(path or "(top level)")
        for name, child in node.get("properties", {}).items():
            pending.append((f"{path}.{name}" if path else name, child))
        for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
            pending.extend((path, child) for child in node.get(key, []))
        for key in ("items", "additionalProperties"):
            pending.append((path, node.get(key)))
    return sorted(set(found))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed")


def _field_errors(exc: ValidationError, *, prefix: tuple[str, ...]) -> list[dict[str, Any]]:
    # include_input=False: the offending value is customer data.
    return [
        {"loc": [*prefix, *error["loc"]], "msg": _message(error)}
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def _message(error: ErrorDetails) -> str:
    # Pydantic names our model class here; a client only needs to know the shape.
    if error["type"] == "model_type":
        return "Input should be a JSON object"
    return error["msg"]


def _describe_violations(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    described = [_describe(error) for error in errors[:_MAX_REPORTED_ERRORS]]
    if len(errors) > _MAX_REPORTED_ERRORS:
        described.append(f"and {len(errors) - _MAX_REPORTED_ERRORS} more")
    return "; ".join(described)


def _describe(error: ErrorDetails) -> str:
    loc = list(error["loc"])
    if error["type"] == "extra_forbidden":
        # The unexpected key was written by the model: say where, not what.
        return f"{_path(loc[:-1])}: unexpected field"
    return f"{_path(loc)}: {_message(error)}"


def _path(loc: list[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"
