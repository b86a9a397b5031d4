"""A long-running process started while its database is away waits for it, bounded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from ferryman.cli.startup import open_when_available
from ferryman.core.errors import StoreUnavailableError


class Database:
    """Unavailable for the first ``failures`` opens; records opens and closes."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.opens = 0
        self.closed = 0

    @asynccontextmanager
    async def open(self) -> AsyncIterator[str]:
        self.opens += 1
        if self.opens <= self.failures:
            raise StoreUnavailableError("connection refused")
        try:
            yield "runtime"
        finally:
            self.closed += 1


class Clock:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


async def test_a_database_that_comes_back_is_waited_for_with_backoff() -> None:
    db, clock, said = Database(failures=4), Clock(), []
    async with open_when_available(
        db.open, say=said.append, wait_seconds=60, sleep=clock.sleep, monotonic=clock.monotonic
    ) as runtime:
        assert runtime == "runtime"
    assert db.opens == 5
    assert db.closed == 1
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0]
    assert len(said) == 4
    assert "connection refused" in said[0]


async def test_a_database_still_away_at_the_deadline_fails_with_its_reason() -> None:
    db, clock = Database(failures=1000), Clock()
    with pytest.raises(StoreUnavailableError, match="connection refused"):
        async with open_when_available(
            db.open,
            say=lambda _: None,
            wait_seconds=10,
            sleep=clock.sleep,
            monotonic=clock.monotonic,
        ):
            pytest.fail("never opened")
    assert sum(clock.sleeps) == 10  # the last pause is cut to the deadline
    assert db.closed == 0


async def test_an_error_inside_the_running_process_is_not_retried() -> None:
    db, clock = Database(failures=0), Clock()
    with pytest.raises(StoreUnavailableError, match="mid-run"):
        async with open_when_available(
            db.open, say=lambda _: None, sleep=clock.sleep, monotonic=clock.monotonic
        ):
            raise StoreUnavailableError("mid-run")
    assert db.opens == 1
    assert db.closed == 1
    assert clock.sleeps == []


async def test_other_errors_are_not_waited_for() -> None:
    @asynccontextmanager
    async def broken() -> AsyncIterator[str]:
        raise ValueError("a programming error")
        yield "never"

    clock = Clock()
    with pytest.raises(ValueError, match="a programming error"):
        async with open_when_available(
            broken, say=lambda _: None, sleep=clock.sleep, monotonic=clock.monotonic
        ):
            pass
    assert clock.sleeps == []
