"""/v1/generations: submit, read (or wait, or follow), list, history, cancel. Always the
caller's tenant's jobs."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

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
from ferryman.http.stream import EVENT_STREAM_HEADERS, event_stream, position_of
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
from ferryman.services.jobs import MAX_WAIT_SECONDS

# GET ...?wait=SECONDS: answer once the job is finished, or with its state after that long.
WaitSeconds = Annotated[
    float | None,
    Query(
        gt=0,
        le=MAX_WAIT_SECONDS,
        description=(
            "Answer as soon as the job is finished (SUCCEEDED, FAILED or CANCELLED), or "
            f"with its current state after this many seconds (more than 0, at most "
            f"{MAX_WAIT_SECONDS:g})."
        ),
    ),
]

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
async def get_job(
    request: Request, principal: Tenant, job_id: str, wait: WaitSeconds = None
) -> JSONResponse:
    jobs = app_deps(request).jobs
    if wait is None:
        view = await jobs.get(principal.tenant_id, job_id)
    else:
        view = await jobs.wait(principal.tenant_id, job_id, wait_seconds=wait)
    return JsonBody(job_detail_body(view))


def _stream_operation() -> dict[str, Any]:
    """The stream's operation: its 200 is text/event-stream, and it may answer 204."""
    kwargs = operation(
        "streamGeneration",
        None,
        access=Access.TENANT,
        params=True,
        summary="Follow a job's status changes (server-sent events)",
        description=(
            "text/event-stream: an `event: status` whose `data` is the job (as GET "
            "returns it) now and at each change of its status, ending after a finished "
            "status; a comment line as a keep-alive every 15 s; the stream ends after "
            "300 s (reconnect with `Last-Event-ID`). 204 when `Last-Event-ID` names the "
            "finished status already sent."
        ),
        errors=(JobNotFoundError, ResultsUnavailableError, ResultUnreadableError),
    )
    responses = kwargs["responses"]
    responses[200]["content"] = {"text/event-stream": {"schema": {"type": "string"}}}
    responses[204] = {
        "description": "The finished status named by Last-Event-ID was sent already",
        "headers": responses[200]["headers"],
    }
    return kwargs


@router.get("/{job_id}/stream", **_stream_operation(), response_class=StreamingResponse)
async def stream_job(
    request: Request,
    principal: Tenant,
    job_id: str,
    last_event_id: Annotated[str | None, Header(max_length=64)] = None,
) -> Response:
    follow = app_deps(request).jobs.follow(
        principal.tenant_id, job_id, after=position_of(last_event_id)
    )
    try:
        # Read before answering: a job that is not the tenant's is a 404, not a stream.
        first = await anext(follow)
    except StopAsyncIteration:
        # Everything up to the finished status was sent: nothing more will come
        # (204 tells an EventSource to stop reconnecting).
        return Response(status_code=204)
    return StreamingResponse(
        event_stream(first, follow),
        media_type="text/event-stream",
        headers=EVENT_STREAM_HEADERS,
    )


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
