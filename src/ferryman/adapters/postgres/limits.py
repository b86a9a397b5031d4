"""PostgresSharedLimits: limits every process shares, each changed by one atomic upsert.

API budgets are token buckets leased a batch at a time; a (provider, model)'s window
and learned rate are the sums over the worker processes calling it, with a heartbeat
row per process so a dead one stops counting.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.database import execute, fetch_one
from ferryman.adapters.postgres.sql import LIMITS
from ferryman.ports.limits import ProviderReport, ProviderShare, TokenLease

if TYPE_CHECKING:
    from ferryman.adapters.postgres.database import PostgresDatabase


# The cluster's learned rate never falls below this (requests per second), as each
# process's own (core/adaptive_rate.py) does not.
MIN_RATE_PER_SECOND = 0.1


class PostgresSharedLimits:
    def __init__(self, db: PostgresDatabase) -> None:
        self._db = db

    async def lease(
        self, key: str, *, rate_per_second: float, burst: int, want: int, now: float
    ) -> TokenLease:
        if want < 1:
            raise ValueError("want must be at least 1")
        row = await self._db.fetch_one(
            LIMITS["lease_tokens"],
            {"key": key, "rate": rate_per_second, "burst": burst, "want": want, "now": now},
            retry=False,  # it writes: a lease taken twice would admit more than the budget
        )
        if row is None:  # an upsert always returns its row
            raise RuntimeError("lease_tokens returned no row")
        return TokenLease(granted=int(row["granted"]), tokens_left=float(row["tokens"]))

    async def report_provider(self, report: ProviderReport) -> ProviderShare:
        key = {"provider": report.provider, "model": report.model}
        async with self._db.transaction() as conn:
            last = await fetch_one(
                conn, LIMITS["provider_member_last_seen"], {**key, "member": report.member}
            )
            joined = last is None or last["seen_at"] < report.now - report.live_after_seconds
            await execute(
                conn,
                LIMITS["provider_member_seen"],
                {**key, "member": report.member, "now": report.now},
            )
            await execute(
                conn,
                LIMITS["provider_members_forget"],
                {**key, "forget_before": report.now - 100 * report.live_after_seconds},
            )
            counted = await fetch_one(
                conn,
                LIMITS["provider_members_live"],
                {**key, "live_since": report.now - report.live_after_seconds},
            )
            members = max(1, int(counted["live"]) if counted else 1)
            learned_total = None if report.learned_rate is None else report.learned_rate * members
            row = await fetch_one(
                conn,
                LIMITS["provider_report"],
                {
                    **key,
                    "now": report.now,
                    "start_window": report.start_window,
                    "max_total": report.max_window * members,
                    "grown_window": max(0.0, report.grown_window),
                    # A process joining brings its starting window with it.
                    "joined_window": report.start_window if joined else 0.0,
                    "grown_rate": max(0.0, report.grown_rate),
                    "throttled_epoch": report.throttled_epoch,
                    "narrowed_window": report.narrowed_window,
                    "lowered_rate": report.lowered_rate,
                    "learned_total": learned_total,
                    "min_rate": MIN_RATE_PER_SECOND,
                    "window_factor": report.window_decrease_factor,
                    "rate_factor": report.rate_decrease_factor,
                },
            )
        if row is None:  # an upsert always returns its row
            raise RuntimeError("provider_report returned no row")
        rate = row["rate"]
        return ProviderShare(
            window=float(row["window_calls"]),
            rate=None if rate is None else float(rate),
            epoch=int(row["epoch"]),
            members=members,
        )
