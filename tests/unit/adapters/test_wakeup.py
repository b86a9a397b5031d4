"""The Wakeup's wait: a notify, the receiver's freed slot, or the timeout ends it."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferryman.adapters.wakeup import Wakeup

pytestmark = pytest.mark.timeout(10)


async def test_a_freed_slot_ends_the_wait_long_before_its_timeout():
    wakeup = Wakeup()
    freed = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, freed.set)
    started = time.monotonic()

    await wakeup.wait(since=wakeup.generation, timeout_seconds=5.0, also=freed)

    assert time.monotonic() - started < 1.0


async def test_a_slot_freed_before_the_wait_ends_it_at_once():
    wakeup = Wakeup()
    freed = asyncio.Event()
    freed.set()
    started = time.monotonic()

    await wakeup.wait(since=wakeup.generation, timeout_seconds=5.0, also=freed)

    assert time.monotonic() - started < 0.5


async def test_without_a_freed_slot_or_a_notify_the_wait_lasts_its_timeout():
    wakeup = Wakeup()
    started = time.monotonic()

    await wakeup.wait(since=wakeup.generation, timeout_seconds=0.2, also=asyncio.Event())

    assert time.monotonic() - started >= 0.19


async def test_a_notify_still_ends_a_wait_that_also_watches_for_a_freed_slot():
    wakeup = Wakeup()
    asyncio.get_running_loop().call_later(0.05, wakeup.notify)
    started = time.monotonic()

    await wakeup.wait(since=wakeup.generation, timeout_seconds=5.0, also=asyncio.Event())

    assert time.monotonic() - started < 1.0
