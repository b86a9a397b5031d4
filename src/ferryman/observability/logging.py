"""Structured logging: one configuration for every process, key=value or JSON lines.

Log lines carry identifiers (job, tenant, correlation id, attempt), never request
bodies, prompts or model outputs: those are customer data. These rules hold in
every format, whatever a caller passes:

- An exception is logged as its type, its frames as ``file:line:function`` and the
  types of its causes. Its message is kept only for ferryman's own errors, whose
  messages never quote customer data (a pydantic or codec error may). Nothing ever
  renders local variables or source lines: rich tracebacks printed every frame's
  locals, request bodies included, and took the event loop seconds per error.
- Every string is escaped to printable characters, so a value holding terminal
  escape sequences or newlines can neither recolour the console nor forge a line.
- stdlib logging (uvicorn, asyncio) goes through the same rules. From loggers that
  are not ferryman's only a message's first line is kept: later lines are reprs
  (asyncio prints a failed task with its arguments).

Rendering is cheap and done by the caller; writing is not, so lines go out through
a bounded queue and a writer thread (observability/log_output.py).
"""

from __future__ import annotations

import enum
import logging
import sys
from datetime import datetime
from pathlib import PurePath
from types import TracebackType
from typing import TYPE_CHECKING, Any

import structlog

from ferryman.core.errors import FerrymanError
from ferryman.observability.log_output import LINE_WRITER

if TYPE_CHECKING:
    from collections.abc import MutableMapping

_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}
# Enough to find the failing call; the rest are the framework's own frames.
_MAX_FRAMES = 12
_MAX_CAUSES = 5
# Nested values are escaped this deep; anything deeper is shown as its type.
_MAX_DEPTH = 4

ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]

# The lowest level configure_logging lets through (0 until it is called: structlog's
# defaults write every level).
_min_level = 0


def enabled(level: int) -> bool:
    """Would a line at ``level`` (logging.DEBUG, ...) be written? For a hot path that
    would otherwise build a line's fields on every call only for it to be dropped."""
    return level >= _min_level


class _QueuedLogger:
    """The end of structlog's chain: hands the rendered line to the writer thread."""

    def msg(self, message: str) -> None:
        LINE_WRITER.write(message)

    log = debug = info = warn = warning = msg
    fatal = failure = err = error = critical = exception = msg


def _queued_logger_factory(*args: Any) -> _QueuedLogger:
    return _QueuedLogger()


def escape_text(text: str) -> str:
    """``text`` with every non-printable character written as a Python escape."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _escaped(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return escape_text(value)
    if isinstance(value, int | float | bool) or value is None:
        return value
    if depth >= _MAX_DEPTH:
        return f"<{type(value).__name__}>"
    if isinstance(value, dict):
        return {escape_text(str(k)): _escaped(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_escaped(v, depth + 1) for v in value]
    if isinstance(value, enum.Enum | PurePath | datetime):
        return escape_text(str(value))
    # Any other object is named, never shown: its repr may hold a whole request.
    return f"<{type(value).__name__}>"


def escape_fields(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: escape every key and value (see ``escape_text``)."""
    return {escape_text(str(key)): _escaped(value) for key, value in event_dict.items()}


def _exc_info(value: Any) -> ExcInfo | None:
    if isinstance(value, BaseException):
        return (type(value), value, value.__traceback__)
    if isinstance(value, tuple) and len(value) == 3 and isinstance(value[1], BaseException):
        return (type(value[1]), value[1], value[2])
    if value is True:
        current = sys.exc_info()
        if current[1] is not None:
            return (type(current[1]), current[1], current[2])
    return None


def _frames(tb: TracebackType | None) -> str:
    # From frame objects, never traceback.extract_tb: that reads source files, which
    # is slow disk I/O on the event loop and shows code the reader does not need.
    frames: list[str] = []
    while tb is not None:
        code = tb.tb_frame.f_code
        parts = code.co_filename.replace("\\", "/").rsplit("/", 2)
        frames.append(f"{'/'.join(parts[-2:])}:{tb.tb_lineno}:{code.co_name}")
        tb = tb.tb_next
    frames.reverse()  # innermost, where it failed, first
    if len(frames) > _MAX_FRAMES:
        frames = [*frames[:_MAX_FRAMES], f"... {len(frames) - _MAX_FRAMES} more"]
    return " < ".join(frames)


def _causes(exc: BaseException) -> str | None:
    names: list[str] = []
    seen = {id(exc)}
    cause = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while cause is not None and id(cause) not in seen and len(names) < _MAX_CAUSES:
        seen.add(id(cause))
        names.append(type(cause).__name__)
        cause = cause.__cause__ or (None if cause.__suppress_context__ else cause.__context__)
    return " < ".join(names) or None


def describe_exception(exc: BaseException) -> dict[str, str]:
    """The loggable facts about an exception: never its locals, and its message only
    when it is a FerrymanError (other messages may quote customer data)."""
    facts = {"exc_type": type(exc).__name__, "exc_frames": _frames(exc.__traceback__)}
    if isinstance(exc, FerrymanError):
        facts["exc_message"] = exc.message
    cause = _causes(exc)
    if cause is not None:
        facts["exc_cause"] = cause
    return facts


def summarise_exception(
    logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: replace ``exc_info`` (and ``exception``) by
    ``describe_exception``'s fields, before any renderer can format a traceback."""
    event_dict.pop("exception", None)
    event_dict.pop("stack", None)
    info = _exc_info(event_dict.pop("exc_info", None))
    if info is not None:
        event_dict.update(describe_exception(info[1]))
    return event_dict


def _no_traceback(sio: Any, exc_info: Any) -> None:
    """The console renderer's exception formatter, should one ever reach it: the
    fields from summarise_exception already said all a log may say."""


class StdlibBridge(logging.Handler):
    """Sends stdlib log records (uvicorn, asyncio, libraries) through structlog."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if not record.name.startswith("ferryman"):
                message = message.strip().split("\n", 1)[0]
            fields: dict[str, Any] = {}
            if record.exc_info is not None and record.exc_info[1] is not None:
                fields["exc_info"] = record.exc_info
            structlog.get_logger(component=record.name).log(record.levelno, message, **fields)
        except Exception:  # noqa: BLE001 - a log call must never raise into its caller
            self.handleError(record)


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Configure structlog and stdlib logging process-wide; ``json`` for machines,
    key=value for people."""
    name = level.upper()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(sorted(_LEVELS))}")
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if json
        else structlog.dev.ConsoleRenderer(colors=False, exception_formatter=_no_traceback)
    )
    numeric_level = logging.getLevelNamesMapping()[name]
    global _min_level
    _min_level = numeric_level
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            summarise_exception,
            escape_fields,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(numeric_level),
        logger_factory=_queued_logger_factory,
        cache_logger_on_first_use=False,
    )
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, StdlibBridge)]:
        root.removeHandler(handler)
    root.addHandler(StdlibBridge())
    # Libraries speak at WARNING and above only: at INFO, httpx would log every
    # request the CLI client makes.
    root.setLevel(max(numeric_level, logging.WARNING))


def reset_logging() -> None:
    """Undo configure_logging (tests, and code embedding ferryman in another app)."""
    global _min_level
    _min_level = 0
    structlog.reset_defaults()
    root = logging.getLogger()
    for handler in [h for h in root.handlers if isinstance(h, StdlibBridge)]:
        root.removeHandler(handler)
    root.setLevel(logging.WARNING)


def flush_logs(timeout_seconds: float = 5.0) -> bool:
    """Wait until every line logged so far is written (tests, and before exiting)."""
    return LINE_WRITER.flush(timeout_seconds)


def get_logger(name: str) -> Any:
    """A structlog logger tagged with its component (``component=name``).

    It stays lazy (nothing is bound until it logs), so a module-level logger made at
    import time still follows a configure_logging() called later.
    """
    return structlog.get_logger(component=name)
