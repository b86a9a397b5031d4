"""/v1/generations: submit, read, list, history, cancel. Always the caller's tenant's jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse

from ferryman.core.errors import (
    AlreadyTerminalError,
    BacklogQuotaExceededError,
    IdempotencyKeyMismatchError,
    InvalidIdempotencyKeyError,
    JobNotFoundError,
    PausedError,
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
    StorageQuotaExceededError,
    WebhookSecretRequiredError,
    WebhookUrlRefusedError,
)
from ferryman.core.job import JobStatus
from ferryman.http.auth import Tenant, app_deps, authenticate
from ferryman.http.bodies import GenerationRequest, read_body
from ferryman.http.context import request_info, valid_traceparent
from ferryman.http.openapi import (
    IDEMPOTENCY_KEY,
    IDEMPOTENT_REPLAYED,
    LOCATION,
    TRACEPARENT,
    Access,
    operation,
)
from ferryman.http.schemas import Job, JobHistory, JobPage, Submission
from ferryman.http.views import (
    Cursor,
    JobIds,
    JsonBody,
    SubmittedBody,
    attempt_body,
    event_body,
    job_body,
    job_detail_body,
    list_item_body,
)
from ferryman.services.intake import SubmitRequest

router = APIRouter(prefix="/v1/generations", tags=["generations"])


@router.post(
    "",
    **operation(
        "createGeneration",
        Submission,
        access=Access.TENANT,
        status=202,
        summary="Submit a job",
        body=GenerationRequest,
        errors=(
            InvalidIdempotencyKeyError,
            IdempotencyKeyMismatchError,
            WebhookUrlRefusedError,
            WebhookSecretRequiredError,
            BacklogQuotaExceededError,
            StorageQuotaExceededError,
            PausedError,
        ),
        request_headers=(IDEMPOTENCY_KEY, TRACEPARENT),
        response_headers=LOCATION | IDEMPOTENT_REPLAYED,
        authenticates_itself=True,
    ),
)
async def submit(request: Request) -> JSONResponse:
    # The hot path: authenticated here rather than by the Tenant dependency, whose
    # solving by FastAPI cost more than the check itself (docs/benchmarks.md).
    principal = await authenticate(request)
    body = await read_body(request, GenerationRequest)
    info = request_info(request)
    submission = await app_deps(request).intake.submit(
        tenant_id=principal.tenant_id,
        request=SubmitRequest(
            task=body.task,
            input=body.input,
            model=body.model,
            metadata=body.metadata,
            webhook_url=body.webhook_url,
        ),
        idempotency_key=request.headers.get("idempotency-key"),
        correlation_id=info.correlation_id,
        traceparent=valid_traceparent(request.headers.get("traceparent")),
    )
    job = submission.job
    info.job_id = job.job_id
    return SubmittedBody(job, replayed=submission.replayed)


@router.get(
    "",
    **operation("listGenerations", JobPage, access=Access.TENANT, params=True, summary="List jobs"),
)
async def list_jobs(
    request: Request,
    principal: Tenant,
    status: JobStatus | None = None,
    task: Annotated[str | None, Query(max_length=128)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Cursor = None,
    job_id: JobIds = None,
) -> JSONResponse:
    page = await app_deps(request).jobs.list(
        principal.tenant_id, status=status, task=task, job_ids=job_id, limit=limit, cursor=cursor
    )
    return JsonBody(
        {
            "data": [list_item_body(item) for item in page.items],
            "next_cursor": page.next_cursor,
        }
    )


@router.get(
    "/{job_id}",
    **operation(
        "getGeneration",
        Job,
        access=Access.TENANT,
        params=True,
        summary="Read a job",
        errors=(JobNotFoundError, ResultsUnavailableError, ResultUnreadableError),
    ),
)
async def get_job(request: Request, principal: Tenant, job_id: str) -> JSONResponse:
    view = await app_deps(request).jobs.get(principal.tenant_id, job_id)
    return JsonBody(job_detail_body(view))


@router.get(
    "/{job_id}/events",
    **operation(
        "listGenerationEvents",
        JobHistory,
        access=Access.TENANT,
        params=True,
        summary="A job's events and attempts",
        errors=(JobNotFoundError,),
    ),
)
async def job_events(request: Request, principal: Tenant, job_id: str) -> JSONResponse:
    events, attempts = await app_deps(request).jobs.history(principal.tenant_id, job_id)
    return JsonBody(
        {
            "events": [event_body(event) for event in events],
            "attempts": [attempt_body(attempt) for attempt in attempts],
        }
    )


@router.post(
    "/{job_id}/cancel",
    **operation(
        "cancelGeneration",
        Job,
        access=Access.TENANT,
        params=True,
        summary="Cancel a job",
        errors=(JobNotFoundError, AlreadyTerminalError, StateConflictError),
    ),
)
async def cancel_job(request: Request, principal: Tenant, job_id: str) -> JSONResponse:
    job = await app_deps(request).jobs.cancel(principal.tenant_id, job_id)
    # A job that can still be cancelled has not succeeded, so it has no result.
    return JSONResponse(job_body(job))
