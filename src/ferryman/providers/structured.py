"""Asking a model for JSON that follows a task's output schema, the ways APIs allow it.

Every task asks for JSON matching its output schema, and the worker validates the
answer against the full schema whatever the provider did. So what is sent here only
has to steer the model: a strict schema where the API checks one, an instruction in
the system prompt where it does not, a tool whose input is the answer where the API
constrains tool inputs (Anthropic, Bedrock).
"""

from __future__ import annotations

import json
import re
from typing import Any

# Keywords OpenAI's strict structured outputs refuse; a schema using them is sent
# with strict off (the worker still validates every one of them).
_STRICT_UNSUPPORTED = frozenset(
    {
        "minLength",
        "maxLength",
        "minProperties",
        "maxProperties",
        "patternProperties",
        "unevaluatedProperties",
        "propertyNames",
        "contains",
        "uniqueItems",
        "default",
        "if",
        "then",
        "else",
        "not",
        "oneOf",
        "allOf",
        "dependentRequired",
        "dependentSchemas",
    }
)
# Tool names: letters, digits, '_' and '-', at most 64 (Anthropic's and Bedrock's rule).
_TOOL_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
# The property that carries an answer whose schema is not an object (tool inputs must be).
WRAPPED_PROPERTY = "answer"


def schema_instruction(schema: dict[str, Any]) -> str:
    """The instruction that carries the schema when the API cannot (JSON mode, plain text)."""
    return (
        "Answer with one JSON value and nothing else: no prose, no code fences. "
        "It must follow this JSON Schema:\n" + json.dumps(schema, separators=(",", ":"))
    )


def with_instruction(system: str | None, instruction: str) -> str:
    return f"{system}\n\n{instruction}" if system else instruction


def strict_compatible(schema: dict[str, Any]) -> bool:
    """Whether OpenAI's strict mode accepts the schema: every object closed with all its
    properties required, and no keyword strict mode refuses, at any depth."""
    pending: list[Any] = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        if _STRICT_UNSUPPORTED & node.keys():
            return False
        properties = node.get("properties")
        if isinstance(properties, dict):
            if node.get("additionalProperties") is not False:
                return False
            if set(node.get("required", [])) != set(properties):
                return False
            pending.extend(properties.values())
        for key in ("items", "anyOf", "$defs", "definitions", "prefixItems"):
            child = node.get(key)
            pending.extend(
                child.values() if isinstance(child, dict) and key != "items" else [child]
            )
    return True


def schema_name(task: str) -> str:
    """A name for the schema or the answering tool, derived from the task's name."""
    cleaned = _TOOL_NAME_UNSAFE.sub("_", task).strip("_") or "task"
    return f"{cleaned}_answer"[:64]


def tool_input_schema(schema: dict[str, Any]) -> tuple[dict[str, Any], bool]:
    """A tool's input schema for the answer, and whether the answer had to be wrapped
    in an object (tool inputs are objects; a task's answer need not be)."""
    if schema.get("type") == "object" or "properties" in schema:
        return schema, False
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {WRAPPED_PROPERTY: {k: v for k, v in schema.items() if k != "$defs"}},
        "required": [WRAPPED_PROPERTY],
    }
    if "$defs" in schema:
        wrapped["$defs"] = schema["$defs"]
    return wrapped, True


def tool_answer_text(tool_input: Any, *, wrapped: bool) -> str:
    """The answer, as JSON text, from a tool call's (parsed) input."""
    if wrapped and isinstance(tool_input, dict) and WRAPPED_PROPERTY in tool_input:
        tool_input = tool_input[WRAPPED_PROPERTY]
    return json.dumps(tool_input, ensure_ascii=False)


def tool_answer_from_json_text(text: str, *, wrapped: bool) -> str:
    """The answer from a streamed tool input (JSON text). Text that does not parse (cut
    off by max_tokens, say) is returned as it came, for the worker to judge and keep."""
    if not wrapped:
        return text
    try:
        parsed = json.loads(text)
    except ValueError:
        return text
    return tool_answer_text(parsed, wrapped=True)
