"""Per-tenant request budgets, and how a response tells the caller about them.

Two budgets per tenant, kept apart so that polling never costs a submission:

- ``submit``: requests that change something (POST: submissions, cancels, admin
  actions);
- ``read``: requests that only look (GET, HEAD: a job, a list, its events, tasks).

Each is a token bucket: ``burst`` requests at once, refilled at ``rate_per_second``.
A request spends one token of its budget or is refused with 429 and Retry-After; a
request that carries several jobs (a batch) spends one token per job (``cost``), so a
batch buys no more than the same jobs sent one by one. A cost over the burst is let
through once the bucket is full and leaves it in debt, so the sustained rate holds.
A request may pay in two steps (``paid``: a batch pays for its bytes before they are
parsed, then for the rest of its jobs): the second step is judged as if the whole
cost were asked at once, and when it is refused what was paid stays paid.

Every authenticated response says where its budget stands, in the header fields of
draft-ietf-httpapi-ratelimit-headers-11 (Structured Field lists):

    RateLimit-Policy: "read";q=400;w=2     the bucket: q requests, full again in w s
    RateLimit: "read";r=399;t=1            now: r requests left, full again in t s

On a 429, r is 0 and t equals Retry-After (the draft asks that Retry-After never
point before the end of the effective window).
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

from ferryman.core.ratelimit import KeyedRateLimiter


class Budget(enum.StrEnum):
    SUBMIT = "submit"
    READ = "read"

    @classmethod
    def for_method(cls, method: str) -> Budget:
        return cls.READ if method in ("GET", "HEAD") else cls.SUBMIT


@dataclass(frozen=True, slots=True)
class Policy:
    """``burst`` requests at once, refilled at ``rate_per_second``."""

    budget: Budget
    rate_per_second: float
    burst: int

    def __post_init__(self) -> None:
        if self.rate_per_second <= 0:
            raise ValueError("rate_per_second must be positive")
        if self.burst < 1:
            raise ValueError("burst must be at least 1")

    @property
    def window_seconds(self) -> int:
        """Whole seconds for an empty bucket to fill (rounded up, at least 1)."""
        return max(1, math.ceil(self.burst / self.rate_per_second))

    def header(self) -> str:
        return f'"{self.budget}";q={self.burst};w={self.window_seconds}'


@dataclass(frozen=True, slots=True)
class Quota:
    """One request's standing under a policy."""

    policy: Policy
    allowed: bool
    remaining: int
    # Seconds until the bucket is full again (allowed) or until the next token (refused).
    reset_seconds: int

    @property
    def retry_after_seconds(self) -> int:
        return self.reset_seconds

    def headers(self) -> list[tuple[str, str]]:
        return [
            ("RateLimit-Policy", self.policy.header()),
            ("RateLimit", f'"{self.policy.budget}";r={self.remaining};t={self.reset_seconds}'),
        ]


@dataclass(slots=True)
class TenantBudgets:
    """The buckets of every tenant (core.ratelimit), for each budget that has a policy."""

    policies: dict[Budget, Policy]
    _limiters: dict[Budget, KeyedRateLimiter] = field(default_factory=dict, init=False)

    def __post_init__(self) -> None:
        self._limiters = {
            budget: KeyedRateLimiter(policy.rate_per_second, policy.burst)
            for budget, policy in self.policies.items()
        }

    def take(
        self, budget: Budget, tenant_id: str, now: float, cost: int = 1, paid: int = 0
    ) -> Quota | None:
        """Spend ``cost`` requests (1, or a batch's items) of ``tenant_id``'s ``budget``;
        None when it is unlimited. A cost over the burst passes once the bucket is full
        and leaves it in debt (core.ratelimit), so a batch is never refused forever.
        ``paid``: what this request already spent, judged together with ``cost``."""
        if cost < 1 or paid < 0:
            raise ValueError("cost must be at least 1, paid at least 0")
        policy = self.policies.get(budget)
        if policy is None:
            return None
        bucket = self._limiters[budget].bucket(tenant_id)
        bucket.adjust(now, -paid)  # the whole request is judged: as if nothing were paid yet
        wait_seconds = bucket.take(now, float(cost + paid))
        if wait_seconds > 0:
            bucket.adjust(now, paid)  # refused: what it paid stays paid, and is waited for
            wait_seconds += paid / policy.rate_per_second
            return Quota(policy, False, 0, max(1, math.ceil(wait_seconds)))
        return Quota(policy, True, bucket.remaining, math.ceil(bucket.seconds_until_full))

    async def acquire(
        self, budget: Budget, tenant_id: str, now: float, cost: int = 1, paid: int = 0
    ) -> Quota | None:
        """take(), as the API calls it: budgets shared through the database
        (http/rate_lease.py) may have to ask it, these never wait."""
        return self.take(budget, tenant_id, now, cost, paid)
