"""Task definitions: input, prompt, output schema; the built-in tasks, and your own.

Write a task in Python with ``@task`` (loaded from the modules FERRYMAN_TASKS names)
or declare one in TOML (``[tasks.NAME]``); docs/tasks.md shows both.
"""

from __future__ import annotations

from ferryman.tasks.builtin import builtin_tasks
from ferryman.tasks.declared import declared_task
from ferryman.tasks.definition import (
    PromptParts,
    TaskDefinition,
    TaskDefinitionError,
    TaskInput,
    TaskOutput,
)
from ferryman.tasks.modules import load_task_modules, task
from ferryman.tasks.registry import TaskRegistry
from ferryman.tasks.simulate import SimulateOptions

__all__ = [
    "PromptParts",
    "SimulateOptions",
    "TaskDefinition",
    "TaskDefinitionError",
    "TaskInput",
    "TaskOutput",
    "TaskRegistry",
    "builtin_tasks",
    "declared_task",
    "load_task_modules",
    "task",
]
