"""SharedRead: concurrent callers share a read, never one that started before they asked."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.adapters.postgres.sharedread import SharedRead


class Source:
    """A read that returns how many reads of the key have started, held until released."""

    def __init__(self) -> None:
        self.started: dict[str, int] = {}
        self.release = asyncio.Event()
        self.fail: Exception | None = None

    async def read(self, key: str) -> int:
        self.started[key] = self.started.get(key, 0) + 1
        seen = self.started[key]
        await self.release.wait()
        if self.fail is not None:
            raise self.fail
        return seen


async def test_callers_during_a_read_share_the_next_one_and_never_an_older_one() -> None:
    source = Source()
    shared: SharedRead[str, int] = SharedRead(source.read)
    first = asyncio.create_task(shared.get("k"))
    await asyncio.sleep(0.01)  # read 1 is in flight
    later = [asyncio.create_task(shared.get("k")) for _ in range(5)]
    await asyncio.sleep(0.01)
    source.release.set()
    assert await first == 1
    # They asked after read 1 started: they are answered by read 2, all of them.
    assert await asyncio.gather(*later) == [2] * 5
    assert shared.reads == 2


async def test_keys_are_read_apart() -> None:
    source = Source()
    shared: SharedRead[str, int] = SharedRead(source.read)
    source.release.set()
    assert await asyncio.gather(shared.get("a"), shared.get("b"), shared.get("a")) == [1, 1, 1]
    assert source.started == {"a": 1, "b": 1}


async def test_an_error_reaches_every_caller_of_the_read_and_the_next_read_runs() -> None:
    source = Source()
    shared: SharedRead[str, int] = SharedRead(source.read)
    source.fail = RuntimeError("gone")
    source.release.set()
    results = await asyncio.gather(shared.get("k"), shared.get("k"), return_exceptions=True)
    assert all(isinstance(r, RuntimeError) for r in results)
    source.fail = None
    assert await shared.get("k") == 2


async def test_a_cancelled_caller_leaves_the_read_to_the_others() -> None:
    source = Source()
    shared: SharedRead[str, int] = SharedRead(source.read)
    leaving = asyncio.create_task(shared.get("k"))
    staying = asyncio.create_task(shared.get("k"))
    await asyncio.sleep(0.01)
    leaving.cancel()
    source.release.set()
    assert await staying == 1
    with pytest.raises(asyncio.CancelledError):
        await leaving
