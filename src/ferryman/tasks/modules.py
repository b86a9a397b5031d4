"""Tasks written in Python: the ``@task`` decorator and the modules FERRYMAN_TASKS names.

``@task(...)`` turns a render function into a TaskDefinition and registers nothing:
importing a task module has no side effect and needs no running service, so it can
be imported by tests, linters or a REPL. At startup ``load_task_modules`` imports
each module named by FERRYMAN_TASKS (by the ordinary import system: a package
installed in ferryman's environment, or a directory on PYTHONPATH) and collects
every TaskDefinition the module holds at its top level.

    from ferryman.tasks import PromptParts, TaskInput, TaskOutput, task

    class TriageIn(TaskInput):
        email: str = Field(max_length=20_000)

    class TriageOut(TaskOutput):
        queue: Literal["sales", "support"]

    @task(output=TriageOut, model="fast", max_attempts=3, max_tokens=400, temperature=0)
    def triage(given: TriageIn) -> PromptParts:
        \"\"\"Route an email to a queue.\"\"\"
        return PromptParts(system="You route emails.", prompt=given.email)
"""

from __future__ import annotations

import importlib
import inspect
import re
import typing
from typing import TYPE_CHECKING, Any, TypeVar

from ferryman.tasks.definition import (
    DEFAULT_MODEL,
    PromptParts,
    TaskDefinition,
    TaskDefinitionError,
)
from ferryman.tasks.models import ModelInput, ModelOutput

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from ferryman.tasks.definition import TaskInput, TaskOutput

InputT = TypeVar("InputT", bound="TaskInput")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")


def task(
    *,
    output: type[TaskOutput],
    name: str | None = None,
    input: type[InputT] | None = None,
    model: str = DEFAULT_MODEL,
    description: str | None = None,
    max_attempts: int | None = None,
    max_invalid_output_attempts: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> Callable[[Callable[[InputT], PromptParts]], TaskDefinition[InputT]]:
    """Define a task from its render function.

    The input model is the annotation of the function's parameter unless ``input``
    gives it; the name is the function's unless ``name`` gives one; the description
    is the docstring's. The defaults left None are the deployment's settings.
    Raises TaskDefinitionError (at import) when the task cannot be defined.
    """

    def define(render: Callable[[InputT], PromptParts]) -> TaskDefinition[InputT]:
        origin = f"{render.__module__}.{render.__qualname__}"
        task_name = name or render.__name__
        input_model = input if input is not None else _input_annotation(render, origin)
        try:
            inputs = ModelInput(input_model)
            outputs = ModelOutput(output)
        except TaskDefinitionError as exc:
            raise TaskDefinitionError(f"task {task_name!r} ({origin}): {exc}") from None
        return TaskDefinition(
            name=task_name,
            inputs=inputs,
            outputs=outputs,
            render=render,
            default_model=model,
            description=description or inspect.getdoc(render),
            origin=origin,
            max_attempts=max_attempts,
            max_invalid_output_attempts=max_invalid_output_attempts,
            max_tokens=max_tokens,
            temperature=temperature,
        )

    return define


def _input_annotation(render: Callable[..., PromptParts], origin: str) -> Any:
    parameters = list(inspect.signature(render).parameters.values())
    if len(parameters) != 1:
        raise TaskDefinitionError(f"{origin}: a task function takes one argument, its input")
    try:
        hints = typing.get_type_hints(render)
    except Exception as exc:  # noqa: BLE001 - any failure means: say input= explicitly
        raise TaskDefinitionError(
            f"{origin}: cannot read the input model from the annotation "
            f"({type(exc).__name__}: {exc}); pass input=TheModel to @task"
        ) from None
    annotation = hints.get(parameters[0].name)
    if annotation is None:
        raise TaskDefinitionError(f"{origin}: annotate the argument with the input model")
    return annotation


def load_task_modules(names: Sequence[str]) -> list[TaskDefinition[Any]]:
    """Every task defined at the top level of each named module, in name order per
    module; the same definition reached twice (a re-export) counts once.

    Raises TaskDefinitionError naming the module that cannot be imported (and why)
    or that defines no task.
    """
    found: dict[int, TaskDefinition[Any]] = {}
    for module_name in names:
        module = _imported(module_name)
        defined = [value for value in vars(module).values() if isinstance(value, TaskDefinition)]
        if not defined:
            raise TaskDefinitionError(
                f"FERRYMAN_TASKS module {module_name!r} defines no task "
                "(decorate a function with @ferryman.tasks.task at its top level)"
            )
        for definition in sorted(defined, key=lambda d: d.name):
            found.setdefault(id(definition), definition)
    return list(found.values())


def _imported(module_name: str) -> Any:
    if not _MODULE_NAME.fullmatch(module_name):
        raise TaskDefinitionError(
            f"FERRYMAN_TASKS: {module_name!r} is not a module name (like myapp.tasks)"
        )
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            raise TaskDefinitionError(
                f"FERRYMAN_TASKS names module {module_name!r}, which cannot be found: "
                "install its package in ferryman's environment, or put the directory "
                "holding it on PYTHONPATH"
            ) from None
        raise _import_failed(module_name, exc) from None
    except TaskDefinitionError as exc:
        raise TaskDefinitionError(f"FERRYMAN_TASKS module {module_name!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - whatever a module raises, say which one
        raise _import_failed(module_name, exc) from None


def _import_failed(module_name: str, exc: BaseException) -> TaskDefinitionError:
    return TaskDefinitionError(
        f"FERRYMAN_TASKS module {module_name!r} failed to import: {type(exc).__name__}: {exc}"
    )
