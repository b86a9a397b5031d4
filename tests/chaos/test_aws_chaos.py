"""The chaos run on the AWS engine: DynamoDB, SQS and S3 on the emulator.

Two `ferryman api` processes and four `ferryman worker` processes share one table,
one queue and one bucket on moto's server (tests/aws_emulator.py), reached through
the real SDK. Workers crash (os._exit) at random failpoints and are restarted; the
harness (conftest.py) asserts the same invariants as on SQLite and PostgreSQL: every
job SUCCEEDED with exactly one succeeded attempt, no attempt left without an outcome,
no job stuck, each result the right one for its prompt. `ferryman migrate` makes the
table, queues and bucket first, as an operator would.
"""

from __future__ import annotations

from typing import Any

import pytest

from aws_emulator import fresh_name

pytestmark = [pytest.mark.chaos, pytest.mark.timeout(600)]

# Fewer than on SQLite and PostgreSQL (120): the emulator answers every DynamoDB
# request one at a time, in Python, so 40 jobs and their crashes take about 3 minutes
# on 2 cores. Every failpoint still fires several times over a run this size.
JOBS = 40


@pytest.fixture
def aws_engine(aws_env: dict[str, str]) -> dict[str, str]:
    name = fresh_name("chaos")
    return {
        **aws_env,
        "FERRYMAN_DATABASE_URL": f"aws://{name}",
        "FERRYMAN_RESULTS_URL": f"s3://{name}/results",
    }


def test_two_apis_and_four_crashing_workers_on_aws_lose_nothing_and_publish_once(
    chaos: Any, aws_engine: dict[str, str], scenario: Any
) -> None:
    report = chaos(scenario(engine=aws_engine, apis=2, workers=4, jobs=JOBS))
    print(report.line("aws"))
