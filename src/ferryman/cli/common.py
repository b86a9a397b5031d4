"""What every command shares: settings, consoles, exit codes, running a coroutine,
and the line between the client's commands and the server's.

This module, like every command's signature, imports nothing of the server: a
``pip install ferryman`` (client only) runs the client's commands, and a server
command says which extra it needs instead of failing with an ImportError.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json
import re
import sys
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.text import Text

from ferryman.config import ConfigurationError, load_settings, unknown_variables
from ferryman.engines import InvalidUrlError, UnsupportedBackendError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Coroutine

    from rich.table import Table

    from ferryman.config import Settings
    from ferryman.wiring import Runtime

T = TypeVar("T")
P = ParamSpec("P")

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


def client_settings(**overrides: Any) -> Settings:
    """The process settings, or a clear message and exit 2 (no logging set up: the
    client's commands log nothing).

    A FERRYMAN_* variable that no setting reads is most likely a typo whose intended
    value is not in force: every command says so on stderr (and doctor fails on it).
    """
    for unknown in unknown_variables():
        warn(unknown.describe())
    try:
        return load_settings(**overrides)
    except ConfigurationError as exc:
        fail(exc.message, EXIT_USAGE)


def settings(**overrides: Any) -> Settings:
    """The settings of a server command, with its logging set up (to stderr)."""
    from ferryman.observability.logging import configure_logging  # the server's (structlog)

    loaded = client_settings(**overrides)
    configure_logging(loaded.log.level, loaded.log.json_lines)
    return loaded


SERVER_EXTRA_HINT = "pip install 'ferryman[server]'"
# Packages of other extras than the server's, and the line that installs them.
_EXTRA_HINTS = {"boto3": "pip install 'ferryman[aws]'", "botocore": "pip install 'ferryman[aws]'"}


def needs_server(command: Callable[P, T]) -> Callable[P, T]:
    """Mark a command that runs the server side (or opens its database): without the
    server's dependencies it says which extra to install (exit 2), not a traceback."""

    @functools.wraps(command)
    def run_command(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return command(*args, **kwargs)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").partition(".")[0]
            if not missing or missing == "ferryman":
                raise
            hint = _EXTRA_HINTS.get(missing, SERVER_EXTRA_HINT)
            fail(
                "this command runs ferryman's server side, whose dependencies are not "
                f"installed (no module named {missing!r}); install them with: {hint}",
                EXIT_USAGE,
            )

    return run_command


def run(
    coroutine: Coroutine[Any, Any, T],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """Run a command's coroutine; configuration problems found on the way exit 2."""
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(coroutine)
    except (UnsupportedBackendError, InvalidUrlError, ConfigurationError) as exc:
        fail(exc.message, EXIT_USAGE)


@asynccontextmanager
async def existing_database(s: Settings) -> AsyncIterator[Runtime]:
    """The runtime over the configured database, which must exist: commands that only
    look or change existing rows never make a new, empty database. They call no model,
    so they run without the providers' keys."""
    from ferryman.wiring import check_urls, open_runtime, probe_database

    check_urls(s)  # a bad URL is a configuration error (exit 2) before anything else
    probe = await probe_database(s)
    if not probe.exists:
        fail(no_database_message(probe.path))
    async with open_runtime(s, create=False, call_models=False) as runtime:
        yield runtime


def no_database_message(location: str) -> str:
    """What to check when the configured database is not there: for a file, where a
    relative path is taken from; for a server URL, only the URL."""
    where = (
        ""
        if "://" in location
        else (f" (a relative path is taken from the working directory, {Path.cwd()})")
    )
    return f"no database at {location}: check FERRYMAN_DATABASE_URL{where}"


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


def instant(at: float | dt.datetime | None) -> str:
    """A time as tables show it: RFC 3339 in UTC to the second with a ``Z``, ``-`` when
    absent (epoch seconds, or an aware datetime as the client's models hold)."""
    if at is None:
        return "-"
    moment = at if isinstance(at, dt.datetime) else dt.datetime.fromtimestamp(at, dt.UTC)
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def print_table(table: Table) -> None:
    """Print a table whole on stdout: never narrower than its longest unbreakable cell.

    Rich fits a table to the terminal by folding or cutting cells, which breaks ids
    that must be copied whole. A console at least as wide as the table's minimum
    keeps every id and timestamp on one line (a narrow terminal may then wrap the
    line itself, but the text stays intact for copy and paste and for pipes).
    """
    options = out_console.options.update(max_width=10_000)
    for column in table.columns:
        if column.no_wrap:
            # Rich may still cut a no_wrap cell with an ellipsis when the table is wide;
            # a minimum width of its widest cell (header included) rules that out.
            cells = [column.header, *column.cells]
            column.min_width = max(Measurement.get(out_console, options, c).maximum for c in cells)
    need = Measurement.get(out_console, options, table).minimum
    Console(file=out_console.file, width=max(out_console.width, need)).print(table)
