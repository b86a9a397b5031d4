"""POST /v1/generations/batch: many submissions in one request, each with its own outcome.

The request is refused whole only for what concerns all of it (authentication, the
rate limit, paused intake, the body's size, an envelope that is not
``{"jobs": [1..1000 items]}``); otherwise the answer is 200 with one entry per item,
in order: the item's job (the 202 body of a single submission, with ``replayed``) or
the problem the item would have got alone. Every accepted item is stored in one
transaction. The rate limit counts the batch by its items.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from ferryman.core.errors import FerrymanError, InvalidRequestError, PausedError, RequestError
from ferryman.http.auth import UnmeteredTenant, app_deps, spend
from ferryman.http.batch_bodies import (
    BATCH_PATH,
    BatchIdempotencyKeyError,
    BatchRequest,
    TooManyItemsError,
    read_batch,
    refuse_idempotency_key_header,
)
from ferryman.http.context import request_info, valid_traceparent
from ferryman.http.error_map import problem_body
from ferryman.http.openapi import TRACEPARENT, Access, operation
from ferryman.http.schemas import BatchResults
from ferryman.http.views import JsonBody, submission_body
from ferryman.services.intake import BatchItem, Submission

router = APIRouter(tags=["generations"])


@router.post(
    BATCH_PATH,
    **operation(
        "createGenerationBatch",
        BatchResults,
        access=Access.TENANT,
        summary="Submit up to 1,000 jobs at once",
        description="One entry per item, in order: its job, or its problem",
        body=BatchRequest,
        errors=(TooManyItemsError, BatchIdempotencyKeyError, PausedError),
        request_headers=(TRACEPARENT,),
    ),
)
async def submit_batch(request: Request, principal: UnmeteredTenant) -> JsonBody:
    deps = app_deps(request)
    try:
        refuse_idempotency_key_header(request)
        items = await read_batch(request, max_item_bytes=deps.max_body_bytes)
    except FerrymanError:
        await spend(request, principal, cost=1)  # a refused body still costs a request
        raise
    await spend(request, principal, cost=len(items))
    valid = [item for item in items if isinstance(item, BatchItem)]
    info = request_info(request)
    # Called even when no item is valid, so paused intake is a 503 whatever the items.
    outcomes = iter(
        await deps.intake.submit_many(
            tenant_id=principal.tenant_id,
            items=valid,
            correlation_id=info.correlation_id,
            traceparent=valid_traceparent(request.headers.get("traceparent")),
        )
    )
    results = []
    for index, item in enumerate(items):
        if not isinstance(item, BatchItem):
            results.append(problem_body(item))
            continue
        outcome = next(outcomes)
        if isinstance(outcome, Submission):
            results.append(submission_body(outcome.job) | {"replayed": outcome.replayed})
        else:
            results.append(problem_body(_located(outcome, index)))
    return JsonBody({"results": results})


def _located(error: RequestError, index: int) -> RequestError:
    """Intake names a field as in a single body (body, input, ...); in a batch it is
    the field of item ``index`` (body, jobs, index, input, ...)."""
    if isinstance(error, InvalidRequestError):
        for detail in error.errors:
            loc = list(detail.get("loc", ()))
            if loc[:1] == ["body"]:
                detail["loc"] = ["body", "jobs", index, *loc[1:]]
    return error
