"""/v1/admin: the operations API, for admin keys only (others get 403)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse

from ferryman.core.errors import DeadLetterNotFoundError, InvalidRequestError
from ferryman.http.auth import Admin, app_deps
from ferryman.http.bodies import PurgeLettersRequest, ReplayRequest, SwitchRequest, read_body
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import (
    AdminJobPage,
    AuditPage,
    PausedState,
    PurgedLetters,
    ReplayReport,
    UndecodableLetterPage,
)
from ferryman.http.schemas import UndecodableLetter as UndecodableLetterSchema
from ferryman.http.views import Cursor, admin_job_body, audit_body, undecodable_letter_body
from ferryman.services.operations import LETTER_CURSOR_PATTERN

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
    operations = app_deps(request).operations
    page = await operations.dead_letters(limit=limit, cursor=cursor)
    stats = await operations.queue_stats()
    return JSONResponse(
        {
            "data": [admin_job_body(job) for job in page.jobs],
            "next_cursor": page.next_cursor,
            "undecodable_letters": stats.undecodable_letters,
        }
    )


@router.get(
    "/dead-letters/undecodable",
    **operation(
        "listUndecodableLetters",
        UndecodableLetterPage,
        access=Access.ADMIN,
        params=True,
        summary="Dead letters no worker can read",
        errors=(InvalidRequestError,),
    ),
)
async def undecodable_letters(
    request: Request,
    principal: Admin,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[
        str | None,
        Query(pattern=LETTER_CURSOR_PATTERN, description="The next_cursor of the previous page."),
    ] = None,
) -> JSONResponse:
    """Messages whose body names no job, oldest first: nothing was failed for them."""
    page = await app_deps(request).operations.undecodable_letters(limit=limit, cursor=cursor)
    return JSONResponse(
        {
            "data": [undecodable_letter_body(letter) for letter in page.letters],
            "next_cursor": page.next_cursor,
        }
    )


@router.get(
    "/dead-letters/undecodable/{dead_letter_id}",
    **operation(
        "getUndecodableLetter",
        UndecodableLetterSchema,
        access=Access.ADMIN,
        params=True,
        summary="One dead letter no worker can read, with its body",
        errors=(DeadLetterNotFoundError,),
    ),
)
async def undecodable_letter(
    request: Request, principal: Admin, dead_letter_id: Annotated[str, Path(max_length=128)]
) -> JSONResponse:
    letter = await app_deps(request).operations.undecodable_letter(dead_letter_id)
    return JSONResponse(undecodable_letter_body(letter, whole=True))


@router.post(
    "/dead-letters/undecodable/purge",
    **operation(
        "purgeUndecodableLetters",
        PurgedLetters,
        access=Access.ADMIN,
        body=PurgeLettersRequest,
        summary="Delete dead letters no worker can read",
    ),
)
async def purge_undecodable(request: Request, principal: Admin) -> JSONResponse:
    body = await read_body(request, PurgeLettersRequest)
    report = await app_deps(request).operations.purge_undecodable(
        body.dead_letter_ids, actor=principal.key_id, reason=body.reason
    )
    return JSONResponse({"purged": report.purged, "not_found": report.not_found})


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


MAX_RECORD_ID = 2**63 - 1


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
    # An audit record's id is a 64-bit integer in every engine: a larger one is a 422,
    # never a driver's overflow.
    before: Annotated[int | None, Query(ge=1, le=MAX_RECORD_ID)] = None,
) -> JSONResponse:
    """Who paused, resumed or replayed what, when and why; newest first."""
    records = await app_deps(request).operations.audit_log(limit=limit, before=before)
    return JSONResponse(
        {
            "data": [audit_body(record) for record in records],
            "next_before": records[-1].record_id if len(records) == limit else None,
        }
    )
