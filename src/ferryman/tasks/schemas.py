"""Inputs and outputs described by JSON Schemas (Draft 2020-12), checked with jsonschema.

Used by tasks declared in TOML and by ``extract``'s per-job schema. A schema is
accepted only if it is valid Draft 2020-12 and self-contained: every ``$ref`` names
one of its own ``$defs``, so validating never looks anything up elsewhere (and
jsonschema never fetches a remote reference anyway).

jsonschema's own messages quote the offending value, so errors are rebuilt from the
failing keyword and the location: an input error names the field, an output error
names fields too, but only those the schema declares (a key the model made up is
shown as ``*``), never a value.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match
from pydantic import ValidationError

from ferryman.core.errors import InvalidRequestError
from ferryman.tasks.bounds import unbounded_strings
from ferryman.tasks.definition import OutputViolationError, TaskDefinitionError
from ferryman.tasks.models import field_errors
from ferryman.tasks.simulate import SimulateOptions

if TYPE_CHECKING:
    from collections.abc import Iterator

    from jsonschema.exceptions import ValidationError as SchemaValidationError

DRAFT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
# Enough for any honest input; the body limit bounds them anyway.
MAX_INPUT_ERRORS = 50
_LOCAL_REF = re.compile(r"#/\$defs/([^/~]+)")
# Keywords that change where references resolve: a schema here is one resource.
_RESOURCE_KEYWORDS = ("$anchor", "$dynamicRef", "$dynamicAnchor", "$recursiveRef")
_META = Draft202012Validator(
    Draft202012Validator.META_SCHEMA, format_checker=Draft202012Validator.FORMAT_CHECKER
)
# Subschema-holding keywords, by the shape of their value.
_SUB_ONE = (
    "items",
    "additionalProperties",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_SUB_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUB_MAP = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SIMULATE = "simulate"
_SIMULATE_DEF = "SimulateOptions"
# An enum or const longer than this (as JSON) is not spelled out in a message.
_MAX_SPELLED = 200


def schema_problem(schema: object) -> str | None:
    """What makes ``schema`` unusable here, or None: not Draft 2020-12, or not self-contained."""
    if not isinstance(schema, dict):
        return "must be a JSON Schema object"
    dialect = schema.get("$schema")
    if dialect is not None and dialect not in (DRAFT_2020_12, DRAFT_2020_12 + "#"):
        return f"only JSON Schema Draft 2020-12 is supported ($schema {DRAFT_2020_12})"
    error = best_match(_META.iter_errors(schema))
    if error is not None:
        return (
            f"not a valid JSON Schema at {_dotted(error.absolute_path)}: "
            f"it breaks the Draft 2020-12 metaschema's {error.validator!r} rule"
        )
    definitions = schema.get("$defs", {})
    for path, node in iter_subschemas(schema):
        if path and "$id" in node:
            return f"at {path}: $id is only allowed at the top level"
        for keyword in _RESOURCE_KEYWORDS:
            if keyword in node:
                return f"at {path or '(top level)'}: {keyword} is not supported"
        ref = node.get("$ref")
        if ref is None:
            continue
        found = _LOCAL_REF.fullmatch(ref)
        if found is None or found.group(1) not in definitions:
            return (
                f"at {path or '(top level)'}: $ref must name one of this schema's own "
                "$defs (#/$defs/NAME)"
            )
    return None


def iter_subschemas(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every subschema (dotted path, node), without following references."""
    pending: list[tuple[str, Any]] = [("", schema)]
    while pending:
        path, node = pending.pop()
        if not isinstance(node, dict):
            continue
        yield path, node
        for key in _SUB_ONE:
            if key in node:
                pending.append((_join(path, key), node[key]))
        for key in _SUB_MANY:
            children = node.get(key)
            if isinstance(children, list):
                pending.extend((_join(path, f"{key}.{i}"), c) for i, c in enumerate(children))
        for key in _SUB_MAP:
            children = node.get(key)
            if isinstance(children, dict):
                pending.extend((_join(path, f"{key}.{name}"), c) for name, c in children.items())


def checked_schema(schema: object, *, where: str) -> dict[str, Any]:
    """``schema`` if it is usable and describes a JSON object; TaskDefinitionError if not."""
    problem = schema_problem(schema)
    if problem is not None:
        raise TaskDefinitionError(f"{where}: {problem}")
    assert isinstance(schema, dict)
    if schema.get("type") != "object":
        raise TaskDefinitionError(f'{where}: the top level must be "type": "object"')
    return schema


class SchemaInput:
    """A task input checked by a JSON Schema; the render function gets the dict.

    Like every task input it refuses unknown fields, at every depth (``closed_objects``),
    and may carry the sim's ``simulate`` block, which is checked by ferryman, not by
    the schema.
    """

    def __init__(self, schema: dict[str, Any], *, where: str) -> None:
        schema = checked_schema(schema, where=where)
        if _SIMULATE in schema.get("properties", {}):
            raise TaskDefinitionError(f"{where}: the input field 'simulate' is ferryman's own")
        if _SIMULATE_DEF in schema.get("$defs", {}):
            raise TaskDefinitionError(f"{where}: the $defs name {_SIMULATE_DEF!r} is reserved")
        closed = closed_objects(schema)
        self._closed = closed
        self._validator = Draft202012Validator(closed)
        self._schema = _with_simulate(closed)

    def json_schema(self) -> dict[str, Any]:
        return _copy(self._schema)

    def unbounded_text(self) -> list[str]:
        return unbounded_strings(self._closed)

    def validate(self, raw: object, *, task: str) -> dict[str, Any]:
        return self._checked(raw, prefix=("body", "input"), what=f"not valid for task {task!r}")

    def load(self, stored: dict[str, Any], *, task: str) -> dict[str, Any]:
        checked = self._checked(stored, prefix=("input",), what=f"no longer fits task {task!r}")
        checked.pop(_SIMULATE, None)
        return checked

    def _checked(self, raw: object, *, prefix: tuple[str, ...], what: str) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise InvalidRequestError(
                f"the input is {what}",
                errors=[{"loc": list(prefix), "msg": "Input should be a JSON object"}],
            )
        given = dict(raw)
        simulate = given.pop(_SIMULATE, None)
        errors = [
            {"loc": [*prefix, *loc], "msg": msg}
            for loc, msg in input_violations(self._validator, given)
        ]
        if simulate is not None:
            try:
                options = SimulateOptions.model_validate(simulate)
            except ValidationError as exc:
                errors.extend(field_errors(exc, prefix=(*prefix, _SIMULATE)))
            else:
                given[_SIMULATE] = options.model_dump(mode="json", exclude_none=True)
        if errors:
            raise InvalidRequestError(f"the input is {what}", errors=errors[:MAX_INPUT_ERRORS])
        return given


# An object with one of these says itself which other fields it takes.
_OPENNESS = ("additionalProperties", "unevaluatedProperties", "patternProperties")
# Subschemas applied to the node's own instance: parts of its shape, not shapes.
_IN_PLACE_MANY = ("allOf", "anyOf", "oneOf")
_IN_PLACE_ONE = ("then", "else")
# Subschemas that hold shapes of their own (a field's value, an array's item, a
# definition). Those under not, if, contains and propertyNames are conditions, never
# closed: closing one would change what matches, not close a shape.
_SHAPES_MAP = ("properties", "patternProperties")
_SHAPES_ONE = ("items", "additionalProperties", "unevaluatedProperties", "unevaluatedItems")


def closed_objects(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` in which every object refuses fields it does not declare,
    as a task's input does: each object subschema (``"type": "object"`` or
    ``properties``) that names none of ``_OPENNESS`` gets ``additionalProperties:
    false``, or ``unevaluatedProperties: false`` when it is made of parts (``allOf``,
    ``anyOf``, ``oneOf``, ``$ref``, ``if``...), which sees the fields its parts declare.

    The parts themselves stay open (closing each part of an ``allOf`` would refuse the
    other parts' fields): the branches of an object's ``allOf``/``anyOf``/``oneOf``,
    its ``then``/``else``, and a ``$defs`` entry used in an ``allOf`` or beside
    ``properties``. The alternatives of something that is not itself an object (a
    field that is an object or null) are whole shapes, and closed."""
    closed = _copy(schema)
    parts = _definitions_used_as_parts(closed)
    pending: list[tuple[Any, bool]] = [(closed, True)]
    while pending:
        node, whole = pending.pop()
        if not isinstance(node, dict):
            continue
        if whole and _describes_object(node) and not any(key in node for key in _OPENNESS):
            composed = "$ref" in node or "if" in node or "dependentSchemas" in node
            composed = composed or any(key in node for key in _IN_PLACE_MANY)
            node["unevaluatedProperties" if composed else "additionalProperties"] = False
        pending.extend(_closable_children(node, parts))
    return closed


def _closable_children(node: dict[str, Any], parts: set[str]) -> list[tuple[Any, bool]]:
    """Each subschema of ``node`` and whether it is a whole shape (closed if an object)."""
    is_object = _describes_object(node)
    children: list[tuple[Any, bool]] = [(node.get(key), True) for key in _SHAPES_ONE]
    for key in _SHAPES_MAP:
        named = node.get(key)
        if isinstance(named, dict):
            children.extend((child, True) for child in named.values())
    definitions = node.get("$defs")
    if isinstance(definitions, dict):
        children.extend((child, name not in parts) for name, child in definitions.items())
    prefix = node.get("prefixItems")
    if isinstance(prefix, list):
        children.extend((child, True) for child in prefix)
    for key in _IN_PLACE_MANY:
        branches = node.get(key)
        if isinstance(branches, list):
            children.extend((child, key != "allOf" and not is_object) for child in branches)
    children.extend((node.get(key), False) for key in _IN_PLACE_ONE)
    dependent = node.get("dependentSchemas")
    if isinstance(dependent, dict):
        children.extend((child, False) for child in dependent.values())
    return children


def _describes_object(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind) or "properties" in node


def _definitions_used_as_parts(schema: dict[str, Any]) -> set[str]:
    """The ``$defs`` names referenced from an ``allOf`` branch or by a ``$ref`` beside
    ``properties``: parts of another object's shape."""
    parts: set[str] = set()
    for _, node in iter_subschemas(schema):
        refs = [node.get("$ref")] if "properties" in node else []
        branches = node.get("allOf")
        if isinstance(branches, list):
            refs.extend(branch.get("$ref") for branch in branches if isinstance(branch, dict))
        for ref in refs:
            found = _LOCAL_REF.fullmatch(ref) if isinstance(ref, str) else None
            if found is not None:
                parts.add(found.group(1))
    return parts


class SchemaOutput:
    """A task output checked by a fixed JSON Schema."""

    def __init__(self, schema: dict[str, Any], *, where: str) -> None:
        self._schema = checked_schema(schema, where=where)
        self._validator = Draft202012Validator(self._schema)

    def json_schema(self) -> dict[str, Any]:
        return _copy(self._schema)

    def asked_schema(self, job_input: dict[str, Any]) -> dict[str, Any]:
        return self._schema

    def check(self, data: Any, *, asked: dict[str, Any] | None) -> dict[str, Any]:
        return checked_output(self._validator, data)


def checked_output(validator: Draft202012Validator, data: Any) -> dict[str, Any]:
    """``data`` if it is a JSON object the validator accepts; OutputViolationError if not."""
    if not isinstance(data, dict):
        raise OutputViolationError(["(top level): Input should be a JSON object"])
    violations = output_violations(validator, data)
    if violations:
        raise OutputViolationError(violations)
    return data


def input_violations(
    validator: Draft202012Validator, data: dict[str, Any]
) -> list[tuple[list[str | int], str]]:
    """Each error's location in the input and its message (keys the client sent
    appear in locations, as for every task; values never do)."""
    errors = _errors(validator, data)
    if errors is None:
        return [([], _TOO_DEEP)]
    found: list[tuple[list[str | int], str]] = []
    for error in errors:
        loc: list[str | int] = list(error.absolute_path)
        if error.validator == "required":
            found.extend(([*loc, name], "Field required") for name in _missing(error))
        elif error.validator == "additionalProperties" and isinstance(error.instance, dict):
            found.extend(
                ([*loc, key], "Extra inputs are not permitted") for key in _extra_keys(error)
            )
        else:
            found.append((loc, keyword_message(error)))
    return _unique(found)


def output_violations(validator: Draft202012Validator, data: Any) -> list[str]:
    """Each error as ``path: message``, the path naming declared fields only."""
    errors = _errors(validator, data)
    if errors is None:
        return [f"(top level): {_TOO_DEEP}"]
    schema = validator.schema
    declared = _declared_names(schema) if isinstance(schema, dict) else frozenset()
    found: list[str] = []
    for error in errors:
        path = [
            part if isinstance(part, int) or part in declared else "*"
            for part in error.absolute_path
        ]
        if error.validator == "required":
            found.extend(f"{_dotted([*path, name])}: Field required" for name in _missing(error))
        elif error.validator in ("additionalProperties", "unevaluatedProperties"):
            # The unexpected key was written by the model: say where, not what.
            found.append(f"{_dotted(path)}: unexpected field")
        else:
            found.append(f"{_dotted(path)}: {keyword_message(error)}")
    return list(dict.fromkeys(found))


def _errors(validator: Draft202012Validator, data: Any) -> list[SchemaValidationError] | None:
    """The errors in the order of their location; None when the document is nested
    too deeply to walk (a recursive schema over a deep answer)."""
    try:
        return sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.path])
    except RecursionError:
        return None


_TOO_DEEP = "Input is nested too deeply to check"


def keyword_message(error: SchemaValidationError) -> str:
    """A message for the failing keyword that quotes the schema, never the instance."""
    keyword, value = str(error.validator), error.validator_value
    fixed = _FIXED_MESSAGES.get(keyword)
    if fixed is not None:
        return fixed
    template = _VALUE_MESSAGES.get(keyword)
    if template is not None:
        return template.format(value=value)
    if keyword == "type":
        kinds = value if isinstance(value, list) else [value]
        return "Input should be of type " + " or ".join(str(kind) for kind in kinds)
    if keyword in ("enum", "const"):
        allowed = value if keyword == "enum" else [value]
        spelled = json.dumps(allowed, ensure_ascii=False)
        if len(spelled) <= _MAX_SPELLED:
            return f"Input should be one of {spelled[1:-1]}"
        return "Input should be one of the values the schema allows"
    return f"Input breaks the schema's {keyword!r} rule"


_FIXED_MESSAGES = {
    "anyOf": "Input should match at least one of the allowed shapes",
    "oneOf": "Input should match exactly one of the allowed shapes",
    "allOf": "Input should match every one of the required shapes",
    "not": "Input matches a shape the schema excludes",
    "uniqueItems": "List items should be unique",
    "unevaluatedProperties": "Extra inputs are not permitted",
    "None": "Input is not allowed here",  # a `false` subschema names no keyword
}
_VALUE_MESSAGES = {
    "minLength": "String should have at least {value} characters",
    "maxLength": "String should have at most {value} characters",
    "minimum": "Input should be greater than or equal to {value}",
    "maximum": "Input should be less than or equal to {value}",
    "exclusiveMinimum": "Input should be greater than {value}",
    "exclusiveMaximum": "Input should be less than {value}",
    "multipleOf": "Input should be a multiple of {value}",
    "pattern": "String should match pattern {value!r}",
    "minItems": "List should have at least {value} items",
    "maxItems": "List should have at most {value} items",
    "minProperties": "Object should have at least {value} fields",
    "maxProperties": "Object should have at most {value} fields",
}


def _missing(error: SchemaValidationError) -> list[str]:
    present = error.instance if isinstance(error.instance, dict) else {}
    required = error.validator_value if isinstance(error.validator_value, list) else []
    return [str(name) for name in required if name not in present]


def _extra_keys(error: SchemaValidationError) -> list[str]:
    schema = error.schema if isinstance(error.schema, dict) else {}
    declared = schema.get("properties", {})
    patterns = list(schema.get("patternProperties", {}))
    given = error.instance if isinstance(error.instance, dict) else {}
    return [
        key for key in given if key not in declared and not any(re.search(p, key) for p in patterns)
    ]


def _declared_names(schema: dict[str, Any]) -> frozenset[str]:
    names: set[str] = set()
    for _, node in iter_subschemas(schema):
        properties = node.get("properties")
        if isinstance(properties, dict):
            names.update(properties)
        required = node.get("required")
        if isinstance(required, list):
            names.update(str(name) for name in required)
    return frozenset(names)


def _with_simulate(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema as clients see it: with the optional ``simulate`` block."""
    published = _copy(schema)
    published.setdefault("properties", {})[_SIMULATE] = {
        "anyOf": [{"$ref": f"#/$defs/{_SIMULATE_DEF}"}, {"type": "null"}],
        "default": None,
    }
    published.setdefault("$defs", {})[_SIMULATE_DEF] = SimulateOptions.model_json_schema()
    return published


def _unique(found: list[tuple[list[str | int], str]]) -> list[tuple[list[str | int], str]]:
    seen: set[str] = set()
    unique = []
    for loc, msg in found:
        key = json.dumps([loc, msg])
        if key not in seen:
            seen.add(key)
            unique.append((loc, msg))
    return unique


def _join(path: str, part: str) -> str:
    return f"{path}.{part}" if path else part


def _dotted(parts: Any) -> str:
    return ".".join(str(part) for part in parts) or "(top level)"


def _copy(schema: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(schema))  # type: ignore[no-any-return]
