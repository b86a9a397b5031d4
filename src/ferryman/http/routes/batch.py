"""POST /v1/generations/batch: many submissions in one request, each with its own outcome.

The request is refused whole only for what concerns all of it (authentication, the
rate limit, paused intake, the body's size, an envelope that is not
``{"jobs": [1..1000 items]}``, an Idempotency-Key header); otherwise the answer is
200 with one entry per item, in order: the item's job (the 202 body of a single
submission, with ``replayed``) or the problem the item would have got alone, and
``atomic_chunk_size``: the items were stored in consecutive all-or-nothing chunks of
at most that many (services/intake.py; the engine's ``max_atomic_batch``).

The body is parsed off the event loop (http/batch_bodies.py), and its jobs stored,
within one of the process's few batch turns: a batch waiting for its turn holds only
its bytes. The rate limit charges a batch by its size, in two steps: once its bytes
are in and before they are parsed, one token per ``max_body_bytes`` of body (at least
one: what the same bytes sent as single submissions would cost), so a tenant out of
budget makes the server parse nothing; once parsed, one token per job beyond those,
judged with what was paid. A batch refused after that (its envelope, too many jobs,
the rate limit) keeps what it paid: parsing it cost the server that much.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request

from ferryman.core.errors import (
    FerrymanError,
    InvalidRequestError,
    PausedError,
    PayloadTooLargeError,
    RequestError,
)
from ferryman.http.auth import UnmeteredTenant, app_deps, spend
from ferryman.http.batch_bodies import (
    BATCH_PATH,
    BatchIdempotencyKeyError,
    BatchRequest,
    TooManyItemsError,
    refuse_idempotency_key_header,
)
from ferryman.http.bodies import refuse_non_json
from ferryman.http.context import request_info, valid_traceparent
from ferryman.http.error_map import problem_body
from ferryman.http.openapi import TRACEPARENT, Access, operation
from ferryman.http.schemas import BatchResults
from ferryman.http.views import JsonBody, submission_body
from ferryman.services.intake import BatchItem, Submission

if TYPE_CHECKING:
    from ferryman.http.app import AppDeps
    from ferryman.http.batch_bodies import BatchParser
    from ferryman.services.access import Principal

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
    raw = await _body(request, principal, deps)
    paid = size_cost(len(raw), max_body_bytes=deps.max_body_bytes)
    await spend(request, principal, cost=paid)  # before any parsing (see the docstring)
    parser: BatchParser = request.app.state.batch_parser
    async with parser.turn():
        items = await parser.parse(raw, max_item_bytes=deps.max_body_bytes)
        del raw  # the jobs are read: the bytes need not wait for them to be stored
        if len(items) > paid:
            await spend(request, principal, cost=len(items) - paid, paid=paid)
        outcomes = await _submitted(request, principal, items)
    return JsonBody({"results": outcomes, "atomic_chunk_size": deps.intake.atomic_chunk_size})


async def _submitted(
    request: Request, principal: Principal, items: list[BatchItem | RequestError]
) -> list[dict[str, Any]]:
    """Each item's entry: its job, or its problem."""
    info = request_info(request)
    # Called even when no item is valid, so paused intake is a 503 whatever the items.
    outcomes = iter(
        await app_deps(request).intake.submit_many(
            tenant_id=principal.tenant_id,
            items=[item for item in items if isinstance(item, BatchItem)],
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
    return results


def _located(error: FerrymanError, index: int) -> FerrymanError:
    """Intake names a field as in a single body (body, input, ...); in a batch it is
    the field of item ``index`` (body, jobs, index, input, ...)."""
    if isinstance(error, InvalidRequestError):
        for detail in error.errors:
            loc = list(detail.get("loc", ()))
            if loc[:1] == ["body"]:
                detail["loc"] = ["body", "jobs", index, *loc[1:]]
    return error


async def _body(request: Request, principal: Principal, deps: AppDeps) -> bytearray:
    """The body's bytes (not kept on the request: they are dropped once parsed); a
    request refused before they are in still costs a request, one too large what its
    limit's worth of bytes would."""
    try:
        refuse_idempotency_key_header(request)
        refuse_non_json(request)
        # Grown in place: a list of chunks joined at the end would hold the body twice.
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
        return body
    except FerrymanError as exc:
        too_large = isinstance(exc, PayloadTooLargeError)
        size = deps.max_batch_body_bytes if too_large else 0
        await spend(request, principal, cost=size_cost(size, max_body_bytes=deps.max_body_bytes))
        raise


def size_cost(body_bytes: int, *, max_body_bytes: int) -> int:
    """What a batch body's bytes cost before they are parsed: one token per single
    body limit's worth of them, at least one."""
    return max(1, -(-body_bytes // max_body_bytes))
