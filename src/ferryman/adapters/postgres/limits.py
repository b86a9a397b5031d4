"""PostgresSharedLimits: token buckets in one table, leased with one atomic upsert."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ferryman.adapters.postgres.sql import LIMITS
from ferryman.ports.limits import TokenLease

if TYPE_CHECKING:
    from ferryman.adapters.postgres.database import PostgresDatabase


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
        )
        if row is None:  # an upsert always returns its row
            raise RuntimeError("lease_tokens returned no row")
        return TokenLease(granted=int(row["granted"]), tokens_left=float(row["tokens"]))
