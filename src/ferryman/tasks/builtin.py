"""The tasks every ferryman knows: ``generate``, ``classify_ticket``, ``summarize``, ``extract``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ferryman.tasks.definition import (
    DEFAULT_MODEL,
    PromptParts,
    TaskDefinition,
    TaskInput,
    TaskOutput,
)
from ferryman.tasks.extract import EXTRACT, MAX_EXTRACT_TEXT_CHARS, MAX_TOKENS_LIMIT
from ferryman.tasks.models import ModelInput, ModelOutput
from ferryman.tasks.registry import TaskRegistry

__all__ = [
    "CLASSIFY_TICKET",
    "DEFAULT_MODEL",
    "EXTRACT",
    "GENERATE",
    "MAX_EXTRACT_TEXT_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_SUMMARIZE_TEXT_CHARS",
    "MAX_SYSTEM_CHARS",
    "MAX_TICKET_CHARS",
    "MAX_TOKENS_LIMIT",
    "SUMMARIZE",
    "builtin_tasks",
]

# Text limits, in characters (code points); docs/reference.md lists every one.
MAX_PROMPT_CHARS = 100_000
MAX_SYSTEM_CHARS = 20_000
MAX_TICKET_CHARS = 20_000
MAX_SUMMARIZE_TEXT_CHARS = 100_000
MAX_SUMMARY_WORDS = 5_000


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
    inputs=ModelInput(GenerateInput),
    outputs=ModelOutput(GenerateOutput),
    render=_render_generate,
    description='Answer a prompt (and optional system prompt) with {"text": ...}.',
)


class ClassifyTicketInput(TaskInput):
    ticket: str = Field(min_length=1, max_length=MAX_TICKET_CHARS)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)


class ClassifyTicketOutput(TaskOutput):
    category: Literal["billing", "technical", "account"]
    priority: Literal["low", "medium", "high"]
    summary: str = Field(min_length=1, max_length=500)


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
        max_tokens=given.max_tokens,
    )


CLASSIFY_TICKET = TaskDefinition(
    name="classify_ticket",
    inputs=ModelInput(ClassifyTicketInput),
    outputs=ModelOutput(ClassifyTicketOutput),
    render=_render_classify_ticket,
    description="Triage a support ticket: category, priority and a one-sentence summary.",
    # Enough for the three fields with a 500-character summary.
    max_tokens=400,
)


class SummarizeInput(TaskInput):
    text: str = Field(min_length=1, max_length=MAX_SUMMARIZE_TEXT_CHARS)
    max_words: int | None = Field(default=None, ge=1, le=MAX_SUMMARY_WORDS)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)


class SummarizeOutput(TaskOutput):
    summary: str = Field(min_length=1, max_length=MAX_SUMMARIZE_TEXT_CHARS)


_SUMMARIZE_SYSTEM = (
    "You summarise text faithfully and concisely, adding nothing the text does not say. "
    "Answer with one JSON object and nothing else."
)


def _render_summarize(given: SummarizeInput) -> PromptParts:
    limit = f", in at most {given.max_words} words" if given.max_words else ""
    max_tokens = given.max_tokens
    if max_tokens is None and given.max_words:
        # About 1.3 tokens a word in English, with room for the JSON around it: a
        # word limit the model honours never runs into the token limit.
        max_tokens = given.max_words * 2 + 64
    return PromptParts(
        system=_SUMMARIZE_SYSTEM,
        prompt=(
            'Summarise the text below. Answer with a JSON object with one field, "summary": '
            f"the summary{limit}.\n\nText:\n{given.text}"
        ),
        max_tokens=max_tokens,
    )


SUMMARIZE = TaskDefinition(
    name="summarize",
    inputs=ModelInput(SummarizeInput),
    outputs=ModelOutput(SummarizeOutput),
    render=_render_summarize,
    description="Summarise a text, optionally in at most max_words words.",
)


def builtin_tasks() -> TaskRegistry:
    """A new registry holding the built-in tasks (callers may register more)."""
    registry = TaskRegistry()
    for definition in (GENERATE, CLASSIFY_TICKET, SUMMARIZE, EXTRACT):
        registry.register(definition)
    return registry
