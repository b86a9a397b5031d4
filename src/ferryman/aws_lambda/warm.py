"""What any ferryman function keeps warm between invocations: its event loop, and what
it opened on it (closed together when the container is retired).

Lambda runs one invocation at a time in a container and freezes it in between, so a
handler makes its engine once and reuses it; the worker's (container.py) and the
sweeper's (sweeping.py) containers share this part.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable
    from contextlib import AsyncExitStack

    from ferryman.config import Settings


class WarmContainer:
    """The loop, the exit stack of what is open on it, and whether logging is set up."""

    def __init__(self, *, settings: Callable[[], Settings]) -> None:
        self._settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stack: AsyncExitStack | None = None
        self._logging_configured = False

    def _forget(self) -> None:
        """Drop what was built on the open engine (a subclass's runner or sweeper)."""

    def close(self) -> None:
        """Close the engine and the loop (a container being retired; tests)."""
        loop, stack = self._loop, self._stack
        self._loop, self._stack = None, None
        self._forget()
        self._logging_configured = False
        if loop is None:
            return
        try:
            if stack is not None:
                loop.run_until_complete(stack.aclose())
        finally:
            loop.close()

    def _event_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop
