"""Lease and fence math: how long an attempt owns a job, and when to renew."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class LeasePolicy:
    """How long an attempt owns its job and how often the owner says it is alive.

    The heartbeat renews both the lease and the message's visibility, so a live
    attempt is never taken over and its message never reappears.
    """

    lease_seconds: float = 60.0
    visibility_timeout_seconds: float = 60.0
    heartbeat_interval_seconds: float | None = None

    def __post_init__(self) -> None:
        if self.lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        if self.visibility_timeout_seconds <= 0:
            raise ValueError("visibility_timeout_seconds must be positive")

    @property
    def heartbeat_seconds(self) -> float:
        """Renew three times per lease (or as configured), so two lost beats are survivable."""
        if self.heartbeat_interval_seconds is not None:
            return self.heartbeat_interval_seconds
        return min(self.lease_seconds, self.visibility_timeout_seconds) / 3

    def lease_until(self, now: float) -> float:
        return now + self.lease_seconds

    def takeover_delay_seconds(self, lease_until: float | None, now: float) -> float:
        """How long to hide a message whose job another live attempt owns."""
        if lease_until is None:
            return self.visibility_timeout_seconds
        # Reappear just after the lease would expire, so a dead owner is taken over promptly.
        return max(1.0, lease_until - now + 1.0)
