"""The FastAPI application factory: services in, ASGI app out.

The app holds no process-wide state of its own beyond what ``AppDeps`` hands it
(and a rate limiter built from it), needs no lifespan to work, and can be built
any number of times in one process (tests build one per case).

Middleware, outermost first: the access log (which also turns an unexpected
exception into a bare 500 problem), then the body limit, then the routes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi import FastAPI
from starlette.middleware import Middleware

from ferryman.core.ratelimit import KeyedRateLimiter
from ferryman.http.access_log import AccessLogMiddleware
from ferryman.http.body_limit import BodyLimitMiddleware
from ferryman.http.error_map import install_error_handlers
from ferryman.http.routes import admin, health, jobs, keys

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.services.access import ApiKeys
    from ferryman.services.intake import Intake
    from ferryman.services.jobs import JobQueries
    from ferryman.services.operations import Operations

DEFAULT_MAX_BODY_BYTES = 262_144


@dataclass(frozen=True, slots=True)
class AppDeps:
    intake: Intake
    jobs: JobQueries
    operations: Operations
    api_keys: ApiKeys
    clock: Clock
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    # Requests per second per tenant, with bursts of tenant_burst; 0 turns it off.
    tenant_rate_per_second: float = 0.0
    tenant_burst: int = 20

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1:
            raise ValueError("max_body_bytes must be positive")
        if self.tenant_rate_per_second < 0:
            raise ValueError("tenant_rate_per_second cannot be negative (0 turns it off)")
        if self.tenant_rate_per_second > 0 and self.tenant_burst < 1:
            raise ValueError("tenant_burst must be at least 1")


def create_app(deps: AppDeps) -> FastAPI:
    app = FastAPI(
        title="ferryman",
        summary="Durable jobs for slow, costly foundation-model calls.",
        version="0.1.0",
        middleware=[
            Middleware(AccessLogMiddleware),
            Middleware(BodyLimitMiddleware, max_body_bytes=deps.max_body_bytes),
        ],
    )
    app.state.deps = deps
    app.state.rate_limiter = (
        KeyedRateLimiter(deps.tenant_rate_per_second, deps.tenant_burst)
        if deps.tenant_rate_per_second > 0
        else None
    )
    install_error_handlers(app)
    app.include_router(jobs.router)
    app.include_router(admin.router)
    app.include_router(keys.router)
    app.include_router(health.router)
    return app
