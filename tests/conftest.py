"""Rules every suite shares.

A suite that needs an outside service (PostgreSQL, an AWS emulator) asks for it with
the ``require_service`` fixture, so the rule is written once: locally a missing
service skips the test with its reason; under CI=true (which .ci/run sets) it fails,
so CI can never pass by skipping a backend.
"""

from __future__ import annotations

import os
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
