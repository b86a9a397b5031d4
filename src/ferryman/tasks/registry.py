"""The tasks a deployment accepts, by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.core.errors import InvalidRequestError
from ferryman.tasks.definition import TaskDefinitionError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ferryman.tasks.definition import TaskDefinition


class TaskRegistry:
    """Task definitions by name. An unknown name is the caller's mistake (422)."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition[Any]] = {}

    def register(self, task: TaskDefinition[Any]) -> None:
        """Add a task; TaskDefinitionError (a ValueError) naming both definitions when
        another one has the name. Registering the same definition again changes nothing."""
        existing = self._tasks.get(task.name)
        if existing is task:
            return
        if existing is not None:
            raise TaskDefinitionError(
                f"task {task.name!r} is already registered: defined by {existing.origin}, "
                f"and again by {task.origin}"
            )
        self._tasks[task.name] = task

    def get(self, name: str) -> TaskDefinition[Any]:
        task = self._tasks.get(name)
        if task is None:
            # The requested name is not echoed: it is whatever the client sent.
            msg = f"unknown task; known tasks: {', '.join(self.names())}"
            raise InvalidRequestError(msg, errors=[{"loc": ["body", "task"], "msg": msg}])
        return task

    def names(self) -> list[str]:
        return sorted(self._tasks)

    def __iter__(self) -> Iterator[TaskDefinition[Any]]:
        """The tasks in name order."""
        return iter([self._tasks[name] for name in self.names()])

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)
