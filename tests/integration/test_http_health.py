"""Health, readiness, metrics; the error renderer's edges; the request log line."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest
import structlog

from ferryman.core.errors import StoreUnavailableError
from ferryman.http.app import create_app
from ferryman.observability import metrics
from ferryman.observability.logging import (
    configure_logging,
    flush_logs,
    get_logger,
    reset_logging,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    import httpx
    from tests.integration.conftest import HttpKeys, HttpStack, ProblemCheck


class BrokenOperations:
    """Operations whose store raises something nobody expected."""

    async def readiness(self) -> None:
        raise RuntimeError("secret internal detail: password=hunter2")


async def test_healthz_needs_no_key(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    response = await http_open_client(http_stack.app()).get("/healthz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


async def test_readyz_when_the_store_answers(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    response = await http_open_client(http_stack.app()).get("/readyz")

    assert response.status_code == 200
    assert response.json()["checks"] == {"store": {"ok": True}, "queue": {"ok": True}}


async def test_readyz_is_503_when_the_store_is_unreachable(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    client = http_open_client(http_stack.app())
    await http_stack.db.close()

    response = await client.get("/readyz")

    http_problem(response, 503, "not_ready")
    assert response.headers["Retry-After"] == "5"
    checks = response.json()["checks"]
    assert checks["store"]["ok"] is False and checks["queue"]["ok"] is False
    assert "closed" in checks["store"]["detail"]
    assert (await client.get("/healthz")).status_code == 200


async def test_readyz_is_503_while_writes_fail_though_reads_work(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
    sqlite_outage: Callable[[str, int], sqlite3.OperationalError],
) -> None:
    """A locked or full database still answers reads: ready means a write goes through."""

    def refuse(conn: sqlite3.Connection) -> None:
        raise sqlite_outage("database or disk is full", sqlite3.SQLITE_FULL)

    with pytest.raises(StoreUnavailableError):
        await http_stack.db.write(refuse)

    response = await http_open_client(http_stack.app()).get("/readyz")

    http_problem(response, 503, "not_ready")
    checks = response.json()["checks"]
    assert checks["store"] == {"ok": False, "detail": checks["store"]["detail"]}
    assert "disk is full" in checks["store"]["detail"]
    assert checks["queue"]["ok"] is True


async def test_readyz_follows_the_store_back_as_soon_as_work_is_written_again(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_keys: HttpKeys,
    sqlite_outage: Callable[[str, int], sqlite3.OperationalError],
) -> None:
    """A lock that cleared: ready again at the next write of work, not 10 s later.
    The probe's own small write is not that proof (a nearly full disk takes it)."""

    def refuse(conn: sqlite3.Connection) -> None:
        raise sqlite_outage("database is locked", sqlite3.SQLITE_BUSY)

    client = http_open_client(http_stack.app())
    with pytest.raises(StoreUnavailableError):
        await http_stack.db.write(refuse)
    assert (await client.get("/readyz")).status_code == 503
    assert (await client.get("/readyz")).status_code == 503  # its probe proved nothing

    submitted = await client.post(
        "/v1/generations",
        json={"task": "generate", "input": {"prompt": "hi"}},
        headers={"Authorization": f"Bearer {http_keys.acme}"},
    )

    assert submitted.status_code == 202
    response = await client.get("/readyz")
    assert response.status_code == 200, response.json()


async def test_metrics_exposes_queue_and_job_series(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    await http_client.post("/v1/generations", json={"task": "generate", "input": {"prompt": "a"}})
    await http_client.post("/v1/generations", json={"task": "generate", "input": {"prompt": "b"}})

    response = await http_open_client(http_stack.app()).get("/metrics")

    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    text = response.text
    for name in (
        "ferryman_jobs_accepted_total",
        "ferryman_queue_depth",
        "ferryman_dead_letter_queue_depth",
        "ferryman_undecodable_dead_letters",
        "ferryman_in_flight",
        "ferryman_oldest_message_age_seconds",
    ):
        assert f"\n{name}" in text, name
    # The gauges were refreshed from this stack's queue just now.
    assert 'ferryman_queue_depth{state="visible"} 2.0' in text
    assert 'ferryman_queue_depth{state="in_flight"} 0.0' in text
    assert "\nferryman_dead_letter_queue_depth 0.0" in text
    # /metrics needs no key: by default no series names a tenant.
    assert 'ferryman_jobs_accepted_total{task="generate",tenant=""}' in text
    assert "acme" not in text


async def test_per_tenant_series_are_an_operator_opt_in(
    http_client: httpx.AsyncClient,
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    metrics.configure(tenant_labels=True)
    try:
        await http_client.post(
            "/v1/generations", json={"task": "generate", "input": {"prompt": "a"}}
        )
        text = (await http_open_client(http_stack.app()).get("/metrics")).text
    finally:
        metrics.configure(tenant_labels=False)
    assert 'ferryman_jobs_accepted_total{task="generate",tenant="acme"}' in text


async def test_metrics_still_answers_when_the_store_is_down(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    client = http_open_client(http_stack.app())
    await http_stack.db.close()

    response = await client.get("/metrics")

    assert response.status_code == 200
    assert "ferryman_in_flight" in response.text


async def test_unknown_route_is_a_404_problem(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    http_problem(await http_client.get("/v1/nothing-here"), 404, "not_found")


async def test_wrong_method_is_a_405_problem(
    http_client: httpx.AsyncClient, http_problem: ProblemCheck
) -> None:
    response = await http_client.delete("/v1/generations")

    http_problem(response, 405, "method_not_allowed")
    assert "POST" in response.headers["Allow"]


async def test_an_unexpected_error_is_a_bare_500(
    http_stack: HttpStack,
    http_open_client: Callable[..., httpx.AsyncClient],
    http_problem: ProblemCheck,
) -> None:
    deps = dataclasses.replace(http_stack.deps(), operations=BrokenOperations())  # type: ignore[arg-type]
    client = http_open_client(create_app(deps))

    with structlog.testing.capture_logs() as logs:
        response = await client.get("/readyz")

    http_problem(response, 500, "internal_error")
    assert "hunter2" not in response.text
    assert "RuntimeError" not in response.text
    assert any(entry["event"] == "unhandled error" for entry in logs)


async def test_one_log_line_per_request_with_identifiers_only(
    http_stack: HttpStack,
    http_keys: HttpKeys,
    http_open_client: Callable[..., httpx.AsyncClient],
) -> None:
    client = http_open_client(http_stack.app(), http_keys.acme)
    body: dict[str, Any] = {"task": "generate", "input": {"prompt": "my secret prompt"}}

    with structlog.testing.capture_logs() as logs:
        created = await client.post(
            "/v1/generations", json=body, headers={"X-Correlation-Id": "corr-1"}
        )
        job_id = created.json()["job_id"]
        await client.get(f"/v1/generations/{job_id}")

    lines = [entry for entry in logs if entry["event"] == "request"]
    assert len(lines) == 2
    post, get = lines
    assert post["method"] == "POST"
    assert post["route"] == "/v1/generations"
    assert post["status"] == 202
    assert post["tenant_id"] == "acme"
    assert post["correlation_id"] == "corr-1"
    assert post["job_id"] == job_id
    assert isinstance(post["duration_ms"], float)
    assert get["route"] == "/v1/generations/{job_id}"
    assert get["job_id"] == job_id
    assert "my secret prompt" not in repr(logs)


def test_configure_logging_filters_by_level_and_writes_json_to_stderr(
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = get_logger("ferryman.test")  # made before configuring, like a module's logger
    try:
        configure_logging("warning", json=True)
        log.info("quiet", job_id="gen_1")
        log.warning("loud", job_id="gen_2")
        assert flush_logs()
    finally:
        reset_logging()

    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    entry = json.loads(line)
    assert entry["event"] == "loud"
    assert entry["job_id"] == "gen_2"
    assert entry["component"] == "ferryman.test"
    assert entry["level"] == "warning"


def test_configure_logging_refuses_an_unknown_level() -> None:
    with pytest.raises(ValueError, match="unknown log level"):
        configure_logging("loud")


async def test_the_openapi_document_lists_every_route(
    http_stack: HttpStack, http_open_client: Callable[..., httpx.AsyncClient]
) -> None:
    with structlog.testing.capture_logs() as logs:
        response = await http_open_client(http_stack.app()).get("/openapi.json")

    assert response.status_code == 200
    paths = response.json()["paths"]
    assert {
        "/v1/generations",
        "/v1/generations/{job_id}",
        "/v1/generations/{job_id}/events",
        "/v1/generations/{job_id}/cancel",
        "/v1/admin/dead-letters",
        "/v1/admin/dead-letters/replay",
        "/v1/admin/pause",
        "/v1/admin/resume",
        "/healthz",
        "/readyz",
        "/metrics",
    } <= set(paths)
    assert "/v1/tasks" in paths
    body_schema = paths["/v1/generations"]["post"]["requestBody"]["content"]["application/json"]
    components = response.json()["components"]["schemas"]
    for entry in body_schema["schema"]["oneOf"]:  # one per task (test_http_tasks.py)
        properties = components[entry["$ref"].rsplit("/", 1)[-1]]["properties"]
        assert set(properties) == {"task", "input", "model", "metadata", "webhook_url"}
    assert [entry["route"] for entry in logs if entry["event"] == "request"] == ["/openapi.json"]
