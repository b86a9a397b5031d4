"""services.cancels: a hint runs the cancel check at once, hints close together share one
read, a hint during a read is never lost, and the periodic check stays the fallback."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from dataclasses import dataclass, field

import pytest

from ferryman.adapters.wakeup import Wakeup
from ferryman.services.cancels import CancelWatcher

# Far beyond every test: a read that happens was caused by a hint.
NO_PERIODIC_CHECK = 3600.0
# Long enough that every hint a test sends in one go falls inside it.
GATHER_SECONDS = 0.05
SETTLE_SECONDS = 0.2


@dataclass
class Attempt:
    cancel_requested: bool = False
    interrupts: int = 0

    def interrupt(self) -> None:
        self.interrupts += 1


@dataclass
class Requests:
    """The store's cancel requests, counting reads; ``gate`` (when set) holds each read."""

    asked: set[str] = field(default_factory=set)
    reads: list[list[str]] = field(default_factory=list)
    reading: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event | None = None
    fail_next: bool = False

    async def cancel_requested(self, job_ids: Collection[str]) -> set[str]:
        self.reads.append(sorted(job_ids))
        self.reading.set()
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_next:
            self.fail_next = False
            raise OSError("database unreachable")
        return self.asked & set(job_ids)


@dataclass
class Watched:
    watcher: CancelWatcher
    hints: Wakeup
    requests: Requests
    attended: dict[str, Attempt]


@pytest.fixture
async def watched() -> AsyncIterator[Watched]:
    hints, requests = Wakeup(), Requests()
    attended = {"job_a": Attempt(), "job_b": Attempt()}
    watcher = CancelWatcher(
        requests=requests,
        hints=hints,
        attended=attended,
        interval_seconds=NO_PERIODIC_CHECK,
        gather_seconds=GATHER_SECONDS,
    )
    stop = asyncio.Event()
    running = asyncio.create_task(watcher.run(stop))
    await asyncio.sleep(0)  # the watcher takes its first generation and waits
    yield Watched(watcher, hints, requests, attended)
    if requests.gate is not None:
        requests.gate.set()
    stop.set()
    await asyncio.wait_for(running, 5)


async def _read_started(requests: Requests) -> None:
    await asyncio.wait_for(requests.reading.wait(), 5)
    requests.reading.clear()


async def test_a_hint_interrupts_the_call_whose_job_was_cancelled_and_no_other(
    watched: Watched,
) -> None:
    watched.requests.asked.add("job_a")

    watched.hints.notify()
    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)

    assert watched.requests.reads == [["job_a", "job_b"]]  # one read for every call
    assert (watched.attended["job_a"].cancel_requested, watched.attended["job_a"].interrupts) == (
        True,
        1,
    )
    assert (watched.attended["job_b"].cancel_requested, watched.attended["job_b"].interrupts) == (
        False,
        0,
    )


async def test_hints_close_together_share_one_read(watched: Watched) -> None:
    for _ in range(10):
        watched.hints.notify()

    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)

    assert len(watched.requests.reads) == 1


async def test_hints_that_come_while_the_gather_waits_ride_with_its_read(
    watched: Watched,
) -> None:
    watched.hints.notify()
    await asyncio.sleep(GATHER_SECONDS / 5)
    watched.hints.notify()
    watched.hints.notify()

    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)

    assert len(watched.requests.reads) == 1


async def test_hints_during_a_read_lead_to_exactly_one_more_read(watched: Watched) -> None:
    watched.requests.gate = asyncio.Event()
    watched.hints.notify()
    await _read_started(watched.requests)

    # The read may have missed these cancels: they must not be lost, nor cost a read each.
    watched.requests.asked.add("job_b")
    for _ in range(5):
        watched.hints.notify()
    watched.requests.gate.set()
    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)

    assert len(watched.requests.reads) == 2
    assert watched.attended["job_b"].interrupts == 1


async def test_without_a_hint_nothing_is_read_before_the_period(watched: Watched) -> None:
    await asyncio.sleep(SETTLE_SECONDS)

    assert watched.requests.reads == []


async def test_a_hint_with_no_call_running_reads_nothing(watched: Watched) -> None:
    watched.attended.clear()

    watched.hints.notify()
    await asyncio.sleep(GATHER_SECONDS + SETTLE_SECONDS)

    assert watched.requests.reads == []


async def test_a_failed_read_is_not_the_end_the_next_hint_reads_again(watched: Watched) -> None:
    watched.requests.asked.add("job_a")
    watched.requests.fail_next = True
    watched.hints.notify()
    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)
    assert watched.attended["job_a"].interrupts == 0

    watched.hints.notify()
    await _read_started(watched.requests)
    await asyncio.sleep(SETTLE_SECONDS)

    assert watched.attended["job_a"].interrupts == 1


async def test_a_call_already_asked_to_stop_is_interrupted_once(watched: Watched) -> None:
    watched.requests.asked.add("job_a")
    for _ in range(3):
        watched.hints.notify()
        await _read_started(watched.requests)
        await asyncio.sleep(GATHER_SECONDS)

    assert len(watched.requests.reads) == 3
    assert watched.attended["job_a"].interrupts == 1


async def test_the_periodic_check_finds_a_cancel_no_hint_announced() -> None:
    requests = Requests(asked={"job_a"})
    attended = {"job_a": Attempt()}
    watcher = CancelWatcher(
        requests=requests, hints=Wakeup(), attended=attended, interval_seconds=0.05
    )
    stop = asyncio.Event()
    running = asyncio.create_task(watcher.run(stop))
    try:
        await _read_started(requests)
    finally:
        stop.set()
        await asyncio.wait_for(running, 5)

    assert attended["job_a"].interrupts == 1


async def test_stop_ends_the_watcher_without_waiting_for_the_period() -> None:
    watcher = CancelWatcher(
        requests=Requests(), hints=Wakeup(), attended={}, interval_seconds=NO_PERIODIC_CHECK
    )
    stop = asyncio.Event()
    running = asyncio.create_task(watcher.run(stop))
    await asyncio.sleep(0)

    stop.set()

    await asyncio.wait_for(running, 1)
