"""GroupCommit: writes ready together share one transaction; a batch in which one write
fails runs again with each write in its own savepoint."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.postgres.grouping import GroupCommit
from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator


class FakeConnection:
    """Records what a transaction did: savepoints entered, rolled back, committed."""

    def __init__(self, log: list[str]) -> None:
        self.log = log
        self.writes: list[str] = []

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[None]:
        kept = len(self.writes)
        self.log.append("savepoint")
        try:
            yield
        except BaseException:
            del self.writes[kept:]
            self.log.append("rollback to savepoint")
            raise


class FakeDatabase:
    def __init__(self, *, fail_commit: bool = False) -> None:
        self.log: list[str] = []
        self.committed: list[list[str]] = []
        self.fail_commit = fail_commit

    @contextlib.asynccontextmanager
    async def transaction(self) -> AsyncIterator[Any]:
        conn = FakeConnection(self.log)
        self.log.append("begin")
        try:
            yield conn
        except BaseException:
            self.log.append("rollback")
            raise
        await asyncio.sleep(0)  # the commit's round trip: others queue meanwhile
        if self.fail_commit:
            raise StoreUnavailableError("postgresql: connection lost at commit")
        self.committed.append(conn.writes)
        self.log.append("commit")


def write(name: str, *, fail: BaseException | None = None) -> Any:
    async def operation(conn: FakeConnection) -> str:
        conn.writes.append(name)
        if fail is not None:
            raise fail
        return name

    return operation


async def test_writes_ready_together_commit_once_and_each_gets_its_value() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction, max_batch=10)
    values = await asyncio.gather(*(group.run(write(f"w{i}")) for i in range(5)))
    assert values == [f"w{i}" for i in range(5)]
    # All five were waiting when the batch started: one transaction holds them.
    assert db.committed == [["w0", "w1", "w2", "w3", "w4"]]
    assert (group.batches, group.operations) == (1, 5)
    # Nothing failed: no savepoint was needed (each is two more round trips).
    assert db.log == ["begin", "commit"]


async def test_a_lone_write_runs_without_a_savepoint() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction)
    assert await group.run(write("only")) == "only"
    assert db.log == ["begin", "commit"]


async def test_a_failing_write_is_rolled_back_alone_and_only_its_caller_sees_it() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction, max_batch=10)
    first = asyncio.create_task(group.run(write("first")))
    await asyncio.sleep(0)  # the first batch is committing: the next three wait together
    results = await asyncio.gather(
        group.run(write("a")),
        group.run(write("bad", fail=ValueError("conflict"))),
        group.run(write("b")),
        return_exceptions=True,
    )
    await first
    assert results[0] == "a" and results[2] == "b"
    assert isinstance(results[1], ValueError)
    assert db.committed == [["first"], ["a", "b"]]
    # The batch ran once without savepoints, was rolled back when "bad" raised, and ran
    # again with one savepoint each.
    assert db.log == [
        *("begin", "commit"),
        *("begin", "rollback"),
        *("begin", "savepoint", "savepoint", "rollback to savepoint", "savepoint", "commit"),
    ]
    assert group.reruns == 1


async def test_an_outage_in_one_write_fails_the_whole_batch() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction, max_batch=10)
    first = asyncio.create_task(group.run(write("first")))
    await asyncio.sleep(0)
    results = await asyncio.gather(
        group.run(write("a")),
        group.run(write("lost", fail=StoreUnavailableError("postgresql: gone"))),
        return_exceptions=True,
    )
    await first
    assert all(isinstance(r, StoreUnavailableError) for r in results)
    assert db.committed == [["first"]]  # nothing of the failed batch committed


async def test_a_failed_commit_reaches_every_caller_of_the_batch() -> None:
    db = FakeDatabase(fail_commit=True)
    group = GroupCommit(db.transaction, max_batch=10)
    results = await asyncio.gather(
        *(group.run(write(f"w{i}")) for i in range(3)), return_exceptions=True
    )
    assert all(isinstance(r, StoreUnavailableError) for r in results)
    assert db.committed == []


async def test_batches_are_capped_and_a_cancelled_caller_is_left_out() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction, max_batch=2)
    first = asyncio.create_task(group.run(write("first")))
    await asyncio.sleep(0)
    cancelled = asyncio.create_task(group.run(write("cancelled")))
    others = [asyncio.create_task(group.run(write(f"w{i}"))) for i in range(3)]
    await asyncio.sleep(0)
    cancelled.cancel()
    await asyncio.gather(first, *others)
    assert db.committed == [["first"], ["w0"], ["w1", "w2"]]
    await group.close()


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GroupCommit(FakeDatabase().transaction, max_batch=0)


async def test_a_write_queued_as_the_last_batch_finishes_still_runs() -> None:
    db = FakeDatabase()
    group = GroupCommit(db.transaction)
    assert await group.run(write("first")) == "first"
    # The flusher has returned, its done callback not yet run: the next write must not
    # wait for it.
    assert await asyncio.wait_for(group.run(write("next")), timeout=2.0) == "next"


async def test_callers_are_not_left_waiting_when_the_flusher_is_cancelled() -> None:
    started = asyncio.Event()

    @contextlib.asynccontextmanager
    async def stuck_transaction() -> AsyncIterator[Any]:
        started.set()
        await asyncio.sleep(3600)  # a commit that never returns
        yield FakeConnection([])

    group = GroupCommit(stuck_transaction)
    caller = asyncio.create_task(group.run(write("w")))
    await started.wait()
    for flusher in list(group._flushers):
        flusher.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(caller, timeout=2.0)
