from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ferryman.core.clock import FakeClock
from ferryman.core.job import Job

START = 1_700_000_000.0


def make_job(**overrides: Any) -> Job:
    fields: dict[str, Any] = {
        "tenant_id": "acme",
        "job_id": "gen_01TEST",
        "task": "generate",
        "model": "sim",
        "input": {"prompt": "hi"},
        "request_hash": "0" * 64,
        "created_at": START,
        "updated_at": START,
        "correlation_id": "cor_test",
    }
    fields.update(overrides)
    return Job(**fields)


@pytest.fixture
def job_factory() -> Callable[..., Job]:
    return make_job


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)
