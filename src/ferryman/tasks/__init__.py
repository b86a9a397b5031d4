"""Task definitions: input, prompt, output schema; and the built-in tasks."""

from __future__ import annotations

from ferryman.tasks.builtin import builtin_tasks
from ferryman.tasks.definition import (
    PromptParts,
    TaskDefinition,
    TaskDefinitionError,
    TaskInput,
    TaskOutput,
)
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
]
