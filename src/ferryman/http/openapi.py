"""How each route is described in the OpenAPI document, from what it does.

A route says what it is in one call, ``operation(...)``: its operationId, its
response model, whether it is for tenants or admins, the body it reads, the
request headers it reads, the response headers it sets, and the errors it can
raise. Everything else follows from that here, never by hand per route:

- each error class becomes its status through the one table that maps errors to
  statuses (http/error_map.py), and every error status is declared as
  ``application/problem+json`` with the shared ``Problem`` schema;
- an authenticated route can answer 401 and 429 (its budget) and 503 (the key
  store), an admin route 403 as well, a route reading a body 408, 413, 415 and
  422, a route with path or query parameters 422; every route can answer 503
  when the process is at its connection cap (http/connections.py);
- headers every response carries (``X-Correlation-Id``; ``RateLimit`` and
  ``RateLimit-Policy`` on authenticated routes) and the ``Retry-After`` of every
  429 and 503 are declared on every response they appear on.

``install_openapi`` finishes the document once, when it is first asked for: the
``Problem`` components, and the submission body per registered task
(http/bodies.py), and the batch's items the same way (http/batch_bodies.py).
"""

from __future__ import annotations

import enum
from collections import defaultdict
from typing import TYPE_CHECKING, Any

from ferryman.core.errors import (
    AuthenticationError,
    ForbiddenError,
    InvalidRequestError,
    PayloadTooLargeError,
    StoreUnavailableError,
)
from ferryman.http.batch_bodies import describe_batch_body
from ferryman.http.bodies import describe_task_bodies, openapi_body
from ferryman.http.context import CORRELATION_HEADER
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE, STATUS_TABLE
from ferryman.http.errors import (
    RateLimitedError,
    RequestTimeoutError,
    TooManyConnectionsError,
    UnsupportedMediaTypeError,
)
from ferryman.http.schemas import Problem

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from fastapi import FastAPI
    from pydantic import BaseModel

    from ferryman.core.errors import FerrymanError
    from ferryman.tasks import TaskRegistry

PROBLEM_REF = "#/components/schemas/Problem"
BEARER_SCHEME = "bearerAuth"


class Access(enum.Enum):
    PUBLIC = "public"  # health and metrics
    TENANT = "tenant"  # any valid key
    ADMIN = "admin"  # admin keys only


# --- headers ------------------------------------------------------------------------


def _header(description: str, **schema: Any) -> dict[str, Any]:
    return {"description": description, "schema": {"type": "string", **schema}}


# Request headers, as OpenAPI parameters.
IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": (
        "Makes the submission safe to repeat: the same key with the same request returns "
        "the same job (Idempotent-Replayed: true); with a different request, 422 "
        "idempotency_key_mismatch. 1-255 printable ASCII characters, else 400."
    ),
    # Printable ASCII, spaces inside only (HTTP strips them at either end).
    "schema": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "pattern": r"^[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?$",
    },
}
TRACEPARENT = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "description": (
        "W3C Trace Context: the job's model calls join this trace. A malformed value is "
        "ignored (a new trace starts), as the W3C specification asks."
    ),
    "schema": {"type": "string"},
}
CORRELATION_ID = {
    "name": CORRELATION_HEADER,
    "in": "header",
    "required": False,
    "description": (
        "Your id for this request, echoed in the response and the server's log, and kept "
        "with a submitted job. 1-128 printable ASCII characters; otherwise one is generated."
    ),
    "schema": {"type": "string"},
}

# Response headers.
LOCATION = {"Location": _header("Where the job is: /v1/generations/{job_id}.") | {"required": True}}
IDEMPOTENT_REPLAYED = {
    "Idempotent-Replayed": _header(
        "true when this answer is an earlier submission's job (same Idempotency-Key).",
        enum=["true"],
    )
}
_CORRELATION = {
    CORRELATION_HEADER: _header("The request's correlation id (yours, or a generated one).")
    | {"required": True}
}
_RATE_LIMIT = {
    "RateLimit": _header('Where the budget stands, e.g. "read";r=399;t=1 (only when limited).'),
    "RateLimit-Policy": _header('The budget, e.g. "read";q=400;w=2 (only when limited).'),
}
_RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before trying again.",
        "required": True,
        "schema": {"type": "integer", "minimum": 1},
    }
}
_WWW_AUTHENTICATE = {"WWW-Authenticate": _header("Bearer") | {"required": True}}


# --- errors -------------------------------------------------------------------------

_AUTHENTICATED: tuple[type[FerrymanError], ...] = (
    AuthenticationError,
    RateLimitedError,
    StoreUnavailableError,
)
_BODY: tuple[type[FerrymanError], ...] = (
    InvalidRequestError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    RequestTimeoutError,
)


def status_of(error: type[FerrymanError]) -> tuple[int, str]:
    """The status and title the error table gives this error class (through its bases)."""
    for cls in error.__mro__:
        entry = STATUS_TABLE.get(cls)
        if entry is not None:
            return entry
    raise LookupError(f"{error.__name__} has no status in http/error_map.py")


def _errors_of(
    access: Access, *, body: bool, params: bool, errors: Iterable[type[FerrymanError]]
) -> list[type[FerrymanError]]:
    found: list[type[FerrymanError]] = [TooManyConnectionsError]
    if access is not Access.PUBLIC:
        found.extend(_AUTHENTICATED)
    if access is Access.ADMIN:
        found.append(ForbiddenError)
    if body:
        found.extend(_BODY)
    if params:
        found.append(InvalidRequestError)
    found.extend(errors)
    return found


def problem_responses(
    errors: Iterable[type[FerrymanError]], *, access: Access
) -> dict[int | str, dict[str, Any]]:
    """One problem+json response per status these errors map to, titles as description."""
    titles: dict[int, list[str]] = defaultdict(list)
    for error in errors:
        status, title = status_of(error)
        if title not in titles[status]:
            titles[status].append(title)
    responses: dict[int | str, dict[str, Any]] = {}
    for status in sorted(titles):
        headers = dict(_CORRELATION)
        if access is not Access.PUBLIC and status != 401:
            headers |= _RATE_LIMIT
        if status in (429, 503):
            headers |= _RETRY_AFTER
        if status == 401:
            headers |= _WWW_AUTHENTICATE
        responses[status] = {
            "description": "; ".join(titles[status]),
            "content": {PROBLEM_MEDIA_TYPE: {"schema": {"$ref": PROBLEM_REF}}},
            "headers": headers,
        }
    return responses


def operation(
    operation_id: str,
    model: type[BaseModel] | None,
    *,
    access: Access,
    status: int = 200,
    summary: str | None = None,
    description: str = "Successful Response",
    body: type[BaseModel] | None = None,
    params: bool = False,
    errors: Iterable[type[FerrymanError]] = (),
    request_headers: Iterable[dict[str, Any]] = (),
    response_headers: dict[str, Any] | None = None,
    authenticates_itself: bool = False,
) -> dict[str, Any]:
    """Keyword arguments for a route decorator that describe the route completely.

    ``params``: the route has path or query parameters (so a 422 when they are wrong).
    ``body``: the model of the JSON body the route reads itself (http/bodies.py).
    ``authenticates_itself``: the route calls ``http.auth.authenticate`` instead of
    depending on ``Tenant``, so the document is told of the scheme here.
    """
    success_headers = dict(_CORRELATION)
    if access is not Access.PUBLIC:
        success_headers |= _RATE_LIMIT
    success_headers |= response_headers or {}
    responses = problem_responses(
        _errors_of(access, body=body is not None, params=params, errors=errors), access=access
    )
    responses[status] = {"description": description, "headers": success_headers}
    extra: dict[str, Any] = {"parameters": [*request_headers, CORRELATION_ID]}
    if body is not None:
        extra |= openapi_body(body)
    if authenticates_itself:
        extra["security"] = [{BEARER_SCHEME: []}]
    kwargs: dict[str, Any] = {
        "operation_id": operation_id,
        "status_code": status,
        "responses": responses,
        "openapi_extra": extra,
    }
    if model is not None:
        kwargs["response_model"] = model
    if summary is not None:
        kwargs["summary"] = summary
    return kwargs


# --- the document -------------------------------------------------------------------


def install_openapi(
    app: FastAPI,
    registry: TaskRegistry | None,
    *,
    models: Callable[[], list[str] | None] = lambda: None,
    sim_scripts: bool = False,
) -> None:
    """Finish the app's document when it is first generated (FastAPI caches it).
    ``models``: the model names a submission may name (None: any), asked then;
    ``sim_scripts``: whether a task's input may carry ``simulate``."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            _add_problem_components(document)
            if registry is not None:
                describe_task_bodies(document, registry, models=models(), sim_scripts=sim_scripts)
                describe_batch_body(document)
        return app.openapi_schema  # type: ignore[return-value]

    app.openapi = openapi  # type: ignore[method-assign]


def _add_problem_components(document: dict[str, Any]) -> None:
    schema = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.update(schema.pop("$defs", {}))
    schemas["Problem"] = schema
