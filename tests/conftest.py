"""Rules every suite shares.

A suite that needs an outside service (PostgreSQL, an AWS emulator) asks for it with
the ``require_service`` fixture, so the rule is written once: locally a missing
service skips the test with its reason; under CI=true (which .ci/run sets) it fails,
so CI can never pass by skipping a backend.
"""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, NoReturn

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable


def _require_service(name: str, reason: str) -> NoReturn:
    message = f"{name} is not available: {reason}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def require_service() -> Callable[[str, str], NoReturn]:
    """Skip (locally) or fail (under CI=true) a test whose service is missing."""
    return _require_service


def _sqlite_outage(message: str, code: int) -> sqlite3.OperationalError:
    error = sqlite3.OperationalError(message)
    error.sqlite_errorcode = code
    return error


@pytest.fixture(scope="session")
def sqlite_outage() -> Callable[[str, int], sqlite3.OperationalError]:
    """An error as SQLite raises it for an outage: its result code (``sqlite3.SQLITE_FULL``,
    ``SQLITE_BUSY``, ``SQLITE_IOERR``, ...) is what makes the engine call it one; an error
    without one is a wrong statement, which goes through as itself."""
    return _sqlite_outage
