"""What any ferryman function keeps warm between invocations: its event loop, and what
it opened on it (closed together when the container is retired).

Lambda runs one invocation at a time in a container and freezes it in between, so a
handler makes its engine once and reuses it; the worker's (container.py) and the
sweeper's (sweeping.py) containers share this part.
"""

from __future__ import annotations

import asyncio
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, TypeVar

from ferryman.observability.logging import configure_logging
from ferryman.wiring import check_results_location, open_runtime

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from ferryman.config import Settings
    from ferryman.wiring import Runtime

Built = TypeVar("Built")


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

    async def _open(
        self, *, call_models: bool, build: Callable[[Runtime], Awaitable[Built]]
    ) -> Built:
        """Open the engine from the settings as its process would (never creating a
        database), and ``build`` on it what the function keeps; an open or a build that
        fails leaves nothing open, so the next invocation tries again."""
        settings = self._settings()
        if not self._logging_configured:
            configure_logging(settings.log.level, settings.log.json_lines)
            self._logging_configured = True
        await asyncio.to_thread(check_results_location, settings)
        stack = AsyncExitStack()
        try:
            runtime = await stack.enter_async_context(
                open_runtime(settings, create=False, call_models=call_models)
            )
            built = await build(runtime)
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return built
