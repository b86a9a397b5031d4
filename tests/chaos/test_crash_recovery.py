"""Real processes killed at failpoints: every accepted job still finishes exactly once.

`ferryman api` and several `ferryman worker` processes share one SQLite file. The
workers crash (os._exit) at random failpoints and are restarted, as a process
supervisor would. The harness (conftest.py) asserts only the invariants: every job
SUCCEEDED with exactly one succeeded attempt, every attempt explained (none left
open), crashes visible as abandoned attempts, and each result is the right one for
its prompt.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]


def test_workers_crashing_at_every_failpoint_lose_nothing_and_publish_once(
    chaos: Any, sqlite_engine: dict[str, str], scenario: Any
) -> None:
    report = chaos(scenario(engine=sqlite_engine, apis=1, workers=3, jobs=120))
    print(report.line("sqlite"))
