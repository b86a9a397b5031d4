"""@task and the modules FERRYMAN_TASKS names: found by the import system, no side effects."""

from __future__ import annotations

import sys
import textwrap
from typing import TYPE_CHECKING, Literal

import pytest
from pydantic import Field

from ferryman.tasks import (
    PromptParts,
    TaskDefinition,
    TaskDefinitionError,
    TaskInput,
    TaskOutput,
    builtin_tasks,
    load_task_modules,
    task,
)

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


class TriageIn(TaskInput):
    email: str = Field(min_length=1, max_length=2000)


class TriageOut(TaskOutput):
    queue: Literal["sales", "support"]


@task(
    output=TriageOut,
    model="fast",
    max_attempts=3,
    max_invalid_output_attempts=1,
    max_tokens=400,
    temperature=0,
)
def triage(given: TriageIn) -> PromptParts:
    """Route an email to a queue."""
    return PromptParts(system="You route emails.", prompt=given.email)


def test_the_decorator_makes_a_task_definition_from_the_function() -> None:
    assert isinstance(triage, TaskDefinition)
    assert triage.name == "triage"
    assert triage.description == "Route an email to a queue."
    assert triage.origin == f"{__name__}.triage"
    assert triage.default_model == "fast"
    assert (triage.max_attempts, triage.max_invalid_output_attempts) == (3, 1)
    assert (triage.max_tokens, triage.temperature) == (400, 0)
    stored = triage.validate_input({"email": "hi"})
    request = triage.build_request(stored, model="gpt", attempt_no=1, job_id="gen_1")
    assert (request.system, request.prompt, request.max_tokens, request.temperature) == (
        "You route emails.",
        "hi",
        400,
        0,
    )
    assert triage.parse_output('{"queue": "sales"}') == {"queue": "sales"}


def test_name_input_and_description_can_be_given() -> None:
    @task(name="route", input=TriageIn, output=TriageOut, description="Routes.")
    def anything(given):  # type: ignore[no-untyped-def]
        return PromptParts(system=None, prompt=given.email)

    assert (anything.name, anything.description, anything.default_model) == (
        "route",
        "Routes.",
        "sim",
    )


def test_an_annotation_that_cannot_be_resolved_asks_for_input() -> None:
    class Local(TaskInput):
        note: str = Field(max_length=10)

    # With postponed annotations a class local to a function cannot be looked up.
    with pytest.raises(TaskDefinitionError, match="pass input=TheModel"):

        @task(output=TriageOut)
        def local(given: Local) -> PromptParts:
            return PromptParts(system=None, prompt=given.note)


def test_a_task_function_without_an_input_model_is_refused() -> None:
    with pytest.raises(TaskDefinitionError, match="annotate the argument"):

        @task(output=TriageOut)
        def untyped(given):  # type: ignore[no-untyped-def]
            return PromptParts(system=None, prompt="x")

    with pytest.raises(TaskDefinitionError, match="one argument"):

        @task(output=TriageOut)
        def two(a: TriageIn, b: TriageIn) -> PromptParts:
            return PromptParts(system=None, prompt="x")

    with pytest.raises(TaskDefinitionError, match="TaskInput"):

        @task(output=TriageOut)
        def wrong(given: TriageOut) -> PromptParts:
            return PromptParts(system=None, prompt="x")


def test_an_unbounded_string_is_refused_when_the_module_is_imported() -> None:
    class Loose(TaskInput):
        email: str

    with pytest.raises(TaskDefinitionError, match=r"'loose'.*email"):

        @task(output=TriageOut, input=Loose)
        def loose(given: Loose) -> PromptParts:
            return PromptParts(system=None, prompt=given.email)


# --- loading modules by name ---------------------------------------------------

MODULE = textwrap.dedent(
    """
    from __future__ import annotations
    from pydantic import Field
    from ferryman.tasks import PromptParts, TaskInput, TaskOutput, task
    from ferryman.tasks.builtin import GENERATE  # a re-export is not a second task

    class NoteIn(TaskInput):
        note: str = Field(max_length=100)

    class NoteOut(TaskOutput):
        tag: str

    @task(output=NoteOut)
    def {name}(given: NoteIn) -> PromptParts:
        return PromptParts(system=None, prompt=given.note)

    HELPER = "not a task"
    """
)


@pytest.fixture
def write_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[str, str], str]:
    """Write a module on a fresh PYTHONPATH entry; forgotten by sys.modules afterwards."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def write(name: str, source: str) -> str:
        path = tmp_path.joinpath(*name.split(".")).with_suffix(".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(tmp_path).parents:
            if str(parent) != ".":
                tmp_path.joinpath(parent, "__init__.py").touch()
        path.write_text(source)
        for part in range(1, len(name.split(".")) + 1):
            monkeypatch.delitem(sys.modules, ".".join(name.split(".")[:part]), raising=False)
        return name

    return write


def test_a_module_on_the_path_is_imported_and_its_tasks_collected(
    write_module: Callable[[str, str], str],
) -> None:
    name = write_module("acme_tasks_a.tasks", MODULE.format(name="note"))
    found = load_task_modules([name])
    names = sorted(d.name for d in found)
    assert names == ["generate", "note"]
    registry = builtin_tasks()
    for definition in found:
        registry.register(definition)  # the re-exported builtin is the same object
    assert registry.get("note").origin == "acme_tasks_a.tasks.note"


def test_two_modules_defining_one_name_is_an_error_naming_both(
    write_module: Callable[[str, str], str],
) -> None:
    first = write_module("acme_tasks_b1", MODULE.format(name="note"))
    second = write_module("acme_tasks_b2", MODULE.format(name="note"))
    registry = builtin_tasks()
    notes = [d for d in load_task_modules([first, second]) if d.name == "note"]
    assert len(notes) == 2
    registry.register(notes[0])
    with pytest.raises(TaskDefinitionError) as caught:
        registry.register(notes[1])
    assert "acme_tasks_b1.note" in str(caught.value)
    assert "acme_tasks_b2.note" in str(caught.value)


def test_a_module_that_cannot_be_found_says_where_it_is_looked_for() -> None:
    with pytest.raises(TaskDefinitionError) as caught:
        load_task_modules(["acme_nowhere.tasks"])
    assert "'acme_nowhere.tasks'" in str(caught.value)
    assert "PYTHONPATH" in str(caught.value)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            "raise RuntimeError('no database here')",
            "failed to import: RuntimeError: no database here",
        ),
        (
            "import acme_missing_dependency",
            "ModuleNotFoundError: No module named 'acme_missing_dependency'",
        ),
        ("def broken(:\n    pass", "SyntaxError"),
        ("X = 1", "defines no task"),
        (
            MODULE.format(name="note").replace("max_length=100", "min_length=1"),
            "'note'",
        ),
    ],
)
def test_a_module_that_fails_is_an_error_naming_it(
    write_module: Callable[[str, str], str], source: str, expected: str
) -> None:
    name = write_module("acme_tasks_broken", source)
    with pytest.raises(TaskDefinitionError) as caught:
        load_task_modules([name])
    assert "'acme_tasks_broken'" in str(caught.value)
    assert expected in str(caught.value), str(caught.value)


def test_a_name_that_is_not_a_module_name_is_refused() -> None:
    with pytest.raises(TaskDefinitionError, match="not a module name"):
        load_task_modules(["acme/tasks.py"])


def test_importing_a_task_module_registers_nothing_anywhere(
    write_module: Callable[[str, str], str],
) -> None:
    name = write_module("acme_tasks_c", MODULE.format(name="quiet"))
    __import__(name)
    assert "quiet" not in builtin_tasks()
