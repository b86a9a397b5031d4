"""The tasks a deployment accepts, by name."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ferryman.core.errors import InvalidRequestError

if TYPE_CHECKING:
    from ferryman.tasks.definition import TaskDefinition


class TaskRegistry:
    """Task definitions by name. An unknown name is the caller's mistake (422)."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition[Any]] = {}

    def register(self, task: TaskDefinition[Any]) -> None:
        if task.name in self._tasks:
            raise ValueError(f"task {task.name!r} is already registered")
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

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)
