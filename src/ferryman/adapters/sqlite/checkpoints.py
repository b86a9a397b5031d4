"""WAL checkpoints on a thread of their own, not inside a commit.

By default SQLite checkpoints in the COMMIT that takes the WAL past 1,000 pages: the
writer thread then copies the WAL's pages into the database file and syncs it before
that commit's caller hears back, and every write queued behind it waits too (a lone
job's four writes touch about 17 pages each, so one job in 18 or so pays for it).
Here a thread with its own connection runs a PASSIVE checkpoint every
``interval_seconds`` when this process's writer has committed since the last one.
PASSIVE takes no lock a writer or a reader waits for: it copies what no reader still
needs, alongside the writer's commits. It syncs as the connection's synchronous mode
says (the file's mode: the WAL before copying, the database file after), as the
writer's own checkpoint did.

The writer keeps an automatic checkpoint at ``SAFETY_NET_PAGES``, so the WAL stays
bounded if this thread falls behind or stops.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

INTERVAL_SECONDS = 0.05
# The writer's own automatic checkpoint (pages of the WAL), kept as a safety net.
SAFETY_NET_PAGES = 4_000


class Checkpoints:
    """The checkpointer's rule, one step at a time: ``tick`` runs a PASSIVE checkpoint
    when the writer committed since the last tick that ran one, and nothing otherwise.

    The thread below calls it every interval; tests call it directly with a counter
    they control, so the rule is proved without waiting on the clock.
    """

    def __init__(self, conn: sqlite3.Connection, commits: Callable[[], int]) -> None:
        self._conn = conn
        self._commits = commits
        # Checkpoints run, the last one's (WAL pages, pages copied), the writer's commit
        # count the last tick acted on, and ticks taken: for tests and diagnostics.
        self.checkpoints = 0
        self.last: tuple[int, int] | None = None
        self.seen_commits = commits()
        self.ticks = 0

    def tick(self) -> bool:
        """Checkpoint if the writer committed since the last checkpoint; True if one ran."""
        commits = self._commits()
        ran = False
        if commits != self.seen_commits:
            # A failed checkpoint leaves the WAL as it was: the next commit's, or the
            # writer's safety net, copies it.
            with contextlib.suppress(sqlite3.Error):
                row = self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                self.last = (int(row[1]), int(row[2]))
                self.checkpoints += 1
                ran = True
            # Set after the figures, so a reader that sees this count sees its checkpoint.
            self.seen_commits = commits
        self.ticks += 1
        return ran


class Checkpointer:
    """Runs ``Checkpoints.tick`` on a thread of its own every ``interval_seconds``."""

    def __init__(
        self,
        conn: sqlite3.Connection,
        commits: Callable[[], int],
        *,
        interval_seconds: float = INTERVAL_SECONDS,
        name: str = "ferryman-sqlite-checkpoint",
    ) -> None:
        self._conn = conn
        self.steps = Checkpoints(conn, commits)
        self._interval = interval_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.steps.tick()

    def close(self) -> None:
        """Stop the thread (blocking until a checkpoint under way has finished)."""
        self._stop.set()
        self._thread.join()
        self._conn.close()
