"""Task definitions: input model, prompt, output schema; and the built-in tasks."""

from __future__ import annotations

from ferryman.tasks.builtin import builtin_tasks
from ferryman.tasks.definition import PromptParts, TaskDefinition, TaskInput, TaskOutput
from ferryman.tasks.registry import TaskRegistry
from ferryman.tasks.simulate import SimulateOptions

__all__ = [
    "PromptParts",
    "SimulateOptions",
    "TaskDefinition",
    "TaskInput",
    "TaskOutput",
    "TaskRegistry",
    "builtin_tasks",
]
