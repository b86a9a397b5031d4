"""Prompt templates of declared tasks: text with ``{{ input.FIELD }}`` placeholders.

That is the whole language: no expressions, filters, conditions or loops. It cannot
run code because it has none to run, its cost is linear in its output, and every
placeholder is checked against the task's input schema when the task is defined,
so a misspelt field stops the deployment instead of failing each job on a worker.
A task that needs logic in its prompt is written in Python (``@task``).

A value is inserted once, as text, and never read as a template itself, so an
input holding ``{{ input.other }}`` stays exactly that.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_OPEN = "{{"
_PLACEHOLDER = re.compile(r"\{\{\s*input((?:\.[A-Za-z0-9_-]+)+)\s*\}\}")


class TemplateError(ValueError):
    """A template does not parse, or names a field its task's input does not have."""


@dataclass(frozen=True, slots=True)
class PromptTemplate:
    """A parsed template: literal text and field paths, in order."""

    pieces: tuple[str | tuple[str, ...], ...]

    @classmethod
    def parse(cls, text: str) -> PromptTemplate:
        """Split ``text`` into literals and placeholders; every ``{{`` must open a
        placeholder (TemplateError naming the line and column otherwise)."""
        pieces: list[str | tuple[str, ...]] = []
        position = 0
        while (start := text.find(_OPEN, position)) != -1:
            found = _PLACEHOLDER.match(text, start)
            if found is None:
                line = text.count("\n", 0, start) + 1
                column = start - (text.rfind("\n", 0, start) + 1) + 1
                raise TemplateError(
                    f"line {line} column {column}: '{{{{' opens no placeholder; "
                    "the only form is {{ input.FIELD }} (or {{ input.FIELD.SUBFIELD }})"
                )
            if start > position:
                pieces.append(text[position:start])
            pieces.append(tuple(found.group(1).split(".")[1:]))
            position = found.end()
        if position < len(text):
            pieces.append(text[position:])
        return cls(tuple(pieces))

    def fields(self) -> list[tuple[str, ...]]:
        return [piece for piece in self.pieces if isinstance(piece, tuple)]

    def render(self, given: Mapping[str, Any]) -> str:
        """The text with each placeholder replaced by its field's value: strings as
        they are, other values as JSON, an absent optional field as nothing."""
        return "".join(
            piece if isinstance(piece, str) else _text(_lookup(given, piece))
            for piece in self.pieces
        )


def check_fields(template: PromptTemplate, schema: dict[str, Any]) -> None:
    """TemplateError unless every placeholder names a field the input schema declares."""
    for path in template.fields():
        if not _declares(schema, schema, path):
            raise TemplateError(
                f"{{{{ input.{'.'.join(path)} }}}} names no field of the input schema"
            )


def _declares(root: dict[str, Any], node: Any, path: tuple[str, ...]) -> bool:
    if not path:
        return True
    for candidate in _alternatives(root, node):
        properties = candidate.get("properties")
        if (
            isinstance(properties, dict)
            and path[0] in properties
            and _declares(root, properties[path[0]], path[1:])
        ):
            return True
    return False


def _alternatives(root: dict[str, Any], node: Any, depth: int = 0) -> list[dict[str, Any]]:
    """``node`` and the schemas it stands for: its $ref target, its combinator branches."""
    if not isinstance(node, dict) or depth > 8:
        return []
    found = [node]
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        target = root.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        found.extend(_alternatives(root, target, depth + 1))
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key, []) if isinstance(node.get(key), list) else []:
            found.extend(_alternatives(root, branch, depth + 1))
    return found


def _lookup(given: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = given
    for part in path:
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
