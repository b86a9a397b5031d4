"""The body of POST /v1/generations/batch, read item by item, off the event loop.

The envelope ``{"jobs": [...]}`` is checked first, and a fault in it refuses the
whole request (problem+json): not JSON or not an object (422), no jobs (422),
more than ``MAX_BATCH_ITEMS`` (413 ``too_many_items``: the remedy is to send
fewer at a time, as for a body over its size limit). Then each item is read
exactly as the body of a single submission would be (http/bodies.py): a JSON
object, storable text, at most the single body limit, the GenerationRequest
model with its reserved fields refused, plus its own ``idempotency_key``. A bad
item becomes that item's refusal and never spoils the others.

A batch body is up to 16 MiB: decoding and validating it takes the CPU for a
tenth of a second or more, far too long for the event loop every other request
waits on. ``BatchParser`` runs it on a worker thread, a few batches at a time (the
rest wait their turn with only their bytes in memory), and ``parse_batch`` decodes the jobs
one at a time (``JSONDecoder.raw_decode`` from each one's first character), so no
single step holds the interpreter for the whole body: the loop gets its turn
between two jobs. A JSON fault anywhere is still "not valid JSON".

The OpenAPI document describes each item per task, like the single submission's
body (``describe_batch_body``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ferryman.core.errors import (
    InvalidIdempotencyKeyError,
    InvalidRequestError,
    PayloadTooLargeError,
    RequestError,
)
from ferryman.http.bodies import (
    JSON_DECODER,
    GenerationRequest,
    first_invalid_text,
    json_text,
    may_hold_invalid_text,
    not_json,
)
from ferryman.services.intake import BatchItem, SubmitRequest

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Generator

    from pydantic import JsonValue
    from starlette.requests import Request

    ParseBatch = Callable[[bytes | bytearray, int], list[BatchItem | RequestError]]
    # Each job's value, with where its text starts and ends; returns where the list ends.
    Jobs = Generator[tuple[Any, int, int], None, int]

MAX_BATCH_ITEMS = 1000
# Batches read and stored at once per API process: parsing is CPU work under one
# interpreter lock and storing them queues for one writer, so more at once would
# only hold more batches' jobs in memory.
DEFAULT_BATCH_TURNS = 2
_WHITESPACE = re.compile(r"[ \t\n\r]*")
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


class BatchParser:
    """Batches take turns, at most ``at_once`` at a time from reading their jobs to
    storing them (``turn``), and ``parse`` runs ``parse_batch`` on a worker thread. A
    batch waiting for its turn holds only its bytes; one that has it, its jobs too."""

    def __init__(
        self, *, at_once: int = DEFAULT_BATCH_TURNS, parse: ParseBatch | None = None
    ) -> None:
        if at_once < 1:
            raise ValueError("at_once must be at least 1")
        self._turns = asyncio.Semaphore(at_once)
        self._parse = parse or parse_batch
        self.waiting = 0  # batches waiting for a turn

    @contextlib.asynccontextmanager
    async def turn(self) -> AsyncIterator[None]:
        self.waiting += 1
        try:
            await self._turns.acquire()
        finally:
            self.waiting -= 1
        try:
            yield
        finally:
            self._turns.release()

    async def parse(
        self, raw: bytes | bytearray, *, max_item_bytes: int
    ) -> list[BatchItem | RequestError]:
        return await asyncio.to_thread(self._parse, raw, max_item_bytes)


def parse_batch(raw: bytes | bytearray, max_item_bytes: int) -> list[BatchItem | RequestError]:
    """Each item of the batch body ``raw``, read, or the refusal it gets alone; raises
    for the envelope. CPU work: call it off the event loop (BatchParser)."""
    text = json_text(raw)
    # No item can be over the single limit unless the whole body is.
    measure = len(raw) > max_item_bytes
    items: list[BatchItem | RequestError] = []
    for index, (value, start, end) in enumerate(_jobs(text)):
        checked = may_hold_invalid_text(text, start, end)
        items.append(_item(index, value, max_item_bytes if measure else None, checked=checked))
    if not items:
        raise _invalid(["body", "jobs"], "at least one job is required")
    return items


def _jobs(text: str) -> Jobs:
    """Each value of the body's ``jobs`` list, decoded alone, with where its text is.

    The body must be ``{"jobs": [...]}`` and nothing else; the first fault found
    raises (not JSON, not an object, another field, jobs not a list, too many)."""
    pos = _skip(text, 0)
    if not text.startswith("{", pos):
        raise _not_an_object(text, pos)
    pos = _skip(text, pos + 1)
    seen_jobs = False
    while not text.startswith("}", pos):
        if seen_jobs:  # after the jobs list only a comma and another field may follow
            if not text.startswith(",", pos):
                raise not_json()
            pos = _skip(text, pos + 1)
        key, pos = _decode(text, pos)
        pos = _skip(text, pos)
        if not isinstance(key, str) or not text.startswith(":", pos):
            raise not_json()
        if key != "jobs" or seen_jobs:
            shown = key if first_invalid_text(key) is None else "?"
            raise _invalid(["body", shown], "Extra inputs are not permitted")
        seen_jobs = True
        pos = _skip(text, pos + 1)
        if not text.startswith("[", pos):
            raise _invalid(["body", "jobs"], "a list of 1 to 1000 jobs is required")
        pos = yield from _list_items(text, _skip(text, pos + 1))
        pos = _skip(text, pos)
    if not seen_jobs:
        raise _invalid(["body", "jobs"], "a list of 1 to 1000 jobs is required")
    end = _skip(text, pos + 1)
    if end != len(text):
        raise not_json()
    return end


def _list_items(text: str, pos: int) -> Jobs:
    """The values of the list whose first item (or ``]``) is at ``pos``; returns the
    position after its ``]``."""
    count = 0
    if text.startswith("]", pos):
        return pos + 1
    while True:
        count += 1
        if count > MAX_BATCH_ITEMS:
            raise TooManyItemsError(
                f"a batch holds at most {MAX_BATCH_ITEMS} jobs, this one has more; "
                "send them in several requests"
            )
        value, end = _decode(text, pos)
        yield value, pos, end
        pos = _skip(text, end)
        if text.startswith("]", pos):
            return pos + 1
        if not text.startswith(",", pos):
            raise not_json()
        pos = _skip(text, pos + 1)


def _decode(text: str, pos: int) -> tuple[Any, int]:
    try:
        value, end = JSON_DECODER.raw_decode(text, pos)
    except (ValueError, RecursionError):
        raise not_json() from None
    return value, end


def _skip(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return pos if match is None else match.end()


def _not_an_object(text: str, pos: int) -> InvalidRequestError:
    """Another JSON value is not an object; anything else is not JSON at all."""
    if pos >= len(text) or text[pos] not in '["-0123456789tfn':
        return not_json()
    return _invalid(["body"], "the body must be a JSON object")


def _item(
    index: int, raw: Any, max_bytes: int | None, *, checked: bool = True
) -> BatchItem | RequestError:
    """``checked``: whether the item's text may hold a string no engine can store."""
    where: list[str | int] = ["body", "jobs", index]
    if not isinstance(raw, dict):
        return _invalid(where, "each job must be a JSON object")
    bad = first_invalid_text(raw) if checked else None
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
    request = SubmitRequest(
        task=job.task,
        input=job.input,
        model=job.model,
        metadata=job.metadata,
        webhook_url=job.webhook_url,
    )
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
