"""Liveness, readiness and Prometheus metrics: no authentication (API.md)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from ferryman.core.errors import StoreUnavailableError
from ferryman.http.auth import app_deps
from ferryman.observability import metrics

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> JSONResponse:
    return JSONResponse({"status": "ok"})


@router.get("/readyz")
async def readyz(request: Request) -> JSONResponse:
    await app_deps(request).operations.check_ready()
    return JSONResponse({"status": "ready"})


@router.get("/metrics")
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
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
