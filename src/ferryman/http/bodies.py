"""Request bodies: their models, and reading them only after the caller is known.

Routes read bodies themselves instead of declaring them as FastAPI parameters, so
authentication runs first (an anonymous caller learns nothing about validation),
and pydantic's echo of the offending input never reaches a response.

- Content-Type ``application/json`` (any charset) or ``application/*+json``: parsed.
  No Content-Type at all: parsed as JSON too (curl-friendly).
  Any other Content-Type: 415 ``unsupported_media_type``.
- A body that is not JSON (bad syntax or UTF-8, NaN/Infinity, numbers that overflow
  to infinity, nesting too deep): 422 ``invalid_request`` with ``loc ["body"]``.
- JSON holding text no engine can store: 422 ``invalid_request`` with the ``loc`` of
  the first such string (see ``first_invalid_text``), before any model sees it.
- JSON that breaks the model: 422 ``invalid_request`` with each field's ``loc``.
- A ``webhook_url`` over 2,048 characters: 422 ``invalid_request``; one ferryman
  will not call: 422 ``webhook_url_refused`` (services/intake.py, after the body).

The OpenAPI document describes the submission body per task (``describe_task_bodies``):
a ``oneOf`` of one GenerationRequest per registered task, keyed by ``task``, whose
``input`` is that task's input schema.
"""

from __future__ import annotations

import json
import math
import re
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from ferryman.core.errors import InvalidRequestError
from ferryman.core.idempotency import canonical_json
from ferryman.http.errors import UnsupportedMediaTypeError
from ferryman.ports.control import Switch

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails
    from starlette.requests import Request

    from ferryman.tasks import TaskRegistry

MAX_METADATA_BYTES = 4096
# Lone surrogates cannot be encoded as UTF-8 (hashing, storage and responses all fail);
# NUL ends a C string and PostgreSQL text refuses it.
_INVALID_TEXT = re.compile("[\x00\ud800-\udfff]")
MAX_WEBHOOK_URL_CHARS = 2048

ModelT = TypeVar("ModelT", bound=BaseModel)


class GenerationRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(min_length=1, max_length=128)
    input: dict[str, Any]
    model: str | None = Field(default=None, min_length=1, max_length=256)
    metadata: dict[str, Any] | None = None
    webhook_url: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_WEBHOOK_URL_CHARS,
        description=(
            "Where to POST the job's outcome once it is finished, signed as Standard "
            "Webhooks define it (docs/getting-results.md): an https URL of a public "
            "host, or a host the operator allowed. Part of the idempotency fingerprint."
        ),
    )

    @field_validator("metadata")
    @classmethod
    def _metadata_fits(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None and len(canonical_json(value).encode("utf-8")) > MAX_METADATA_BYTES:
            raise ValueError(f"metadata must be at most {MAX_METADATA_BYTES} bytes as JSON")
        return value


class ReplayRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    job_ids: list[str] = Field(min_length=1, max_length=100)
    reason: str = Field(min_length=1, max_length=500)
    # Besides dead-lettered jobs, also FAILED ones that failed for a model reason.
    include_failed: bool = False


class PurgeLettersRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    dead_letter_ids: list[str] = Field(min_length=1, max_length=100)
    reason: str = Field(min_length=1, max_length=500)


class SwitchRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        # The rule _provider_named_only_for_providers enforces, told to the document.
        json_schema_extra={
            "if": {"properties": {"what": {"const": "provider"}}},
            "then": {"required": ["provider"], "properties": {"provider": {"type": "string"}}},
            "else": {"properties": {"provider": {"type": "null"}}},
        },
    )

    # A Literal, not the Switch enum, so the schema has no $defs (see openapi_body).
    # "provider" pauses (or resumes) calls to the provider named in ``provider``.
    what: Literal["intake", "workers", "provider"]
    provider: str | None = Field(default=None, min_length=1, max_length=128)
    # Why, for the audit log (who and when are the key and the clock).
    reason: str | None = Field(default=None, min_length=1, max_length=500)

    @model_validator(mode="after")
    def _provider_named_only_for_providers(self) -> SwitchRequest:
        if (self.what == "provider") != (self.provider is not None):
            raise ValueError(
                '"provider" names the provider when, and only when, what is "provider"'
            )
        return self

    @property
    def switch(self) -> Switch | None:
        """The process-wide switch, or None for a provider's."""
        return None if self.what == "provider" else Switch(self.what)


def openapi_body(model: type[BaseModel]) -> dict[str, Any]:
    """Describe a body the route reads itself, so /docs still shows it."""
    schema = model.model_json_schema()
    # Nested $defs would not resolve inside the OpenAPI document.
    assert "$defs" not in schema, f"{model.__name__} needs a flat schema"
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


SUBMIT_PATH = "/v1/generations"
_COMPONENT_NAME = re.compile(r"[^A-Za-z0-9._-]")
_COMPONENT_REF = "#/components/schemas/"


def describe_task_bodies(
    document: dict[str, Any],
    registry: TaskRegistry,
    *,
    models: list[str] | None = None,
    sim_scripts: bool = False,
) -> None:
    """Make the OpenAPI ``document`` show the submission body per registered task: a
    ``oneOf`` with a discriminator on ``task``, each entry's ``input`` being that task's
    input schema, every schema it needs added to ``components.schemas``. ``models``:
    the model names intake accepts (any name when None)."""
    schemas: dict[str, Any] = document.setdefault("components", {}).setdefault("schemas", {})
    base = GenerationRequest.model_json_schema()
    mapping: dict[str, str] = {}
    for task in registry:
        input_schema = task.published_input_schema(simulate=sim_scripts)
        input_ref = _add_component(schemas, f"TaskInput.{task.name}", input_schema, task.name)
        entry = json.loads(json.dumps(base))
        entry["title"] = f"GenerationRequest.{task.name}"
        if task.description:
            entry["description"] = task.description
        entry["properties"]["task"] = {"type": "string", "const": task.name, "title": "Task"}
        entry["properties"]["input"] = {"$ref": input_ref}
        if models is not None:
            entry["properties"]["model"] = {
                "anyOf": [{"type": "string", "enum": models}, {"type": "null"}],
                "title": "Model",
                "description": f"A configured model; default: {task.default_model}",
            }
        mapping[task.name] = _add_component(schemas, entry["title"], entry, task.name)
    body = {
        "oneOf": [{"$ref": ref} for ref in mapping.values()],
        "discriminator": {"propertyName": "task", "mapping": mapping},
    }
    content = document["paths"][SUBMIT_PATH]["post"]["requestBody"]["content"]
    content["application/json"]["schema"] = body


def _add_component(schemas: dict[str, Any], name: str, schema: dict[str, Any], task: str) -> str:
    """Put ``schema`` under ``name``, its ``$defs`` beside it (shared when another task
    has the same one, named after the task when another differs), and return its $ref."""
    schema = json.loads(json.dumps(schema))
    schema.pop("$schema", None)
    schema.pop("$id", None)  # a base URI of its own would move its references
    definitions: dict[str, Any] = schema.pop("$defs", {})
    renamed: dict[str, str] = {}
    for def_name, definition in definitions.items():
        plain = _COMPONENT_NAME.sub("_", def_name)
        chosen = plain if schemas.get(plain, definition) == definition else f"{task}.{plain}"
        renamed[f"#/$defs/{def_name}"] = _COMPONENT_REF + chosen
    for def_name, definition in definitions.items():
        target = renamed[f"#/$defs/{def_name}"].removeprefix(_COMPONENT_REF)
        schemas[target] = _rewrite_refs(definition, renamed)
    schemas[name] = _rewrite_refs(schema, renamed)
    return _COMPONENT_REF + name


def _rewrite_refs(node: Any, renamed: dict[str, str]) -> Any:
    if isinstance(node, dict):
        return {
            key: renamed.get(value, value)
            if key == "$ref" and isinstance(value, str)
            else _rewrite_refs(value, renamed)
            for key, value in node.items()
        }
    if isinstance(node, list):
        return [_rewrite_refs(item, renamed) for item in node]
    return node


async def read_body(request: Request, model: type[ModelT]) -> ModelT:
    data = await _read_json(request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequestError(errors=_field_errors(exc)) from None


async def _read_json(request: Request) -> Any:
    data, plain = await _parsed_body(request)
    bad = None if plain else first_invalid_text(data)
    if bad is not None:
        loc, msg = bad
        raise InvalidRequestError(msg, errors=[{"loc": ["body", *loc], "msg": msg}])
    return data


def refuse_non_json(request: Request) -> None:
    """415 unless the Content-Type, when there is one, is JSON."""
    content_type = request.headers.get("content-type")
    if content_type is not None and not _is_json(content_type):
        raise UnsupportedMediaTypeError()


async def _parsed_body(request: Request) -> tuple[Any, bool]:
    """The body as JSON, and whether its text alone shows that no string in it holds
    a lone surrogate or NUL (then ``first_invalid_text`` need not walk it)."""
    refuse_non_json(request)
    text = json_text(await request.body())
    try:
        data = JSON_DECODER.decode(text)
    except (ValueError, RecursionError):
        # ValueError covers NaN/Infinity as well as bad syntax.
        raise not_json() from None
    return data, not may_hold_invalid_text(text)


def json_text(raw: bytes | bytearray) -> str:
    """A body's bytes as the text JSON is read from (as json.loads reads bytes: its
    encoding detected, lone surrogates kept for first_invalid_text to find)."""
    try:
        return raw.decode(json.detect_encoding(raw), "surrogatepass")
    except ValueError:  # bad UTF-8 (or UTF-16/32)
        raise not_json() from None


def not_json() -> InvalidRequestError:
    msg = "the body is not valid JSON"
    return InvalidRequestError(msg, errors=[{"loc": ["body"], "msg": msg}])


def may_hold_invalid_text(text: str, start: int = 0, end: int | None = None) -> bool:
    """Whether JSON ``text[start:end]`` may parse to a string with a lone surrogate or
    NUL: such a character reaches a parsed string only as itself or as a \\u escape."""
    end = len(text) if end is None else end
    return text.find("\\u", start, end) >= 0 or _INVALID_TEXT.search(text, start, end) is not None


def first_invalid_text(data: Any) -> tuple[list[str | int], str] | None:
    """Where the first string (key or value, at any depth) holding a lone surrogate
    or NUL is, and what is wrong; None when every string is storable text.

    Python's json module turns "\\ud800" escapes and even raw surrogate bytes into
    str values that no UTF-8 encoder accepts, so they are looked for after parsing.
    Iterative, so a deeply nested body costs no recursion.
    """
    pending: list[tuple[list[str | int], Any]] = [([], data)]
    while pending:
        loc, value = pending.pop()
        if isinstance(value, str):
            if _INVALID_TEXT.search(value):
                return loc, _TEXT_MESSAGE
        elif isinstance(value, dict):
            children: list[tuple[list[str | int], Any]] = []
            for key, child in value.items():
                if _INVALID_TEXT.search(key):
                    # The key itself cannot be echoed back: name the object holding it.
                    return loc, "an object key " + _TEXT_MESSAGE
                children.append(([*loc, key], child))
            pending.extend(reversed(children))
        elif isinstance(value, list):
            pending.extend(reversed([([*loc, i], child) for i, child in enumerate(value)]))
    return None


_TEXT_MESSAGE = "must be valid text: no lone surrogates (\\ud800-\\udfff) and no NUL (\\u0000)"


def _is_json(content_type: str) -> bool:
    media_type = content_type.split(";", 1)[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite_float(text: str) -> float:
    # 1e400 parses to inf, which canonical JSON (the request fingerprint) cannot write.
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("number out of range")
    return value


# What json.loads(raw, parse_constant=..., parse_float=...) does, the decoder made once:
# json.loads builds a new one per call whenever a hook is given (about 4 us a submit).
# The body is decoded as json.loads decodes bytes (detect_encoding, surrogatepass).
JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)


def _field_errors(exc: ValidationError) -> list[dict[str, Any]]:
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    return [{"loc": ["body", *error["loc"]], "msg": _message(error)} for error in errors]


def _message(error: ErrorDetails) -> str:
    # Pydantic would name our model class; the caller only needs the shape.
    if error["type"] in ("model_type", "model_attributes_type"):
        return "the body must be a JSON object"
    return error["msg"]
