"""The batching thread: what waits together is handled together, except a request
submitted ``alone``, which gets a batch of its own after the others."""

from __future__ import annotations

import asyncio
import threading

from ferryman.adapters.batching import BatchingThread, Outcome

GATE_SECONDS = 30.0


async def test_a_request_submitted_alone_runs_after_the_small_ones_waiting_with_it() -> None:
    batches: list[list[str]] = []
    running = threading.Event()
    release = threading.Event()

    def handle(requests: list[str]) -> list[Outcome]:
        if requests == ["first"]:
            running.set()
            assert release.wait(GATE_SECONDS)
        batches.append(requests)
        return [Outcome(value=r) for r in requests]

    thread: BatchingThread[str] = BatchingThread(handle, max_batch=10, name="test-batching")
    try:
        first = thread.submit("first")
        assert await asyncio.to_thread(running.wait, GATE_SECONDS)
        large = thread.submit("large", alone=True)  # queued before the small ones
        small = [thread.submit("small-1"), thread.submit("small-2")]
        release.set()

        assert await asyncio.gather(first, large, *small) == [
            "first",
            "large",
            "small-1",
            "small-2",
        ]
        assert batches == [["first"], ["small-1", "small-2"], ["large"]]
    finally:
        await asyncio.to_thread(thread.close)
