"""Where log lines go: stderr, written by a thread of its own through a bounded queue.

A process that logs from its event loop must never wait on the stream: a full
pipe, a slow terminal or a paused log shipper would stall the API, the workers'
heartbeats and the sweeper together. So a log call only hands its line to a
queue; a daemon thread writes the lines out in batches. When the queue is full
the line is dropped and counted, and the writer says how many it lost as soon as
it catches up: losing a log line is better than freezing every job in the process.

stderr is looked up at write time, so a replaced stream (tests, daemons) is
honoured; stdout stays free for what commands print (a new API key, a job id).
"""

from __future__ import annotations

import atexit
import queue
import sys
import threading
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from collections.abc import Callable

DEFAULT_CAPACITY = 10_000
# Lines written per batch before the stream is flushed.
_BATCH_LINES = 256


def _stderr() -> TextIO:
    return sys.stderr


class LineWriter:
    """Queue lines now, write them from a background thread (started on first use)."""

    def __init__(
        self, *, capacity: int = DEFAULT_CAPACITY, stream: Callable[[], TextIO] = _stderr
    ) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._queue: queue.Queue[str | threading.Event] = queue.Queue(capacity)
        self._stream = stream
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._dropped_total = 0
        self._unreported = 0

    @property
    def dropped(self) -> int:
        """Lines lost to a full queue since this writer was made."""
        return self._dropped_total

    def write(self, line: str) -> None:
        """Queue one line (no newline); never blocks."""
        self._start()
        try:
            self._queue.put_nowait(line)
        except queue.Full:
            with self._lock:
                self._dropped_total += 1
                self._unreported += 1

    def flush(self, timeout_seconds: float = 5.0) -> bool:
        """Wait until every line queued so far is written; False if that took too long."""
        if self._thread is None:
            return True  # nothing was ever queued
        done = threading.Event()
        try:
            self._queue.put(done, timeout=timeout_seconds)
        except queue.Full:
            return False
        return done.wait(timeout_seconds)

    def _start(self) -> None:
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is None:
                thread = threading.Thread(target=self._run, name="ferryman-log-writer", daemon=True)
                thread.start()
                self._thread = thread

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < _BATCH_LINES:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            lines = [item for item in batch if isinstance(item, str)]
            lost = self._take_unreported()
            if lost:
                lines.append(f"log-writer: dropped {lost} log lines (the output could not keep up)")
            self._emit(lines)
            for item in batch:
                if isinstance(item, threading.Event):
                    item.set()

    def _take_unreported(self) -> int:
        with self._lock:
            lost, self._unreported = self._unreported, 0
        return lost

    def _emit(self, lines: list[str]) -> None:
        if not lines:
            return
        stream = self._stream()
        try:
            stream.write("".join(line + "\n" for line in lines))
            stream.flush()
        except (OSError, ValueError):
            # A closed or broken stream (the reader went away): nothing left to tell.
            with self._lock:
                self._dropped_total += len(lines)


LINE_WRITER = LineWriter()


@atexit.register
def _flush_at_exit() -> None:
    # Lines logged just before a normal exit still reach the stream.
    LINE_WRITER.flush(timeout_seconds=2.0)
