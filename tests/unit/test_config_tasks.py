"""Task settings: FERRYMAN_TASKS (modules), [tasks.NAME] tables and FERRYMAN_TASKS_DIR files."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ferryman.config import (
    ConfigurationError,
    env_name,
    load_settings,
    task_files,
    unknown_variables,
)

if TYPE_CHECKING:
    from pathlib import Path

TABLE = """
[tasks.triage]
description = "Route an email."
prompt = "Route: {{ input.email }}"
model = "sim"
max_tokens = 200
temperature = 0
input_schema = { type = "object", required = ["email"], properties = { email = { type = "string", maxLength = 500 } } }

[tasks.triage.output_schema]
type = "object"
required = ["queue"]
properties = { queue = { enum = ["sales", "support"] } }
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FERRYMAN_* variable and no ./ferryman.toml from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_no_tasks_beyond_the_builtins_by_default() -> None:
    s = load_settings()
    assert (s.tasks_module, s.tasks_dir, s.tasks) == ((), None, {})


def test_ferryman_tasks_names_modules_comma_separated(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_TASKS", "myapp.tasks, other.tasks,")
    assert load_settings().tasks_module == ("myapp.tasks", "other.tasks")
    assert env_name("tasks_module") == "FERRYMAN_TASKS"


def test_task_tables_are_read_from_the_file_and_survive_ferryman_tasks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "ferryman.toml").write_text('tasks_module = ["from.file"]\n' + TABLE)
    s = load_settings()
    assert s.tasks_module == ("from.file",)
    triage = s.tasks["triage"]
    assert (triage.model, triage.max_tokens, triage.temperature) == ("sim", 200, 0)
    assert triage.output_schema["required"] == ["queue"]
    # The variable names modules; it never replaces the tables.
    monkeypatch.setenv("FERRYMAN_TASKS", "from.env")
    monkeypatch.setenv("FERRYMAN_TASKS__TRIAGE__MAX_TOKENS", "300")
    s = load_settings()
    assert s.tasks_module == ("from.env",)
    assert s.tasks["triage"].max_tokens == 300
    assert s.tasks["triage"].prompt == "Route: {{ input.email }}"


def test_a_bad_table_names_the_place_and_never_echoes_the_value(tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text(
        TABLE.replace("max_tokens = 200", "max_tokens = 0\npromt = 'SECRET-PROMPT'")
    )
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = str(caught.value)
    assert "tasks.triage.max_tokens" in message
    assert "tasks.triage.promt" in message
    assert "SECRET-PROMPT" not in message


def test_the_task_variables_are_known_and_a_misspelling_is_not() -> None:
    environ = {
        "FERRYMAN_TASKS": "a",
        "FERRYMAN_TASKS_DIR": "d",
        "FERRYMAN_TASKS__TRIAGE__MODEL": "m",
        "FERRYMAN_TASKS_MODULE": "x",
    }
    assert [u.name for u in unknown_variables(environ)] == ["FERRYMAN_TASKS_MODULE"]


def test_task_files_are_one_task_each_named_by_the_file(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    body = TABLE.replace("[tasks.triage.output_schema]", "[output_schema]").replace(
        "[tasks.triage]\n", ""
    )
    (folder / "triage.toml").write_text(body)
    (folder / "notes.txt").write_text("not a task")
    found = task_files(str(folder))
    assert list(found) == ["triage"]
    assert found["triage"].max_tokens == 200


def test_a_bad_task_file_is_an_error_naming_it(tmp_path: Path) -> None:
    folder = tmp_path / "tasks"
    folder.mkdir()
    (folder / "broken.toml").write_text("prompt = 'unterminated")
    with pytest.raises(ConfigurationError, match=r"broken\.toml"):
        task_files(str(folder))
    (folder / "broken.toml").write_text("prompt = 'x'\ninput_schema = {}\n")
    with pytest.raises(ConfigurationError, match=r"broken.toml is not valid:\n  output_schema"):
        task_files(str(folder))
    with pytest.raises(ConfigurationError, match="not a directory"):
        task_files(str(tmp_path / "missing"))
