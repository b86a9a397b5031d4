"""The ledger as the test stacks hold it: its writes, with the engine's reads beside it.

Services take the engine's query port (ports/store.py's JobReads, JobUpkeep) for what
they read and the ledger only for what they write; the ledger no longer forwards reads.
A test, though, reads what it just wrote all the time (``stack.store.events(...)``
after ``stack.store.create(...)``), so a stack's ``store`` answers both: a name the
ledger lacks is the engine store's. The same object passes as a service's ``store``
(reads) and ``ledger`` (writes). Nothing in src/ uses this.
"""

from __future__ import annotations

from typing import Any

from ferryman.services.ledger import JobLedger


class LedgerWithReads(JobLedger):
    def __getattr__(self, name: str) -> Any:
        # Only reached for names JobLedger does not define: the store's reads.
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.store, name)
