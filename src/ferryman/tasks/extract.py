"""The built-in ``extract`` task: structured data out of text, to a JSON Schema given per job.

The schema comes from a tenant, so it is checked at intake like any other input
(422 with ``loc`` ["body", "input", "schema"], nothing stored) and held to bounds
that keep it from costing a worker more than a model call:

- valid JSON Schema Draft 2020-12, self-contained (``$ref`` only into its own
  ``$defs``), describing a JSON object at the top level (what structured-output
  APIs accept);
- at most ``MAX_SCHEMA_BYTES`` as JSON and ``MAX_SCHEMA_DEPTH`` levels of nesting;
- no ``pattern`` or ``patternProperties``: a regular expression from one tenant,
  run by a worker over a model's answer, could stall every job on that worker;
- the smallest answer it describes (every declared field, every list at its
  ``minItems``, every string at its ``minLength``) stays under
  ``MAX_ANSWER_SIZE`` values and characters: no model could write more, and the
  simulated model would try.

The answer is checked against the job's own schema, the one its request carried.
"""

from __future__ import annotations

import json
from typing import Any

from jsonschema import Draft202012Validator
from pydantic import ConfigDict, Field, field_validator

from ferryman.core.idempotency import canonical_json
from ferryman.tasks.definition import PromptParts, TaskDefinition, TaskInput
from ferryman.tasks.models import ModelInput
from ferryman.tasks.schemas import checked_output, iter_subschemas, schema_problem

MAX_EXTRACT_TEXT_CHARS = 100_000
MAX_INSTRUCTIONS_CHARS = 2_000
MAX_TOKENS_LIMIT = 32_000
MAX_SCHEMA_BYTES = 16_384
MAX_SCHEMA_DEPTH = 20
MAX_ANSWER_SIZE = 100_000
# References are followed this deep when sizing an answer (the sim stops there too).
_MAX_EXPANSION = 16
_REGEX_KEYWORDS = ("pattern", "patternProperties")


class ExtractInput(TaskInput):
    # ``schema`` on the wire; ``json_schema`` in Python, where BaseModel has a ``schema``.
    model_config = ConfigDict(
        validate_by_alias=True, validate_by_name=False, serialize_by_alias=True
    )

    text: str = Field(min_length=1, max_length=MAX_EXTRACT_TEXT_CHARS)
    json_schema: dict[str, Any] = Field(
        alias="schema",
        description="The JSON Schema (Draft 2020-12) the answer must follow; its top level "
        f"is an object. At most {MAX_SCHEMA_BYTES} bytes and {MAX_SCHEMA_DEPTH} levels deep.",
    )
    instructions: str | None = Field(default=None, max_length=MAX_INSTRUCTIONS_CHARS)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)

    @field_validator("json_schema")
    @classmethod
    def _usable(cls, value: dict[str, Any]) -> dict[str, Any]:
        problem = job_schema_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


def job_schema_problem(schema: dict[str, Any]) -> str | None:
    """Why a per-job schema cannot be used (a message naming no value), or None."""
    if _depth(schema) > MAX_SCHEMA_DEPTH:
        return f"the schema is nested more than {MAX_SCHEMA_DEPTH} levels deep"
    try:
        size = len(canonical_json(schema).encode("utf-8"))
    except (TypeError, ValueError):
        return "the schema must be JSON"
    if size > MAX_SCHEMA_BYTES:
        return f"the schema is {size} bytes as JSON, over the limit of {MAX_SCHEMA_BYTES}"
    problem = schema_problem(schema)
    if problem is not None:
        return f"the schema is {problem}" if problem.startswith("not ") else problem
    if schema.get("type") != "object":
        return 'the schema\'s top level must be "type": "object"'
    for path, node in iter_subschemas(schema):
        for keyword in _REGEX_KEYWORDS:
            if keyword in node:
                return f"at {path or '(top level)'}: {keyword} is not allowed in a job's schema"
    if _AnswerSize(schema).of(schema, 0) > MAX_ANSWER_SIZE:
        return (
            "the smallest answer this schema describes is too large "
            f"(over {MAX_ANSWER_SIZE} values and characters)"
        )
    return None


def _depth(value: Any) -> int:
    """How deeply JSON containers nest in ``value`` (iterative: any input is safe)."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(value, 1)]
    while pending:
        node, level = pending.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        deepest = max(deepest, level)
        if level <= MAX_SCHEMA_DEPTH:
            pending.extend((child, level + 1) for child in children)
    return deepest


class _AnswerSize:
    """A count of the values and characters in the answer the schema asks for at
    least, counting every declared field (a model, or the sim, may write them all)."""

    def __init__(self, root: dict[str, Any]) -> None:
        self._definitions: dict[str, Any] = root.get("$defs", {})
        # Keyed by node and depth: a definition reached many ways is sized once.
        self._known: dict[tuple[int, int], int] = {}

    def of(self, node: Any, depth: int) -> int:
        if not isinstance(node, dict) or depth > _MAX_EXPANSION:
            return 1
        key = (id(node), depth)
        if key not in self._known:
            self._known[key] = min(self._measure(node, depth), MAX_ANSWER_SIZE + 1)
        return self._known[key]

    def _measure(self, node: dict[str, Any], depth: int) -> int:
        sizes = [1, _int(node.get("minLength")), _int(node.get("minProperties"))]
        ref = node.get("$ref")
        if isinstance(ref, str):
            sizes.append(self.of(self._definitions.get(ref.rsplit("/", 1)[-1]), depth + 1))
        for key in ("anyOf", "oneOf", "allOf"):
            branches = node.get(key)
            if isinstance(branches, list):
                sizes.extend(self.of(branch, depth + 1) for branch in branches)
        properties = node.get("properties")
        if isinstance(properties, dict):
            sizes.append(1 + sum(self.of(child, depth + 1) for child in properties.values()))
        if node.get("type") == "array" or "items" in node or "prefixItems" in node:
            prefix = node.get("prefixItems")
            fixed = sum(self.of(c, depth + 1) for c in prefix) if isinstance(prefix, list) else 0
            count = max(_int(node.get("minItems")), 1)
            sizes.append(1 + fixed + count * self.of(node.get("items", {}), depth + 1))
        return max(sizes)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class JobSchemaOutput:
    """The answer follows the schema its job gave; listed as "an object"."""

    def json_schema(self) -> dict[str, Any]:
        return {
            "type": "object",
            "description": "A JSON object that follows the job's input.schema",
        }

    def asked_schema(self, job_input: dict[str, Any]) -> dict[str, Any]:
        schema: dict[str, Any] = job_input["schema"]
        return schema

    def check(self, data: Any, *, asked: dict[str, Any] | None) -> dict[str, Any]:
        # Without the request (a caller that does not pass it) only the shape is known.
        validator = Draft202012Validator(asked if asked is not None else {"type": "object"})
        return checked_output(validator, data)


_SYSTEM = (
    "You extract structured data from text. Answer with one JSON object that follows "
    "the given JSON Schema, and nothing else. Use only what the text says."
)


def _render_extract(given: ExtractInput) -> PromptParts:
    parts = [given.instructions, "JSON Schema of the answer:", json.dumps(given.json_schema)]
    prompt = "\n\n".join(part for part in parts if part) + "\n\nText:\n" + given.text
    return PromptParts(system=_SYSTEM, prompt=prompt, max_tokens=given.max_tokens)


EXTRACT = TaskDefinition(
    name="extract",
    inputs=ModelInput(ExtractInput),
    outputs=JobSchemaOutput(),
    render=_render_extract,
    description="Extract structured data from text into a JSON Schema given with the job.",
)
