"""A long-running process waits for its database at start instead of exiting.

A worker or API process that starts while the database restarts, fails over or is
still coming up (a fresh deployment starts everything at once) would otherwise exit
at once with a traceback, and a supervisor restarting it in a tight loop soon gives
up. Opening is retried with backoff for a bounded time, one line on stderr per try;
past that the process exits with the reason. Only opening is retried: once the
process runs, an outage is survived by the engine itself (pool, listener).
"""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, TypeVar

from ferryman.core.errors import StoreUnavailableError

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from contextlib import AbstractAsyncContextManager

T = TypeVar("T")

STARTUP_WAIT_SECONDS = 60.0
FIRST_DELAY_SECONDS = 0.5
MAX_DELAY_SECONDS = 5.0


@asynccontextmanager
async def open_when_available(
    opener: Callable[[], AbstractAsyncContextManager[T]],
    *,
    say: Callable[[str], None],
    wait_seconds: float = STARTUP_WAIT_SECONDS,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    monotonic: Callable[[], float] = time.monotonic,
) -> AsyncIterator[T]:
    """Enter ``opener()``, retrying while it raises StoreUnavailableError, for up to
    ``wait_seconds``; then the last error passes through."""
    deadline = monotonic() + wait_seconds
    delay = FIRST_DELAY_SECONDS
    async with AsyncExitStack() as stack:
        while True:
            try:
                value = await stack.enter_async_context(opener())
                break
            except StoreUnavailableError as exc:
                left = deadline - monotonic()
                if left <= 0:
                    raise
                pause = min(delay, left)
                say(f"the database is not available yet ({exc.message}); retrying in {pause:.1f} s")
                await sleep(pause)
                delay = min(delay * 2, MAX_DELAY_SECONDS)
        yield value
