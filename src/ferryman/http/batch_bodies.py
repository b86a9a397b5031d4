"""The body of POST /v1/generations/batch, read item by item.

The envelope ``{"jobs": [...]}`` is checked first, and a fault in it refuses the
whole request (problem+json): not JSON or not an object (422), no jobs (422),
more than ``MAX_BATCH_ITEMS`` (413 ``too_many_items``: the remedy is to send
fewer at a time, as for a body over its size limit). Then each item is read
exactly as the body of a single submission would be (http/bodies.py): a JSON
object, storable text, at most the single body limit, the GenerationRequest
model with its reserved fields refused, plus its own ``idempotency_key``. A bad
item becomes that item's refusal and never spoils the others.

The OpenAPI document describes each item per task, like the single submission's
body (``describe_batch_body``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferryman.core.errors import (
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    PayloadTooLargeError,
    RequestError,
)
from ferryman.http.bodies import GenerationRequest, first_invalid_text, read_json
from ferryman.services.intake import BatchItem, SubmitRequest

if TYPE_CHECKING:
    from pydantic import JsonValue
    from starlette.requests import Request

MAX_BATCH_ITEMS = 1000
BATCH_PATH = "/v1/generations/batch"
# Printable ASCII, as validate_idempotency_key checks (a wrong key is that item's 400).
_KEY_SCHEMA: dict[str, JsonValue] = {"minLength": 1, "maxLength": 255, "pattern": r"^[\x20-\x7e]+$"}


class TooManyItemsError(PayloadTooLargeError):
    """The batch holds more jobs than one request may carry; send them in smaller batches."""

    code = "too_many_items"


class BatchIdempotencyKeyError(InvalidIdempotencyKeyError):
    """A batch takes no Idempotency-Key header: give each job its own idempotency_key
    field, the same on every retry, and a retried batch maps every job to the one
    already stored."""


def refuse_idempotency_key_header(request: Request) -> None:
    """The header would be silently ignored (a retried batch would make every job
    twice): refuse it, naming the per-item field that does what it was meant to."""
    if "idempotency-key" in request.headers:
        raise BatchIdempotencyKeyError()


class BatchRequest(BaseModel):
    """The batch's envelope (its items are described per task in the document)."""

    model_config = ConfigDict(extra="forbid")

    jobs: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_BATCH_ITEMS)


class BatchJob(GenerationRequest):
    """One job of a batch: a submission's body with its own Idempotency-Key."""

    idempotency_key: str | None = Field(
        default=None,
        description=(
            "As the Idempotency-Key header of a single submission: the same key with the "
            "same request is the same job (replayed true); with another request, this "
            "item's 422 idempotency_key_mismatch. 1-255 printable ASCII characters."
        ),
        json_schema_extra=_KEY_SCHEMA,
    )


async def read_batch(request: Request, *, max_item_bytes: int) -> list[BatchItem | RequestError]:
    """Each item of the batch, read, or the refusal it gets alone; raises for the envelope."""
    jobs = _envelope(await read_json(request))
    # No item can be over the single limit unless the whole body is.
    measure = len(await request.body()) > max_item_bytes
    return [_item(i, raw, max_item_bytes if measure else None) for i, raw in enumerate(jobs)]


def _envelope(data: Any) -> list[Any]:
    if not isinstance(data, dict):
        raise _invalid(["body"], "the body must be a JSON object")
    for key in data:
        if key != "jobs":
            shown = key if first_invalid_text(key) is None else "?"
            raise _invalid(["body", shown], "Extra inputs are not permitted")
    jobs = data.get("jobs")
    if not isinstance(jobs, list):
        raise _invalid(["body", "jobs"], "a list of 1 to 1000 jobs is required")
    if not jobs:
        raise _invalid(["body", "jobs"], "at least one job is required")
    if len(jobs) > MAX_BATCH_ITEMS:
        raise TooManyItemsError(
            f"a batch holds at most {MAX_BATCH_ITEMS} jobs, this one has {len(jobs)}; "
            "send them in several requests"
        )
    return jobs


def _item(index: int, raw: Any, max_bytes: int | None) -> BatchItem | RequestError:
    where: list[str | int] = ["body", "jobs", index]
    if not isinstance(raw, dict):
        return _invalid(where, "each job must be a JSON object")
    bad = first_invalid_text(raw)
    if bad is not None:
        loc, msg = bad
        return _invalid([*where, *loc], msg)
    if max_bytes is not None and _json_size(raw) > max_bytes:
        return PayloadTooLargeError(f"this job is over the limit of {max_bytes} bytes")
    try:
        job = BatchJob.model_validate(raw)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False, include_context=False)
        return InvalidRequestError(
            errors=[{"loc": [*where, *error["loc"]], "msg": error["msg"]} for error in errors]
        )
    except RequestError as exc:  # a reserved field (webhook_url)
        return exc
    request = SubmitRequest(task=job.task, input=job.input, model=job.model, metadata=job.metadata)
    return BatchItem(request=request, idempotency_key=job.idempotency_key)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def _invalid(loc: list[str | int], msg: str) -> InvalidRequestError:
    return InvalidRequestError(msg, errors=[{"loc": loc, "msg": msg}])


def describe_batch_body(document: dict[str, Any]) -> None:
    """Show the batch body in the OpenAPI document: its items are the single submission's
    per-task bodies (already in ``components.schemas``) with an ``idempotency_key``."""
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    key = BatchJob.model_json_schema()["properties"]["idempotency_key"]
    mapping: dict[str, str] = {}
    for name, schema in list(schemas.items()):
        if not name.startswith("GenerationRequest."):
            continue
        entry = json.loads(json.dumps(schema))
        entry["title"] = "BatchJob." + name.removeprefix("GenerationRequest.")
        entry["properties"]["idempotency_key"] = key
        schemas[entry["title"]] = entry
        mapping[entry["properties"]["task"]["const"]] = "#/components/schemas/" + entry["title"]
    if not mapping:
        return
    item = {
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "task", "mapping": mapping},
    }
    body = document["paths"][BATCH_PATH]["post"]["requestBody"]["content"]["application/json"]
    body["schema"]["properties"]["jobs"]["items"] = item
