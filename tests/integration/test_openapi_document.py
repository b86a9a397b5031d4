"""The OpenAPI document as a client generator and Swagger UI read it: operationIds,
problem responses, the bearer scheme, headers, the body per task, /metrics as text,
and /docs working without the internet. (tests/hostile/test_openapi_fuzz.py checks
the document against what the server does.)"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.core.errors import AlreadyTerminalError, JobNotFoundError, PausedError
from ferryman.http import schemas
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE
from ferryman.http.openapi import status_of
from ferryman.services.catalog import ModelCatalog
from ferryman.services.intake import Intake

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from fastapi import FastAPI
    from pydantic import BaseModel
    from tests.integration.conftest import HttpKeys, HttpStack

OPERATIONS = {
    ("post", "/v1/generations"): "createGeneration",
    ("post", "/v1/generations/batch"): "createGenerationBatch",
    ("get", "/v1/generations"): "listGenerations",
    ("get", "/v1/generations/{job_id}"): "getGeneration",
    ("get", "/v1/generations/{job_id}/events"): "listGenerationEvents",
    ("get", "/v1/generations/{job_id}/stream"): "streamGeneration",
    ("post", "/v1/generations/{job_id}/cancel"): "cancelGeneration",
    ("get", "/v1/tasks"): "listTasks",
    ("get", "/v1/usage"): "getUsage",
    ("get", "/v1/admin/usage"): "getTenantUsage",
    ("get", "/v1/admin/dead-letters"): "listDeadLetters",
    ("post", "/v1/admin/dead-letters/replay"): "replayDeadLetters",
    ("get", "/v1/admin/dead-letters/undecodable"): "listUndecodableLetters",
    ("get", "/v1/admin/dead-letters/undecodable/{dead_letter_id}"): "getUndecodableLetter",
    ("post", "/v1/admin/dead-letters/undecodable/purge"): "purgeUndecodableLetters",
    ("post", "/v1/admin/pause"): "pauseWork",
    ("post", "/v1/admin/resume"): "resumeWork",
    ("get", "/v1/admin/audit"): "listAuditRecords",
    ("get", "/v1/admin/generations/{job_id}"): "inspectGeneration",
    ("get", "/v1/admin/generations/{job_id}/events"): "inspectGenerationEvents",
    ("get", "/v1/admin/keys"): "listApiKeys",
    ("post", "/v1/admin/keys"): "createApiKey",
    ("post", "/v1/admin/keys/{key_id}/revoke"): "revokeApiKey",
    ("post", "/v1/webhooks/secret"): "rotateWebhookSecret",
    ("get", "/healthz"): "healthz",
    ("get", "/readyz"): "readyz",
    ("get", "/metrics"): "metrics",
}
PUBLIC = {"healthz", "readyz", "metrics"}
CAMEL_CASE = re.compile(r"[a-z]+(?:[A-Z][a-z]+)*")


@pytest.fixture
async def document(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> dict[str, Any]:
    response = await http_open_client(http_stack.app()).get("/openapi.json")
    assert response.status_code == 200
    body: dict[str, Any] = response.json()
    return body


def operations(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Every operation by its operationId (asserting they are unique)."""
    found: dict[str, dict[str, Any]] = {}
    for methods in document["paths"].values():
        for operation in methods.values():
            assert operation["operationId"] not in found, operation["operationId"]
            found[operation["operationId"]] = operation
    return found


def test_every_route_has_its_own_camel_case_operation_id(document: dict[str, Any]) -> None:
    given = {
        (method, path): operation["operationId"]
        for path, methods in document["paths"].items()
        for method, operation in methods.items()
    }
    assert given == OPERATIONS
    assert len(set(given.values())) == len(given)
    assert all(CAMEL_CASE.fullmatch(name) for name in given.values())
    # A route added without operation() would carry FastAPI's generated snake_case id.


def test_every_success_names_its_response_schema(document: dict[str, Any]) -> None:
    for name, operation in operations(document).items():
        successes = [status for status in operation["responses"] if status.startswith("2")]
        if name == "streamGeneration":
            assert successes == ["200", "204"]
            content = operation["responses"]["200"]["content"]
            assert content == {"text/event-stream": {"schema": {"type": "string"}}}
            continue
        (success,) = successes
        content = operation["responses"][success]["content"]
        if name == "metrics":
            assert content == {"text/plain": {"schema": {"type": "string"}}}
        else:
            assert set(content) == {"application/json"}, name
            assert content["application/json"]["schema"]["$ref"].startswith("#/components/schemas/")


def test_every_error_is_a_problem_with_the_shared_schema(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    problem = schemas["Problem"]
    assert set(problem["required"]) == {"type", "title", "status", "detail", "code"}
    field_error = schemas[problem["properties"]["errors"]["items"]["$ref"].rsplit("/", 1)[-1]]
    assert set(field_error["required"]) == {"loc", "msg"}
    # FastAPI's own validation error schema is nowhere: 422s are problems too.
    assert "HTTPValidationError" not in schemas
    for name, operation in operations(document).items():
        errors = {status: r for status, r in operation["responses"].items() if status >= "400"}
        assert errors, name
        for status, response in errors.items():
            assert response["content"] == {
                PROBLEM_MEDIA_TYPE: {"schema": {"$ref": "#/components/schemas/Problem"}}
            }, (name, status)
            if status in ("429", "503"):
                assert response["headers"]["Retry-After"]["required"] is True


def test_declared_statuses_follow_the_error_table(document: dict[str, Any]) -> None:
    by_name = operations(document)

    def statuses(name: str) -> set[int]:
        return {int(s) for s in by_name[name]["responses"] if s >= "400"}

    # A body: 408, 413, 415, 422; a key: 401 and 429; always: 503 (connection cap).
    assert statuses("createGeneration") == {400, 401, 408, 413, 415, 422, 429, 503, 507}
    assert status_of(PausedError)[0] in statuses("createGeneration")
    assert statuses("getGeneration") == {401, 404, 422, 429, 500, 503}
    assert status_of(JobNotFoundError)[0] in statuses("listGenerationEvents")
    assert status_of(AlreadyTerminalError)[0] in statuses("cancelGeneration")
    assert statuses("listTasks") == {401, 429, 503}
    assert statuses("revokeApiKey") == {401, 403, 404, 409, 422, 429, 503}
    # 403 exactly on the operations API (admin keys only).
    for (_, path), name in OPERATIONS.items():
        assert (403 in statuses(name)) == path.startswith("/v1/admin/"), name
    assert statuses("healthz") == statuses("metrics") == {503}
    assert statuses("readyz") == {503}


def test_bearer_auth_is_a_security_scheme_on_every_authenticated_route(
    document: dict[str, Any],
) -> None:
    schemes = document["components"]["securitySchemes"]
    assert schemes == {
        "bearerAuth": {
            "type": "http",
            "scheme": "bearer",
            "description": schemes["bearerAuth"]["description"],
        }
    }
    for name, operation in operations(document).items():
        if name in PUBLIC:
            assert "security" not in operation, name
            assert "401" not in operation["responses"]
        else:
            assert operation["security"] == [{"bearerAuth": []}], name
            assert operation["responses"]["401"]["headers"]["WWW-Authenticate"]["required"]
            assert "RateLimit" in next(
                r["headers"] for s, r in operation["responses"].items() if s.startswith("2")
            )


def test_request_and_response_headers_are_documented(document: dict[str, Any]) -> None:
    by_name = operations(document)
    submit = by_name["createGeneration"]
    assert {p["name"] for p in submit["parameters"] if p["in"] == "header"} == {
        "Idempotency-Key",
        "traceparent",
        "X-Correlation-Id",
    }
    accepted = submit["responses"]["202"]["headers"]
    assert accepted["Location"]["required"] is True
    assert accepted["Idempotent-Replayed"]["schema"]["enum"] == ["true"]
    assert {"RateLimit", "RateLimit-Policy", "X-Correlation-Id"} <= set(accepted)
    for name, operation in by_name.items():
        # The correlation id is read, and echoed, on every request.
        assert "X-Correlation-Id" in {p["name"] for p in operation["parameters"]}, name
        for response in operation["responses"].values():
            assert response["headers"]["X-Correlation-Id"]["required"] is True
    assert "Idempotency-Key" not in {p["name"] for p in by_name["getGeneration"]["parameters"]}


def test_times_are_date_times_in_the_document(document: dict[str, Any]) -> None:
    schemas = document["components"]["schemas"]
    for model, field in [
        ("Submission", "created_at"),
        ("Event", "at"),
        ("Attempt", "started_at"),
        ("ApiKey", "revoked_at"),
        ("AdminJobDetail", "not_before"),
        ("AuditEntry", "at"),
        ("UsageReport", "from"),
    ]:
        schema = schemas[model]["properties"][field]
        formats = [schema.get("format")] + [s.get("format") for s in schema.get("anyOf", [])]
        assert "date-time" in formats, (model, field)
    usage = operations(document)["getUsage"]
    assert {p["name"]: p["schema"].get("format") for p in usage["parameters"]}["from"] == (
        "date-time"
    )


def _intake(http_stack: HttpStack, *, sim_scripts: bool) -> Intake:
    """The stack's intake, its catalog serving the stack's provider by its own name."""
    return Intake(
        store=http_stack.store,
        ledger=http_stack.store,
        queue=http_stack.queue,
        tasks=http_stack.tasks,
        control=http_stack.control,
        clock=http_stack.clock,
        idempotency_retention_seconds=60.0,
        catalog=ModelCatalog.serving_own_names([http_stack.provider]),
        sim_scripts=sim_scripts,
    )


@pytest.mark.parametrize("sim_scripts", [False, True])
async def test_the_simulate_block_is_offered_only_where_scripts_are_taken(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
    sim_scripts: bool,
) -> None:
    """No input the document or GET /v1/tasks describes is refused: with scripts off
    (the default) neither offers the sim's simulate block."""
    intake = _intake(http_stack, sim_scripts=sim_scripts)
    app = http_stack.app(intake=intake)
    document = (await http_open_client(app).get("/openapi.json")).json()
    listed = (await http_open_client(app, http_keys.acme).get("/v1/tasks")).json()["data"]

    inputs = [
        schema
        for name, schema in document["components"]["schemas"].items()
        if name.startswith("TaskInput.")
    ]
    assert inputs and len(listed) == len(inputs)
    for schema in inputs + [task["input_schema"] for task in listed]:
        assert ("simulate" in schema["properties"]) is sim_scripts


async def test_the_body_per_task_follows_the_registry_and_the_catalog(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    intake = _intake(http_stack, sim_scripts=False)
    app = http_stack.app(intake=intake)
    document = (await http_open_client(app).get("/openapi.json")).json()
    body = document["paths"]["/v1/generations"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    schemas = document["components"]["schemas"]
    mapping = body["discriminator"]["mapping"]
    assert body["discriminator"]["propertyName"] == "task"
    assert sorted(mapping) == http_stack.tasks.names()
    for task in http_stack.tasks:
        entry = schemas[mapping[task.name].rsplit("/", 1)[-1]]
        assert entry["properties"]["task"]["const"] == task.name
        task_input = schemas[entry["properties"]["input"]["$ref"].rsplit("/", 1)[-1]]
        # Scripts are off here: the sim's simulate block is not offered.
        assert set(task_input["properties"]) == set(task.input_schema["properties"]) - {"simulate"}
        # Only the models this deployment serves can be named.
        assert entry["properties"]["model"]["anyOf"][0]["enum"] == ["sim"]
    # A batch's items are the same bodies, each with its own idempotency_key.
    batch = document["paths"]["/v1/generations/batch"]["post"]["requestBody"]["content"][
        "application/json"
    ]["schema"]
    jobs = batch["properties"]["jobs"]
    assert (jobs["minItems"], jobs["maxItems"]) == (1, 1000)
    items = jobs["items"]["discriminator"]["mapping"]
    assert sorted(items) == http_stack.tasks.names()
    for task in http_stack.tasks:
        item = schemas[items[task.name].rsplit("/", 1)[-1]]
        single = schemas[mapping[task.name].rsplit("/", 1)[-1]]
        assert item["properties"].pop("idempotency_key")["maxLength"] == 255
        assert item["properties"] == single["properties"]


async def test_metrics_are_served_as_text(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    response = await http_open_client(http_stack.app()).get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")


class _References(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.urls += [v for k, v in attrs if k in ("src", "href", "spec-url") and v]


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_the_docs_pages_need_nothing_from_the_internet(
    page: str, http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    app: FastAPI = http_stack.app()
    client = http_open_client(app)
    response = await client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    # No address outside the service: every script, style and icon is served here.
    assert re.findall(r"https?://", response.text) == []
    parser = _References()
    parser.feed(response.text)
    assert len(parser.urls) >= 2
    for url in [*parser.urls, "/openapi.json"]:
        assert url.startswith("/"), url
        asset = await client.get(url)
        assert asset.status_code == 200, url
        assert asset.content
    if page == "/docs":
        assert "/openapi.json" in response.text
        # Swagger UI's validator badge would be fetched from the internet.
        assert '"validatorUrl": null' in response.text


def _fields(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


async def test_the_documented_models_have_exactly_the_fields_served(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    """Responses may carry no field the document leaves out (schemathesis allows
    extra fields, so it would not notice) and lack none it names."""
    app = http_stack.app()
    tenant = http_open_client(app, http_keys.acme)
    admin = http_open_client(app, http_keys.admin)
    submitted = await tenant.post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "p", "simulate": {"script": ["throttle"]}}},
    )
    job_id = submitted.json()["job_id"]
    await http_stack.run_worker()
    history = (await tenant.get(f"/v1/generations/{job_id}/events")).json()
    inspected = (await admin.get(f"/v1/admin/generations/{job_id}/events")).json()
    created = (await admin.post("/v1/admin/keys", json={"tenant": "initech"})).json()
    revoked = (await admin.post(f"/v1/admin/keys/{created['key_id']}/revoke")).json()
    await admin.post("/v1/admin/pause", json={"what": "workers", "reason": "r"})
    usage = (await admin.get("/v1/admin/usage")).json()
    served: list[tuple[dict[str, Any], type[BaseModel]]] = [
        (submitted.json(), schemas.Submission),
        ((await tenant.get(f"/v1/generations/{job_id}")).json(), schemas.Job),
        ((await tenant.get("/v1/generations")).json(), schemas.JobPage),
        (history, schemas.JobHistory),
        (history["events"][0], schemas.Event),
        (history["attempts"][0], schemas.Attempt),
        (inspected, schemas.AdminJobHistory),
        (inspected["job"], schemas.AdminJobDetail),
        (created, schemas.CreatedApiKey),
        (revoked, schemas.RevokedApiKey),
        ((await admin.get("/v1/admin/keys")).json()["data"][0], schemas.ApiKey),
        ((await admin.get("/v1/admin/audit")).json()["data"][0], schemas.AuditEntry),
        (usage, schemas.TenantUsageReport),
        (usage["total"], schemas.UsageFigures),
        ((await tenant.get("/v1/tasks")).json()["data"][0], schemas.TaskInfo),
        ((await admin.get("/v1/admin/dead-letters")).json(), schemas.AdminJobPage),
    ]
    for body, model in served:
        assert set(body) == _fields(model), model.__name__
        model.model_validate(body)  # and the values are what the model says
