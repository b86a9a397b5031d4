"""The simulated model ``sim``: deterministic answers and scripted failures, no network.

The answer is derived from the request alone, so the same job always gets the same
output: for ``generate`` an echo of the prompt, for any other task a JSON object
synthesised from the task's output schema (the sim knows no task but ``generate``).

A job may script the sim through ``request.extras["simulate"]`` (the task input's
``simulate`` block, validated at intake): attempt n follows entry n of ``script``
and the last entry repeats. ``latency_ms`` delays every answer.

A call costs a coroutine and a few small objects: no threads, no buffers, so a
worker can hold thousands of slow sim calls at once.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from ferryman.core.errors import (
    ProviderBadRequestError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    SafetyRejectedError,
    ThrottledError,
)
from ferryman.ports.provider import ModelRequest, ModelResponse

SIM_MODEL = "sim"

# How many trailing prompt words a synthesised string quotes.
_QUOTED_WORDS = 12
# Schemas nest; a self-referencing one must not recurse forever.
_MAX_DEPTH = 16

_FAILURES: dict[str, type[ProviderError]] = {
    "server_error": ProviderServerError,
    "refuse": SafetyRejectedError,
    "bad_request": ProviderBadRequestError,
}
_ANSWERS = frozenset({"ok", "malformed", "invalid_schema"})


@dataclass(frozen=True, slots=True)
class _Script:
    latency_seconds: float = 0.0
    script: tuple[str, ...] = ()
    retry_after_seconds: float = 1.0

    @classmethod
    def from_extras(cls, extras: dict[str, Any]) -> _Script:
        block = extras.get("simulate")
        if not isinstance(block, dict):
            return _UNSCRIPTED
        return cls(
            latency_seconds=float(block.get("latency_ms", 0)) / 1000.0,
            script=tuple(block.get("script") or ()),
            retry_after_seconds=float(block.get("retry_after_seconds", 1.0)),
        )

    def entry(self, attempt_no: int) -> str:
        if not self.script:
            return "ok"
        return self.script[min(max(attempt_no, 1), len(self.script)) - 1]


_UNSCRIPTED = _Script()

SleepFunction = Callable[[float], Awaitable[None]]


class SimulatedProvider:
    """The ``sim`` model. ``sleep`` is injectable so tests never wait."""

    def __init__(
        self, *, name: str = SIM_MODEL, sleep: SleepFunction = asyncio.sleep, scripts: bool = True
    ) -> None:
        self._name = name
        self._sleep = sleep
        # Off (FERRYMAN_SIM_SCRIPTS=false): intake refuses scripts, and a job stored
        # while they were on runs unscripted rather than as its client asked.
        self._scripts = scripts

    @property
    def name(self) -> str:
        return self._name

    async def check(self) -> None:
        """Always reachable: it is in this process."""

    async def aclose(self) -> None:
        """Nothing to let go of."""

    async def invoke(self, request: ModelRequest, *, timeout_seconds: float) -> ModelResponse:
        script = _Script.from_extras(request.extras) if self._scripts else _UNSCRIPTED
        entry = script.entry(request.attempt_no)
        # As unique as a uuid4's hex, without its cost or a system call per call (the
        # id of a simulated request need not be unguessable, only unique).
        request_id = f"sim-{random.getrandbits(128):032x}"
        if entry == "timeout" or script.latency_seconds >= timeout_seconds:
            await self._sleep(max(timeout_seconds, 0.0))
            raise ProviderTimeoutError(
                "the simulated model did not answer within the timeout",
                provider_request_id=request_id,
                scripted=True,  # only a script makes the sim slow
            )
        if script.latency_seconds > 0:
            await self._sleep(script.latency_seconds)
        text = _answer(request, entry, script, request_id)
        return ModelResponse(
            text=text,
            input_tokens=_words(request.system or "") + _words(request.prompt),
            output_tokens=_words(text),
            provider_request_id=request_id,
        )


def _answer(request: ModelRequest, entry: str, script: _Script, request_id: str) -> str:
    """The text the scripted entry answers with, or the error it raises."""
    if entry == "throttle":
        raise ThrottledError(
            "the simulated model is throttling (scripted)",
            retry_after_seconds=script.retry_after_seconds,
            provider_request_id=request_id,
            scripted=True,
        )
    failure = _FAILURES.get(entry)
    if failure is not None:
        raise failure(
            f"simulated {entry} (scripted)", provider_request_id=request_id, scripted=True
        )
    if entry not in _ANSWERS:
        raise ProviderBadRequestError(
            "unknown simulate script entry", provider_request_id=request_id
        )
    if entry == "invalid_schema":
        return _schema_breaking(request.output_schema)
    valid = _valid_output(request)
    if entry == "malformed":
        # A proper prefix of a JSON object or array is never JSON: a cut-off answer.
        return valid[: len(valid) // 2]
    return valid


# The string encoder json.dumps uses (ensure_ascii, as json.dumps by default).
_json_string: Callable[[str], str] = json.encoder.encode_basestring_ascii


def _words(text: str) -> int:
    return len(text.split())


def _valid_output(request: ModelRequest) -> str:
    if request.task == "generate":
        # json.dumps({"text": ...}) written out (its string encoder, its separators):
        # the same text at a tenth of the cost, on every sim call.
        return '{"text": ' + _json_string(_echo(request.prompt, request.max_tokens)) + "}"
    return json.dumps(SchemaSynthesizer(request.output_schema, request.prompt).value())


def _echo(prompt: str, max_tokens: int | None) -> str:
    text = f"echo: {prompt}"
    if max_tokens is not None:
        words = text.split()
        if len(words) > max_tokens:
            text = " ".join(words[: max(max_tokens, 1)])
    return text


def _schema_breaking(schema: dict[str, Any]) -> str:
    """Valid JSON that the output schema rejects."""
    if schema.get("type") == "object" and schema.get("required"):
        # An object with every required field missing.
        return json.dumps({"sim_unexpected": "the required fields are missing"})
    if schema.get("type") == "array":
        return json.dumps({"sim_unexpected": "an object where a list belongs"})
    return json.dumps(["sim_unexpected", "a list where an object belongs"])


class SchemaSynthesizer:
    """A value that satisfies a JSON schema (the subset pydantic writes), chosen
    deterministically from the prompt: enums by a hash of the prompt and the field's
    path, strings quoting the prompt's last words within the length limits."""

    def __init__(self, schema: dict[str, Any], prompt: str) -> None:
        self._root = schema
        self._prompt = prompt
        self._seed = hashlib.sha256(prompt.encode("utf-8", "surrogatepass")).digest()

    def value(self) -> Any:
        return self._synth(self._root, path="", depth=0)

    def _synth(self, schema: dict[str, Any] | bool, *, path: str, depth: int) -> Any:
        if depth > _MAX_DEPTH:
            return None
        if isinstance(schema, bool):
            # JSON Schema's boolean forms: true takes anything, false nothing at all.
            return "sim" if schema else None
        schema = self._resolve(schema)
        if "const" in schema:
            return schema["const"]
        if "enum" in schema:
            options = schema["enum"]
            return options[self._pick(path) % len(options)]
        for combinator in ("anyOf", "oneOf", "allOf"):
            if combinator in schema:
                return self._synth(_first_non_null(schema[combinator]), path=path, depth=depth + 1)
        kind = _type_of(schema)
        if kind == "object":
            return self._object(schema, path=path, depth=depth)
        if kind == "array":
            return self._array(schema, path=path, depth=depth)
        return self._scalar(kind, schema, path=path)

    def _resolve(self, schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref")
        if not isinstance(ref, str) or not ref.startswith("#/"):
            return schema
        target: Any = self._root
        for part in ref[2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return target if isinstance(target, dict) else {}

    def _object(self, schema: dict[str, Any], *, path: str, depth: int) -> dict[str, Any]:
        properties: dict[str, Any] = schema.get("properties", {})
        return {
            name: self._synth(sub, path=f"{path}/{name}", depth=depth + 1)
            for name, sub in properties.items()
        }

    def _array(self, schema: dict[str, Any], *, path: str, depth: int) -> list[Any]:
        count = max(int(schema.get("minItems", 1)), 1)
        if "maxItems" in schema:
            count = min(count, int(schema["maxItems"]))
        items = schema.get("items", {})
        return [self._synth(items, path=f"{path}/{i}", depth=depth + 1) for i in range(count)]

    def _scalar(self, kind: str, schema: dict[str, Any], *, path: str) -> Any:
        if kind == "boolean":
            return self._pick(path) % 2 == 0
        if kind in ("integer", "number"):
            return self._number(schema, path=path, integer=kind == "integer")
        if kind == "null":
            return None
        return self._string(schema, path=path)

    def _number(self, schema: dict[str, Any], *, path: str, integer: bool) -> int | float:
        low = schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1)
        high = schema.get("maximum", schema.get("exclusiveMaximum", low + 101) - 1)
        # Any value in range will do; a small one derived from the prompt looks plausible.
        if high < low:
            value = high
        elif high >= low + 100:
            value = low + self._pick(path) % 100
        else:
            value = low
        return int(value) if integer else float(value)

    def _string(self, schema: dict[str, Any], *, path: str) -> str:
        quoted = " ".join(self._prompt.split()[-_QUOTED_WORDS:])
        text = f"sim: {quoted}" if quoted else "sim"
        maximum = schema.get("maxLength")
        if maximum is not None:
            text = text[: int(maximum)]
        minimum = int(schema.get("minLength", 0))
        return text + "x" * max(0, minimum - len(text))

    def _pick(self, path: str) -> int:
        digest = hashlib.sha256(self._seed + path.encode("utf-8")).digest()
        return int.from_bytes(digest[:8], "big")


def _type_of(schema: dict[str, Any]) -> str:
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string" and "properties" in schema:
        return "object"
    return str(kind)


def _first_non_null(options: list[dict[str, Any]]) -> dict[str, Any]:
    return next((o for o in options if o.get("type") != "null"), options[0] if options else {})
