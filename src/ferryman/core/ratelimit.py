"""Token buckets over explicit times, so rate limits are tested without sleeping."""

from __future__ import annotations

from dataclasses import dataclass, field


class TokenBucket:
    """Allow ``burst`` requests at once, refilled at ``rate_per_second``.

    ``take(now)`` spends one token and returns 0.0, or spends nothing and returns
    how many seconds until a token will be there (what Retry-After should say).
    """

    def __init__(self, rate_per_second: float, burst: int) -> None:
        if rate_per_second <= 0:
            raise ValueError("rate_per_second must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.rate_per_second = rate_per_second
        self.burst = burst
        self._tokens = float(burst)
        self._updated_at: float | None = None

    def take(self, now: float, amount: float = 1.0) -> float:
        """Spend ``amount`` tokens (1 request; or an estimate of a call's model tokens)
        and return 0.0, or spend nothing and return the seconds until they are there.
        An amount over the burst is let through once the bucket is full (it could
        never wait long enough otherwise), leaving the bucket in debt."""
        self._refill(now)
        needed = min(amount, float(self.burst))
        if self._tokens >= needed:
            self._tokens -= amount
            return 0.0
        return (needed - self._tokens) / self.rate_per_second

    def adjust(self, now: float, amount: float) -> None:
        """Spend (positive) or give back (negative) tokens after the fact: an estimate
        corrected by what a call really used. The bucket may go into debt."""
        self._refill(now)
        self._tokens = min(float(self.burst), self._tokens - amount)

    @property
    def remaining(self) -> int:
        """Whole requests left as of the last take."""
        return max(0, int(self._tokens))

    @property
    def seconds_until_full(self) -> float:
        """As of the last take, how long until the bucket holds ``burst`` again."""
        return (self.burst - self._tokens) / self.rate_per_second

    def _refill(self, now: float) -> None:
        if self._updated_at is not None:
            # A clock that steps backwards must not mint or destroy tokens.
            elapsed = max(0.0, now - self._updated_at)
            self._tokens = min(float(self.burst), self._tokens + elapsed * self.rate_per_second)
        if self._updated_at is None or now > self._updated_at:
            self._updated_at = now


@dataclass(slots=True)
class KeyedRateLimiter:
    """One TokenBucket per key (a tenant), created on first use.

    The number of keys is bounded by the API keys an operator created, so the
    buckets are kept for the life of the process.
    """

    rate_per_second: float
    burst: int
    _buckets: dict[str, TokenBucket] = field(default_factory=dict)

    def take(self, key: str, now: float) -> float:
        return self.bucket(key).take(now)

    def bucket(self, key: str) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(self.rate_per_second, self.burst)
        return bucket
