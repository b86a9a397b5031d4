"""Fixtures for the SQLite and file adapters: a fresh database file per test."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.core.clock import FakeClock
from ferryman.core.idempotency import request_fingerprint
from ferryman.core.ids import new_correlation_id, new_job_id
from ferryman.core.job import Job

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "data" / "ferryman.db"


@pytest.fixture
async def db(db_path: Path) -> AsyncIterator[SqliteDatabase]:
    database = await SqliteDatabase.open(db_path)
    try:
        yield database
    finally:
        await database.close()


@pytest.fixture
def job_factory(clock: FakeClock) -> Callable[..., Job]:
    def make(**overrides: Any) -> Job:
        input_ = overrides.pop("input", {"prompt": "Hello"})
        now = clock.now()
        fields: dict[str, Any] = {
            "tenant_id": "t1",
            "job_id": new_job_id(),
            "task": "generate",
            "model": "sim",
            "input": input_,
            "request_hash": request_fingerprint(task="generate", input=input_, model="sim"),
            "created_at": now,
            "updated_at": now,
            "correlation_id": new_correlation_id(),
        }
        fields.update(overrides)
        return Job(**fields)

    return make
