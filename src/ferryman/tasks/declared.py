"""Tasks declared without code: ``[tasks.NAME]`` in ferryman.toml, or ``tasks_dir/NAME.toml``.

A declared task is an input JSON Schema, a prompt template (and optionally a
system template, see ``tasks/templates.py``), an output JSON Schema and defaults.
Everything is checked here, once, at startup: a schema that is not valid Draft
2020-12, an input string without a maxLength, a template that does not parse or
names a field the input does not declare, each stops the deployment with a
message naming the task and the part at fault.
"""

from __future__ import annotations

from typing import Any

from ferryman.tasks.definition import (
    DEFAULT_MODEL,
    PromptParts,
    TaskDefinition,
    TaskDefinitionError,
)
from ferryman.tasks.schemas import SchemaInput, SchemaOutput
from ferryman.tasks.templates import PromptTemplate, TemplateError, check_fields


def declared_task(
    *,
    name: str,
    origin: str,
    prompt: str,
    input_schema: dict[str, Any],
    output_schema: dict[str, Any],
    system: str | None = None,
    description: str | None = None,
    model: str | None = None,
    max_attempts: int | None = None,
    max_invalid_output_attempts: int | None = None,
    max_tokens: int | None = None,
    temperature: float | None = None,
) -> TaskDefinition[dict[str, Any]]:
    """The task a TOML table declares; TaskDefinitionError naming what is wrong."""
    where = f"task {name!r} ({origin})"
    inputs = SchemaInput(input_schema, where=f"{where}: input_schema")
    outputs = SchemaOutput(output_schema, where=f"{where}: output_schema")
    prompt_template = _template(prompt, inputs, where=f"{where}: prompt")
    system_template = (
        None if system is None else _template(system, inputs, where=f"{where}: system")
    )

    def render(given: dict[str, Any]) -> PromptParts:
        return PromptParts(
            system=None if system_template is None else system_template.render(given),
            prompt=prompt_template.render(given),
        )

    return TaskDefinition(
        name=name,
        inputs=inputs,
        outputs=outputs,
        render=render,
        default_model=model or DEFAULT_MODEL,
        description=description,
        origin=origin,
        max_attempts=max_attempts,
        max_invalid_output_attempts=max_invalid_output_attempts,
        max_tokens=max_tokens,
        temperature=temperature,
    )


def _template(text: str, inputs: SchemaInput, *, where: str) -> PromptTemplate:
    try:
        template = PromptTemplate.parse(text)
        # The published schema has ``simulate`` too, but it is the sim's, never a prompt's.
        schema = inputs.json_schema()
        schema["properties"].pop("simulate", None)
        check_fields(template, schema)
    except TemplateError as exc:
        raise TaskDefinitionError(f"{where}: {exc}") from None
    return template
