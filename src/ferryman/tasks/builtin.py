"""The tasks every ferryman knows: ``generate`` and ``classify_ticket``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ferryman.tasks.definition import PromptParts, TaskDefinition, TaskInput, TaskOutput
from ferryman.tasks.registry import TaskRegistry

DEFAULT_MODEL = "sim"
MAX_TOKENS_LIMIT = 32_000
# Text limits, in characters (code points); docs/reference.md lists every one.
MAX_PROMPT_CHARS = 100_000
MAX_SYSTEM_CHARS = 20_000
MAX_TICKET_CHARS = 20_000


class GenerateInput(TaskInput):
    prompt: str = Field(min_length=1, max_length=MAX_PROMPT_CHARS)
    system: str | None = Field(default=None, max_length=MAX_SYSTEM_CHARS)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)


class GenerateOutput(TaskOutput):
    text: str = Field(min_length=1)


def _render_generate(given: GenerateInput) -> PromptParts:
    # The prompt goes to the model as written; the output schema asks for {"text": ...}.
    return PromptParts(system=given.system, prompt=given.prompt, max_tokens=given.max_tokens)


GENERATE = TaskDefinition(
    name="generate",
    input_model=GenerateInput,
    output_model=GenerateOutput,
    default_model=DEFAULT_MODEL,
    render=_render_generate,
)


class ClassifyTicketInput(TaskInput):
    ticket: str = Field(min_length=1, max_length=MAX_TICKET_CHARS)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)


class ClassifyTicketOutput(TaskOutput):
    category: Literal["billing", "technical", "account"]
    priority: Literal["low", "medium", "high"]
    summary: str = Field(min_length=1, max_length=500)


# Enough for the three fields with a 500-character summary.
_CLASSIFY_MAX_TOKENS = 400

_CLASSIFY_SYSTEM = (
    "You triage customer support tickets. Answer with one JSON object and nothing else."
)

_CLASSIFY_INSTRUCTIONS = (
    "Classify the support ticket below. Answer with a JSON object with exactly these fields:\n"
    '- "category": one of "billing", "technical", "account"\n'
    '- "priority": one of "low", "medium", "high"\n'
    '- "summary": a one-sentence summary of the ticket, at most 500 characters\n'
    "\nTicket:\n"
)


def _render_classify_ticket(given: ClassifyTicketInput) -> PromptParts:
    return PromptParts(
        system=_CLASSIFY_SYSTEM,
        prompt=_CLASSIFY_INSTRUCTIONS + given.ticket,
        max_tokens=given.max_tokens or _CLASSIFY_MAX_TOKENS,
    )


CLASSIFY_TICKET = TaskDefinition(
    name="classify_ticket",
    input_model=ClassifyTicketInput,
    output_model=ClassifyTicketOutput,
    default_model=DEFAULT_MODEL,
    render=_render_classify_ticket,
)


def builtin_tasks() -> TaskRegistry:
    """A new registry holding the built-in tasks (callers may register more)."""
    registry = TaskRegistry()
    registry.register(GENERATE)
    registry.register(CLASSIFY_TICKET)
    return registry
