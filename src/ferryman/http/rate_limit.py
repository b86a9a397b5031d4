"""Per-tenant request budgets, and how a response tells the caller about them.

Two budgets per tenant, kept apart so that polling never costs a submission:

- ``submit``: requests that change something (POST: submissions, cancels, admin
  actions);
- ``read``: requests that only look (GET, HEAD: a job, a list, its events, tasks).

Each is a token bucket: ``burst`` requests at once, refilled at ``rate_per_second``.
A request spends one token of its budget or is refused with 429 and Retry-After.

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
class _Bucket:
    tokens: float
    updated_at: float


@dataclass(slots=True)
class TenantBudgets:
    """The buckets of every tenant, for each budget that has a policy.

    Buckets are created on first use and kept for the life of the process: their
    number is bounded by the API keys an operator created.
    """

    policies: dict[Budget, Policy]
    _buckets: dict[tuple[Budget, str], _Bucket] = field(default_factory=dict)

    def take(self, budget: Budget, tenant_id: str, now: float) -> Quota | None:
        """Spend one request of ``tenant_id``'s ``budget``; None when it is unlimited."""
        policy = self.policies.get(budget)
        if policy is None:
            return None
        bucket = self._buckets.get((budget, tenant_id))
        if bucket is None:
            bucket = self._buckets[(budget, tenant_id)] = _Bucket(float(policy.burst), now)
        # A clock that steps backwards must not mint or destroy tokens.
        elapsed = max(0.0, now - bucket.updated_at)
        bucket.tokens = min(float(policy.burst), bucket.tokens + elapsed * policy.rate_per_second)
        bucket.updated_at = max(bucket.updated_at, now)
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            until_full = (policy.burst - bucket.tokens) / policy.rate_per_second
            return Quota(policy, True, math.floor(bucket.tokens), math.ceil(until_full))
        until_token = (1.0 - bucket.tokens) / policy.rate_per_second
        return Quota(policy, False, 0, max(1, math.ceil(until_token)))
