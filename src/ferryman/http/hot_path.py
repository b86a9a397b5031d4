"""The submit route without FastAPI's router: the one request a producer sends per job.

Between the middleware and a route, FastAPI matches the path against every route,
opens two exit stacks, solves the route's parameters and wraps the exception
handlers around it: about a quarter of an in-process submit's CPU (cProfile), more
than authenticating, validating and storing the job take together on the memory
engine. ``SubmitHotPath`` sits innermost among the middleware and hands
``POST /v1/generations`` to the same route function directly, rendering a
FerrymanError as the app's exception handler would (http/error_map.py); every other
request, and that path under a mount (a root_path), goes through the router. The
route stays registered there, so the OpenAPI document and the router's answers for
other methods are unchanged, and the access log still names its route template.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from starlette.requests import Request

from ferryman.core.errors import FerrymanError
from ferryman.http.bodies import SUBMIT_PATH
from ferryman.http.error_map import render_error
from ferryman.http.routes.jobs import router, submit

if TYPE_CHECKING:
    from starlette.routing import BaseRoute
    from starlette.types import ASGIApp, Receive, Scope, Send


# speed exception: see docs/design-notes.md, Speed exceptions
class SubmitHotPath:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        # Put in the scope as the router would: the access log reads its template.
        self.route = _submit_route()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["path"] != SUBMIT_PATH
            or scope["method"] != "POST"
            or scope.get("root_path")
        ):
            await self.app(scope, receive, send)
            return
        scope["route"] = self.route
        request = Request(scope, receive, send)
        try:
            response = await submit(request)
        except FerrymanError as exc:
            response = render_error(exc)
        await response(scope, receive, send)


def _submit_route() -> BaseRoute:
    for route in router.routes:
        if getattr(route, "path", None) == SUBMIT_PATH and "POST" in getattr(route, "methods", ()):
            return route
    raise LookupError(f"no POST {SUBMIT_PATH} route")
