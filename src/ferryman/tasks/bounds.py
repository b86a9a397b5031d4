"""Which fields of an input schema take free text without a length limit.

Every string a client can send has a documented limit (docs/reference.md): a field
without one could fill the whole body. The same walk serves the JSON Schemas that
pydantic writes for input models and the ones declared in TOML.
"""

from __future__ import annotations

from typing import Any

# Keywords whose value is one subschema, a list of them, or a map of them. The rest
# (enum, const, default, examples...) hold values, which are never walked.
_ONE = ("items", "additionalProperties", "not", "if", "then", "else", "contains")
_MANY = ("anyOf", "oneOf", "allOf", "prefixItems")
_MAP = ("patternProperties", "dependentSchemas")
# Any of these bound a string as well as maxLength does.
_BOUNDING = frozenset({"maxLength", "enum", "const"})


def unbounded_strings(schema: dict[str, Any]) -> list[str]:
    """The fields (dotted paths, at any depth) that take free text with no maxLength.

    ``$ref``s into the schema's own ``$defs`` are followed, each once.
    """
    definitions: dict[str, Any] = schema.get("$defs", {})
    found: set[str] = set()
    pending: list[tuple[str, Any]] = [("", schema)]
    seen_refs: set[str] = set()
    while pending:
        path, node = pending.pop()
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and ref not in seen_refs:
            seen_refs.add(ref)
            pending.append((path, definitions.get(ref.rsplit("/", 1)[-1])))
        if _takes_text(node) and not _BOUNDING & node.keys():
            found.add(path or "(top level)")
        properties = node.get("properties")
        if isinstance(properties, dict):
            pending.extend(
                (f"{path}.{name}" if path else str(name), child)
                for name, child in properties.items()
            )
        for key in _MANY:
            children = node.get(key)
            if isinstance(children, list):
                pending.extend((path, child) for child in children)
        for key in _MAP:
            children = node.get(key)
            if isinstance(children, dict):
                pending.extend((path, child) for child in children.values())
        pending.extend((path, node.get(key)) for key in _ONE)
    return sorted(found)


def _takes_text(node: dict[str, Any]) -> bool:
    kind = node.get("type")
    return kind == "string" or (isinstance(kind, list) and "string" in kind)
