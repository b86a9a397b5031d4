"""What every command shares: settings, consoles, exit codes, running a coroutine."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.text import Text

from ferryman.config import ConfigurationError, load_settings
from ferryman.observability.logging import configure_logging
from ferryman.wiring import InvalidUrlError, UnsupportedBackendError

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from ferryman.config import Settings

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2  # bad flags, bad JSON, bad configuration: nothing was done
EXIT_WAIT_TIMEOUT = 3

# stdout carries only what a command returns (a key, JSON), so scripts can capture it.
err_console = Console(stderr=True, soft_wrap=True)  # messages stay one line in logs
out_console = Console()


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    err_console.print(Text.assemble(("error: ", "bold red"), message))
    raise typer.Exit(code)


def settings(**overrides: Any) -> Settings:
    """The process settings, or a clear message and exit 2."""
    try:
        loaded = load_settings(**overrides)
    except ConfigurationError as exc:
        fail(exc.message, EXIT_USAGE)
    configure_logging(loaded.log_level, loaded.log_json)
    return loaded


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run a command's coroutine; configuration problems found on the way exit 2."""
    try:
        return asyncio.run(coroutine)
    except (UnsupportedBackendError, InvalidUrlError, ConfigurationError) as exc:
        fail(exc.message, EXIT_USAGE)


def print_json(value: Any) -> None:
    sys.stdout.write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def parse_json_object(text: str, option: str) -> dict[str, Any]:
    """Parse an option's JSON object, or exit 2 saying what is wrong (nothing is sent)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(
            f"{option} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})",
            EXIT_USAGE,
        )
    if not isinstance(value, dict):
        fail(f'{option} must be a JSON object, like \'{{"prompt": "hi"}}\'', EXIT_USAGE)
    return value
