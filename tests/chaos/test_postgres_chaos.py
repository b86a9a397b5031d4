"""The chaos run on PostgreSQL: 2 API processes and 4 crashing workers on one database.

Three runs, each on a fresh database: workers crashing at failpoints alone; the same
while every connection of ferryman's is terminated mid-load, several times
(`pg_terminate_backend`, as an operator or a failover does); and the same while the
server itself is restarted mid-load. The harness (conftest.py) asserts the same
invariants as on SQLite: every job SUCCEEDED with exactly one succeeded attempt, no
attempt left without an outcome, no job stuck, each result the right one for its
prompt. The restart run restarts a throwaway server of its own (initdb into a temporary
directory, a free port), never the shared one. Clients retry a 503 or a dropped
connection with the same Idempotency-Key, as the API asks them to.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

JOBS = 120


def test_two_apis_and_four_crashing_workers_lose_nothing_and_publish_once(
    chaos: Any, postgres_database: Any, scenario: Any
) -> None:
    report = chaos(scenario(engine=postgres_database.engine, apis=2, workers=4, jobs=JOBS))
    print(report.line("postgres"))


def test_terminating_every_connection_mid_load_loses_nothing(
    chaos: Any, postgres_database: Any, scenario: Any
) -> None:
    # During intake (three times) and while the workers drain the queue (once).
    report = chaos(
        scenario(
            engine=postgres_database.engine,
            apis=2,
            workers=4,
            jobs=JOBS,
            disrupt=postgres_database.terminate_backends,
            disrupt_after=(JOBS // 4, JOBS // 2, 3 * JOBS // 4, JOBS),
        )
    )
    print(report.line("postgres, backends terminated 4 times"))


def test_restarting_the_server_mid_load_loses_nothing(
    chaos: Any, restartable_postgres: Any, scenario: Any
) -> None:
    # A server of the test's own: restarting the shared one would end every other
    # session on it.
    report = chaos(
        scenario(
            engine=restartable_postgres.engine,
            apis=2,
            workers=4,
            jobs=JOBS,
            disrupt=restartable_postgres.restart,
            disrupt_after=(JOBS // 2,),
        )
    )
    print(report.line("postgres, server restarted once"))
