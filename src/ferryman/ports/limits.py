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

    async def report_provider(self, report: ProviderReport) -> ProviderShare:
        """Record ``report.member`` as live, apply its growth or its throttle (one
        decrease per epoch, however many processes report a throttle in it) to the
        (provider, model)'s cluster window and rate, atomically; the result."""
        ...


@dataclass(frozen=True, slots=True)
class ProviderReport:
    """What one worker process learned about one (provider, model) since it last said.

    The cluster's window and rate are sums over live processes; each process paces
    itself at its share (the sum over the live count) and reports what it grew, or
    that it was throttled, in the cluster epoch it last saw.
    """

    provider: str
    model: str
    member: str  # this worker process
    now: float  # wall-clock seconds: heartbeats are compared across machines
    grown_window: float  # calls at once this process's share grew by
    grown_rate: float  # requests per second this process's share grew by
    # The cluster epoch this process's throttled call was admitted under; None: none.
    throttled_epoch: int | None
    narrowed_window: bool  # the throttle narrowed this process's window ...
    lowered_rate: bool  # ... lowered its learned rate
    # This process's learned rate after the throttle (the cluster's first rate is it
    # times the live processes); None when it has none.
    learned_rate: float | None
    start_window: float  # where a new cluster window opens
    max_window: float  # each live process's cap: the cluster window is at most live x this
    live_after_seconds: float  # a process not heard from for this long is gone
    window_decrease_factor: float = 0.5  # as core/aimd.py narrows one process's window
    rate_decrease_factor: float = 0.85  # as core/adaptive_rate.py lowers one's rate


@dataclass(frozen=True, slots=True)
class ProviderShare:
    """The cluster's view after a report: every live process's calls together."""

    window: float
    rate: float | None  # requests per second; None until a throttle teaches one
    epoch: int  # advanced by every decrease: throttles under an older one are echoes
    members: int  # live worker processes calling this (provider, model), at least 1
