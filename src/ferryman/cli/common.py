"""What every command shares: settings, consoles, exit codes, running a coroutine."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import re
import sys
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from ferryman.config import ConfigurationError, load_settings, unknown_variables
from ferryman.observability.logging import configure_logging
from ferryman.wiring import InvalidUrlError, UnsupportedBackendError

if TYPE_CHECKING:
    from collections.abc import Coroutine

    from rich.table import Table

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


def warn(message: str) -> None:
    err_console.print(Text.assemble(("warning: ", "bold yellow"), message))


def settings(**overrides: Any) -> Settings:
    """The process settings, or a clear message and exit 2.

    A FERRYMAN_* variable that no setting reads is most likely a typo whose intended
    value is not in force: every command says so on stderr (and doctor fails on it).
    """
    for unknown in unknown_variables():
        warn(unknown.describe())
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


_DURATION = re.compile(r"(?P<amount>\d+(?:\.\d+)?)(?P<unit>[smhdw])")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 604_800}


def parse_duration(text: str, option: str) -> float:
    """``90s``, ``15m``, ``12h``, ``30d`` or ``2w`` as seconds, or exit 2 saying what is wrong."""
    match = _DURATION.fullmatch(text.strip().lower())
    if match is None or float(match["amount"]) <= 0:
        fail(
            f"{option} takes a positive duration with a unit: 90s, 15m, 12h, 30d or 2w "
            f"(got {text!r})",
            EXIT_USAGE,
        )
    return float(match["amount"]) * _UNIT_SECONDS[match["unit"]]


def parse_instant(text: str, option: str) -> float:
    """An RFC 3339 date and time with its UTC offset, as epoch seconds, or exit 2."""
    try:
        moment = dt.datetime.fromisoformat(text.strip())
    except ValueError:
        moment = None
    if moment is None or moment.tzinfo is None:
        fail(
            f"{option} takes an RFC 3339 date and time with its offset, like "
            f"2030-01-31T18:00:00Z or 2030-01-31T19:00:00+01:00 (got {text!r})",
            EXIT_USAGE,
        )
    return moment.timestamp()


def instant(at: float | None) -> str:
    """A time as tables show it: UTC to the second, ``-`` when absent."""
    if at is None:
        return "-"
    return dt.datetime.fromtimestamp(at, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def print_table(table: Table) -> None:
    """Print a table whole on stdout: never narrower than its longest unbreakable cell.

    Rich fits a table to the terminal by folding or cutting cells, which breaks ids
    that must be copied whole. A console at least as wide as the table's minimum
    keeps every id and timestamp on one line (a narrow terminal may then wrap the
    line itself, but the text stays intact for copy and paste and for pipes).
    """
    options = out_console.options.update(max_width=10_000)
    need = Measurement.get(out_console, options, table).minimum
    Console(file=out_console.file, width=max(out_console.width, need)).print(table)
