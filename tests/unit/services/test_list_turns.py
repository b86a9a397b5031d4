"""One tenant's lists read a few at a time: the rest wait their turn, in order, and
another tenant's never waits behind them."""

from __future__ import annotations

import asyncio

import pytest

from ferryman.services.jobs import JobQueries
from ferryman.services.turns import TurnsPerKey

pytestmark = pytest.mark.timeout(10)


async def until(condition) -> None:
    """Let the other tasks run until ``condition()`` holds (the test's timeout bounds it)."""
    while not condition():  # noqa: ASYNC110 - the tasks under test signal nothing else
        await asyncio.sleep(0)


class HeldLists:
    """Wraps a store: every list_jobs call waits until released, and says who is inside."""

    def __init__(self, store) -> None:
        self._store = store
        self.inside: list[str] = []
        self.release = asyncio.Event()

    def __getattr__(self, name):
        return getattr(self._store, name)

    async def list_jobs(self, **kwargs):
        self.inside.append(kwargs["tenant_id"])
        await self.release.wait()
        return await self._store.list_jobs(**kwargs)


async def test_a_key_has_at_most_its_turns_inside_and_the_rest_go_in_order() -> None:
    turns = TurnsPerKey(2)
    inside: list[int] = []
    entered: list[int] = []
    leave = {i: asyncio.Event() for i in range(4)}

    async def caller(i: int) -> None:
        async with turns.turn("t1"):
            inside.append(i)
            entered.append(i)
            await leave[i].wait()
            inside.remove(i)

    tasks = [asyncio.create_task(caller(i)) for i in range(4)]
    await until(lambda: len(entered) == 2)
    assert inside == [0, 1]

    leave[1].set()
    await until(lambda: len(entered) == 3)
    assert inside == [0, 2]
    for event in leave.values():
        event.set()
    await asyncio.gather(*tasks)

    assert entered == [0, 1, 2, 3]
    assert len(turns) == 0  # nothing kept for a key nobody uses


async def test_another_key_never_waits_for_a_busy_one() -> None:
    turns = TurnsPerKey(1)
    held = asyncio.Event()
    release = asyncio.Event()

    async def hold() -> None:
        async with turns.turn("busy"):
            held.set()
            await release.wait()

    holder = asyncio.create_task(hold())
    await held.wait()
    async with turns.turn("quiet"):
        assert len(turns) == 2
    release.set()
    await holder


async def test_a_caller_that_gives_up_while_waiting_leaves_no_trace() -> None:
    turns = TurnsPerKey(1)
    release = asyncio.Event()

    async def hold() -> None:
        async with turns.turn("t1"):
            await release.wait()

    holder = asyncio.create_task(hold())
    await until(lambda: len(turns) == 1)
    waiter = asyncio.create_task(hold())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release.set()
    await holder

    assert len(turns) == 0


def test_a_key_needs_at_least_one_turn() -> None:
    with pytest.raises(ValueError, match="positive"):
        TurnsPerKey(0)


async def test_a_tenant_s_lists_read_two_at_a_time_and_others_go_ahead(make_world) -> None:
    world = make_world()
    await world.submit("a job", tenant="t1")
    await world.submit("another tenant's", tenant="t2")
    held = HeldLists(world.store)
    jobs = JobQueries(store=held, ledger=world.store, results=world.results, clock=world.clock)

    heavy = [asyncio.create_task(jobs.list("t1")) for _ in range(5)]
    await until(lambda: len(held.inside) >= 2)
    quiet = asyncio.create_task(jobs.list("t2"))
    await until(lambda: len(held.inside) >= 3)

    assert held.inside == ["t1", "t1", "t2"]
    held.release.set()
    pages = await asyncio.gather(*heavy, quiet)
    assert held.inside == ["t1", "t1", "t2", "t1", "t1", "t1"]
    assert [len(page.items) for page in pages] == [1] * 6
