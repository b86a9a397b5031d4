"""SharedLimits: token buckets that hold across every process and machine.

On one machine each API process keeps its own buckets (http/rate_limit.py). When
many processes share one database, a tenant's budget must be one budget, not one per
process: the engine keeps each bucket, and a process leases a few tokens at a time
from it (docs/design-notes.md, "Shared rate limits"), so most requests spend a token
the process already holds and never wait on the database.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class TokenLease:
    """What one lease got: ``granted`` whole tokens, and the bucket's balance after."""

    granted: int
    tokens_left: float


class SharedLimits(Protocol):
    async def lease(
        self, key: str, *, rate_per_second: float, burst: int, want: int, now: float
    ) -> TokenLease:
        """Refill ``key``'s bucket (``burst`` tokens, refilled at ``rate_per_second``,
        full when first used) up to ``now`` and take up to ``want`` whole tokens from it,
        atomically across every process; fewer (maybe none) when fewer are there."""
        ...
