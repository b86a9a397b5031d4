"""/v1/tasks: the tasks this deployment accepts, with their schemas and defaults.

Any authenticated tenant may read it (it spends the read budget): a client learns
what it may submit without reading the server's configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ferryman.http.auth import Tenant
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import TaskList
from ferryman.http.views import JsonBody

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ferryman.tasks import TaskDefinition, TaskRegistry

router = APIRouter(prefix="/v1/tasks", tags=["tasks"])


@router.get(
    "",
    **operation(
        "listTasks", TaskList, access=Access.TENANT, summary="The tasks this deployment accepts"
    ),
)
async def list_tasks(request: Request, principal: Tenant) -> JSONResponse:
    listing: dict[str, Any] = request.app.state.task_listing
    return JsonBody(listing)


def install(app: FastAPI, registry: TaskRegistry | None, *, sim_scripts: bool) -> None:
    """Serve GET /v1/tasks for ``registry`` (the one intake validates against).
    Without a registry (an app built to test other routes) it is not there, and the
    OpenAPI document describes no task's body (http/openapi.py). ``sim_scripts``:
    whether inputs may carry ``simulate`` (their schemas show it only then)."""
    if registry is None:
        return
    # The registry is fixed once the process has started: build the listing once.
    listing = [task_body(task, sim_scripts=sim_scripts) for task in registry]
    app.state.task_listing = {"data": listing}
    app.include_router(router)


def task_body(task: TaskDefinition[Any], *, sim_scripts: bool) -> dict[str, Any]:
    """One task as GET /v1/tasks shows it; a default of null is the deployment's."""
    return {
        "name": task.name,
        "description": task.description,
        "defaults": {
            "model": task.default_model,
            "max_attempts": task.max_attempts,
            "max_invalid_output_attempts": task.max_invalid_output_attempts,
            "max_tokens": task.max_tokens,
            "temperature": task.temperature,
        },
        "input_schema": task.published_input_schema(simulate=sim_scripts),
        "output_schema": task.output_schema,
    }
