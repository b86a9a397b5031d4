"""/v1/admin: the operations API, for admin keys only (others get 403)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from ferryman.http.auth import Admin, app_deps
from ferryman.http.bodies import ReplayRequest, SwitchRequest, read_body
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import AdminJobPage, AuditPage, PausedState, ReplayReport
from ferryman.http.views import Cursor, admin_job_body, audit_body

router = APIRouter(prefix="/v1/admin", tags=["operations"])


@router.get(
    "/dead-letters",
    **operation(
        "listDeadLetters",
        AdminJobPage,
        access=Access.ADMIN,
        params=True,
        summary="Dead-lettered jobs, across tenants",
    ),
)
async def dead_letters(
    request: Request,
    principal: Admin,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
) -> JSONResponse:
    page = await app_deps(request).operations.dead_letters(limit=limit, cursor=cursor)
    return JSONResponse(
        {"data": [admin_job_body(job) for job in page.jobs], "next_cursor": page.next_cursor}
    )


@router.post(
    "/dead-letters/replay",
    **operation(
        "replayDeadLetters",
        ReplayReport,
        access=Access.ADMIN,
        body=ReplayRequest,
        summary="Replay dead-lettered jobs",
    ),
)
async def replay(request: Request, principal: Admin) -> JSONResponse:
    body = await read_body(request, ReplayRequest)
    report = await app_deps(request).operations.replay(
        body.job_ids,
        actor=principal.key_id,
        reason=body.reason,
        include_failed=body.include_failed,
    )
    return JSONResponse(
        {
            "replayed": report.replayed,
            "skipped": [{"job_id": job_id, "reason": why} for job_id, why in report.skipped],
        }
    )


@router.post(
    "/pause",
    **operation(
        "pauseWork",
        PausedState,
        access=Access.ADMIN,
        body=SwitchRequest,
        summary="Pause intake, workers or a provider",
    ),
)
async def pause(request: Request, principal: Admin) -> JSONResponse:
    return await _set_switch(request, principal.key_id, paused=True)


@router.post(
    "/resume",
    **operation(
        "resumeWork",
        PausedState,
        access=Access.ADMIN,
        body=SwitchRequest,
        summary="Resume intake, workers or a provider",
    ),
)
async def resume(request: Request, principal: Admin) -> JSONResponse:
    return await _set_switch(request, principal.key_id, paused=False)


async def _set_switch(request: Request, actor: str, *, paused: bool) -> JSONResponse:
    body = await read_body(request, SwitchRequest)
    operations = app_deps(request).operations
    if body.switch is None:
        assert body.provider is not None
        await operations.set_provider_paused(body.provider, paused, actor=actor, reason=body.reason)
    else:
        await operations.set_paused(body.switch, paused, actor=actor, reason=body.reason)
    return JSONResponse({"paused": await operations.paused_names()})


@router.get(
    "/audit",
    **operation(
        "listAuditRecords", AuditPage, access=Access.ADMIN, params=True, summary="The audit log"
    ),
)
async def audit(
    request: Request,
    principal: Admin,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    before: Annotated[int | None, Query(ge=1)] = None,
) -> JSONResponse:
    """Who paused, resumed or replayed what, when and why; newest first."""
    records = await app_deps(request).operations.audit_log(limit=limit, before=before)
    return JSONResponse(
        {
            "data": [audit_body(record) for record in records],
            "next_before": records[-1].record_id if len(records) == limit else None,
        }
    )
