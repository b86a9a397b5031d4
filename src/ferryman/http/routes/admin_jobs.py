"""/v1/admin/generations: any tenant's job as an operator inspects it (admin keys only).

The operator's view keeps what tenants do not see (which tenant, which worker, where
the result is stored) and leaves out what is the tenant's alone (input and output).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ferryman.core.errors import JobNotFoundError
from ferryman.http.auth import Admin, app_deps
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import AdminJobDetail, AdminJobHistory
from ferryman.http.views import JsonBody, admin_job_detail, attempt_body, event_body

router = APIRouter(prefix="/v1/admin/generations", tags=["operations"])


@router.get(
    "/{job_id}",
    **operation(
        "inspectGeneration",
        AdminJobDetail,
        access=Access.ADMIN,
        params=True,
        summary="Any tenant's job, as an operator sees it",
        errors=(JobNotFoundError,),
    ),
)
async def inspect_job(request: Request, principal: Admin, job_id: str) -> JSONResponse:
    job = await app_deps(request).jobs.inspect(job_id)
    return JsonBody(admin_job_detail(job))


@router.get(
    "/{job_id}/events",
    **operation(
        "inspectGenerationEvents",
        AdminJobHistory,
        access=Access.ADMIN,
        params=True,
        summary="Any tenant's job with its events and attempts",
        errors=(JobNotFoundError,),
    ),
)
async def inspect_job_events(request: Request, principal: Admin, job_id: str) -> JSONResponse:
    job, events, attempts = await app_deps(request).jobs.inspect_history(job_id)
    return JsonBody(
        {
            "job": admin_job_detail(job),
            "events": [event_body(event, internals=True) for event in events],
            "attempts": [attempt_body(attempt, internals=True) for attempt in attempts],
        }
    )
