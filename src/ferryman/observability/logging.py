"""Structured logging: one configuration for every process, key=value or JSON lines.

Log lines carry identifiers (job, tenant, correlation id, attempt), never request
bodies, prompts or model outputs: those are customer data.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

_LEVELS = {"DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"}


class _StderrLoggerFactory:
    """Looks sys.stderr up per logger, so a replaced stream (tests, daemons) is honoured;
    stdout stays free for what commands print (a new API key, a job id)."""

    def __call__(self, *args: Any) -> structlog.PrintLogger:
        stream: TextIO = sys.stderr
        return structlog.PrintLogger(stream)


def configure_logging(level: str = "INFO", json: bool = False) -> None:
    """Configure structlog process-wide; ``json`` for machines, key=value for people."""
    name = level.upper()
    if name not in _LEVELS:
        raise ValueError(f"unknown log level {level!r}; use one of {', '.join(sorted(_LEVELS))}")
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if json:
        processors += [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
    else:
        # The console renderer formats exceptions itself (and warns if they come pre-formatted).
        processors.append(structlog.dev.ConsoleRenderer(colors=False))
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelNamesMapping()[name]),
        logger_factory=_StderrLoggerFactory(),
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> Any:
    """A structlog logger tagged with its component (``component=name``).

    It stays lazy (nothing is bound until it logs), so a module-level logger made at
    import time still follows a configure_logging() called later.
    """
    return structlog.get_logger(component=name)
