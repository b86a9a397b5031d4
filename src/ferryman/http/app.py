"""The FastAPI application factory: services in, ASGI app out.

The app holds no process-wide state of its own beyond what ``AppDeps`` hands it
(and a rate limiter built from it), needs no lifespan to work, and can be built
any number of times in one process (tests build one per case).

Middleware, outermost first: the access log (which also turns an unexpected
exception into a bare 500 problem, and adds the headers every response carries),
then the body limits (size and time), then the submit route's way around the router
(http/hot_path.py), then the routes.

The API's documentation needs nothing from the internet: /openapi.json is the
document, and /docs (Swagger UI) and /redoc (ReDoc) load their scripts and styles
from the app itself (``fastapi-offline`` ships them), not from a CDN, so they work
on a closed network.

Trailing slashes are not redirected: Starlette's redirect builds an absolute URL
from the request's Host header, which a caller controls. ``/v1/generations/`` is
a 404 problem like any other unknown path.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from fastapi_offline import FastAPIOffline
from starlette.middleware import Middleware

from ferryman.http.access_log import AccessLogMiddleware
from ferryman.http.batch_bodies import BATCH_PATH, DEFAULT_BATCH_TURNS, BatchParser
from ferryman.http.body_limit import BodyLimitMiddleware
from ferryman.http.error_map import install_error_handlers
from ferryman.http.hot_path import SubmitHotPath
from ferryman.http.openapi import install_openapi
from ferryman.http.rate_lease import LeasedBudgets
from ferryman.http.rate_limit import Budget, Policy, TenantBudgets
from ferryman.http.routes import (
    admin,
    admin_jobs,
    batch,
    health,
    jobs,
    keys,
    tasks,
    usage,
    webhooks,
)

if TYPE_CHECKING:
    from fastapi import FastAPI

    from ferryman.core.clock import Clock
    from ferryman.ports.limits import SharedLimits
    from ferryman.services.access import ApiKeys
    from ferryman.services.intake import Intake
    from ferryman.services.jobs import JobQueries
    from ferryman.services.operations import Operations
    from ferryman.services.usage import UsageReports
    from ferryman.services.webhooks import WebhookSecrets
    from ferryman.tasks import TaskRegistry

DEFAULT_MAX_BODY_BYTES = 262_144
# A batch of up to 1,000 jobs is one body, read whole before any item is looked at:
# 16 MiB fits 1,000 ordinary prompts (16 KiB each on average) while bounding the memory
# one request can hold. Each item is still held to max_body_bytes on its own.
DEFAULT_MAX_BATCH_BODY_BYTES = 16 * 1024 * 1024
DEFAULT_BODY_TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True, slots=True)
class AppDeps:
    intake: Intake
    jobs: JobQueries
    operations: Operations
    api_keys: ApiKeys
    usage: UsageReports
    clock: Clock
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_batch_body_bytes: int = DEFAULT_MAX_BATCH_BODY_BYTES
    # How long a request body may take to arrive once its headers are in (408 after).
    body_timeout_seconds: float = DEFAULT_BODY_TIMEOUT_SECONDS
    # Batches between reading their jobs and storing them at once (http/batch_bodies.py).
    batch_turns: int = DEFAULT_BATCH_TURNS
    # Per-tenant budgets (http/rate_limit.py), requests per second with bursts;
    # a rate of 0 turns that budget off. Submissions and cancels spend the first,
    # reads the second. The defaults are Settings' (a test holds them equal).
    tenant_rate_per_second: float = 5000.0
    tenant_burst: int = 100
    tenant_read_rate_per_second: float = 200.0
    tenant_read_burst: int = 400
    # The registry intake validates against: GET /v1/tasks lists it and the OpenAPI
    # document describes each task's body. None leaves both out.
    tasks: TaskRegistry | None = None
    # Where the per-tenant budgets live when many API processes must share them (the
    # engine's, on PostgreSQL); None keeps them in this process (http/rate_limit.py).
    shared_limits: SharedLimits | None = None
    # Webhook signing secrets (POST /v1/webhooks/secret); None: webhooks not offered.
    webhook_secrets: WebhookSecrets | None = None

    def __post_init__(self) -> None:
        if self.max_body_bytes < 1 or self.max_batch_body_bytes < 1:
            raise ValueError("max_body_bytes and max_batch_body_bytes must be positive")
        if self.body_timeout_seconds <= 0:
            raise ValueError("body_timeout_seconds must be positive")
        self.budget_policies()  # refuses negative rates and empty bursts

    def budget_policies(self) -> dict[Budget, Policy]:
        given = (
            (Budget.SUBMIT, self.tenant_rate_per_second, self.tenant_burst),
            (Budget.READ, self.tenant_read_rate_per_second, self.tenant_read_burst),
        )
        policies: dict[Budget, Policy] = {}
        for budget, rate, burst in given:
            if rate < 0:
                raise ValueError(f"the {budget} rate cannot be negative (0 turns it off)")
            if rate > 0:
                policies[budget] = Policy(budget, rate, burst)
        return policies


# Swagger UI and ReDoc assets, served by the app itself (see the module docstring).
DOCS_ASSETS_PATH = "/docs/assets"


def create_app(deps: AppDeps) -> FastAPI:
    app = FastAPIOffline(
        static_url=DOCS_ASSETS_PATH,
        # Swagger UI would show a badge fetched from validator.swagger.io: not offline.
        swagger_ui_parameters={"validatorUrl": None},
        title="ferryman",
        summary="Durable jobs for slow, costly foundation-model calls.",
        version="0.1.0",
        redirect_slashes=False,
        middleware=[
            Middleware(AccessLogMiddleware),
            Middleware(
                BodyLimitMiddleware,
                max_body_bytes=deps.max_body_bytes,
                timeout_seconds=deps.body_timeout_seconds,
                path_limits={BATCH_PATH: deps.max_batch_body_bytes},
            ),
            Middleware(SubmitHotPath),
        ],
    )
    app.state.deps = deps
    app.state.budgets = (
        TenantBudgets(deps.budget_policies())
        if deps.shared_limits is None
        else LeasedBudgets(deps.budget_policies(), deps.shared_limits)
    )
    app.state.batch_parser = BatchParser(at_once=deps.batch_turns)
    install_error_handlers(app)
    app.include_router(batch.router)
    app.include_router(jobs.router)
    app.include_router(admin.router)
    app.include_router(admin_jobs.router)
    app.include_router(keys.router)
    app.include_router(usage.router)
    app.include_router(health.router)
    app.include_router(webhooks.router)
    tasks.install(app, deps.tasks, sim_scripts=deps.intake.sim_scripts)
    install_openapi(
        app,
        deps.tasks,
        models=lambda: deps.intake.model_names(),
        sim_scripts=deps.intake.sim_scripts,
    )
    return app
