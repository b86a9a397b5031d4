"""Liveness, readiness and Prometheus metrics: no authentication (docs/reference.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ferryman.core.errors import StoreUnavailableError
from ferryman.http.auth import app_deps
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE, PROBLEM_TYPE_BASE
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import Health, Readiness
from ferryman.observability import metrics

router = APIRouter(tags=["health"])


@router.get("/healthz", **operation("healthz", Health, access=Access.PUBLIC, summary="Liveness"))
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


# How soon a load balancer should ask again after a 503.
NOT_READY_RETRY_AFTER_SECONDS = 5


@router.get(
    "/readyz",
    **operation(
        "readyz",
        Readiness,
        access=Access.PUBLIC,
        summary="Readiness: store, queue and result store reachable",
        errors=(StoreUnavailableError,),
    ),
)
async def readyz(request: Request) -> JSONResponse:
    """200 when every dependency works now; 503 problem+json naming each one otherwise."""
    checks = await app_deps(request).operations.readiness()
    report = {
        check.name: {"ok": check.ok, **({"detail": check.detail} if check.detail else {})}
        for check in checks
    }
    if all(check.ok for check in checks):
        return JSONResponse({"status": "ready", "checks": report})
    failing = ", ".join(check.name for check in checks if not check.ok)
    problem = {
        "type": PROBLEM_TYPE_BASE + "not_ready",
        "title": "Not ready",
        "status": 503,
        "detail": f"not ready: {failing}",
        "code": "not_ready",
        "checks": report,
    }
    return JSONResponse(
        problem,
        status_code=503,
        headers={"Retry-After": str(NOT_READY_RETRY_AFTER_SECONDS)},
        media_type=PROBLEM_MEDIA_TYPE,
    )


@router.get(
    "/metrics",
    **operation(
        "metrics",
        None,
        access=Access.PUBLIC,
        summary="Prometheus metrics",
        description="The Prometheus text exposition format (text/plain).",
    ),
    response_class=PlainTextResponse,
)
async def metrics_text(request: Request) -> Response:
    try:
        stats = await app_deps(request).operations.queue_stats()
    except StoreUnavailableError:
        # Serve the counters anyway: a scrape that fails hides everything else too.
        pass
    else:
        metrics.QUEUE_DEPTH.labels(state="visible").set(stats.visible)
        metrics.QUEUE_DEPTH.labels(state="in_flight").set(stats.in_flight)
        metrics.OLDEST_MESSAGE_AGE.set(stats.oldest_age_seconds)
        metrics.DLQ_DEPTH.set(stats.dead_letters)
        metrics.UNDECODABLE_DEAD_LETTERS.set(stats.undecodable_letters)
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
