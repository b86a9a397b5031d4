"""Inputs and outputs described by pydantic models: the built-in tasks and ``@task``.

Pydantic errors quote the offending value, so they are translated to field
locations and templated messages before anything leaves this module.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from pydantic import ValidationError

from ferryman.core.errors import InvalidRequestError
from ferryman.tasks.bounds import unbounded_strings
from ferryman.tasks.definition import (
    OutputViolationError,
    TaskDefinitionError,
    TaskInput,
    TaskOutput,
)

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

ModelT = TypeVar("ModelT", bound=TaskInput)


class ModelInput(Generic[ModelT]):
    """A task input checked by a TaskInput subclass; the render function gets the model."""

    def __init__(self, model: type[ModelT]) -> None:
        if not (isinstance(model, type) and issubclass(model, TaskInput)):
            raise TaskDefinitionError(
                f"the input model must be a subclass of ferryman.tasks.TaskInput, got {model!r}"
            )
        self.model = model
        self._schema = model.model_json_schema()

    def json_schema(self) -> dict[str, Any]:
        return _copy(self._schema)

    def unbounded_text(self) -> list[str]:
        return unbounded_strings(self._schema)

    def validate(self, raw: object, *, task: str) -> dict[str, Any]:
        try:
            parsed = self.model.model_validate(raw)
        except ValidationError as exc:
            raise InvalidRequestError(
                f"the input is not valid for task {task!r}",
                errors=field_errors(exc, prefix=("body", "input")),
            ) from None
        return parsed.model_dump(mode="json", exclude_none=True)

    def load(self, stored: dict[str, Any], *, task: str) -> ModelT:
        try:
            return self.model.model_validate(stored)
        except ValidationError as exc:
            raise InvalidRequestError(
                f"the stored input no longer fits task {task!r}",
                errors=field_errors(exc, prefix=("input",)),
            ) from None


class ModelOutput:
    """A task output checked by a TaskOutput subclass."""

    def __init__(self, model: type[TaskOutput]) -> None:
        if not (isinstance(model, type) and issubclass(model, TaskOutput)):
            raise TaskDefinitionError(
                f"the output model must be a subclass of ferryman.tasks.TaskOutput, got {model!r}"
            )
        self.model = model
        # Built once and shared by every request of this task: providers only read it.
        self._schema: dict[str, Any] = model.model_json_schema()

    def json_schema(self) -> dict[str, Any]:
        return _copy(self._schema)

    def asked_schema(self, job_input: dict[str, Any]) -> dict[str, Any]:
        return self._schema

    def check(self, data: Any, *, asked: dict[str, Any] | None) -> dict[str, Any]:
        try:
            parsed = self.model.model_validate(data)
        except ValidationError as exc:
            errors = exc.errors(include_url=False, include_input=False, include_context=False)
            raise OutputViolationError([_describe(error) for error in errors]) from None
        return parsed.model_dump(mode="json", exclude_none=True)


def field_errors(exc: ValidationError, *, prefix: tuple[str, ...]) -> list[dict[str, Any]]:
    """Each error's location under ``prefix`` and its message, never the input."""
    return [
        {"loc": [*prefix, *error["loc"]], "msg": _message(error)}
        for error in exc.errors(include_url=False, include_input=False, include_context=False)
    ]


def _message(error: ErrorDetails) -> str:
    # Pydantic names our model class here; a client only needs to know the shape.
    if error["type"] == "model_type":
        return "Input should be a JSON object"
    return error["msg"]


def _describe(error: ErrorDetails) -> str:
    loc = list(error["loc"])
    if error["type"] == "extra_forbidden":
        # The unexpected key was written by the model: say where, not what.
        return f"{_path(loc[:-1])}: unexpected field"
    return f"{_path(loc)}: {_message(error)}"


def _path(loc: list[int | str]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _copy(schema: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(schema))  # type: ignore[no-any-return]
