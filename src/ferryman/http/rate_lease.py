"""Per-tenant budgets shared by every API process, leased a few tokens at a time.

Each (budget, tenant) has one bucket in the database (ports/limits.py). A process
leases a batch of tokens from it with one atomic statement and spends them locally,
so only about one request in ``batch`` waits on the database; the rest cost a dict
lookup. A refused lease is remembered until the next token is due, so a tenant
hammering an empty bucket costs the database one statement per refill, not one per
request. Tokens a process leased and did not spend within ``MAX_LEASE_AGE_SECONDS``
are dropped (never handed back): the cluster then admits slightly less than the
budget for a moment, never more. The reasoning and the measured cost are in
docs/design-notes.md ("Shared rate limits").
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ferryman.http.rate_limit import Quota

if TYPE_CHECKING:
    from ferryman.http.rate_limit import Budget, Policy
    from ferryman.ports.limits import SharedLimits

# A batch is what the bucket refills in this long: a busy tenant's requests take one
# database round trip per batch, an idle process holds at most this much of its rate.
LEASE_SECONDS = 0.5
# Unspent leased tokens older than this are dropped, so an idle process does not sit
# on a tenant's budget.
MAX_LEASE_AGE_SECONDS = 1.0


def batch_size(policy: Policy) -> int:
    """Tokens leased at once: the refill of LEASE_SECONDS, at least 1, at most a
    quarter of the burst (so four processes can each hold a lease of a full bucket)."""
    return max(1, min(math.ceil(policy.rate_per_second * LEASE_SECONDS), policy.burst // 4))


@dataclass(slots=True)
class _Held:
    """One process's view of one shared bucket."""

    tokens: int = 0
    leased_at: float = float("-inf")
    # The shared bucket's balance after our last lease, for the response headers.
    tokens_left: float = 0.0
    # Set after a refused lease: no token is due before this time.
    empty_until: float = float("-inf")
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


@dataclass(slots=True)
class LeasedBudgets:
    """acquire() as TenantBudgets does, against buckets shared through ``shared``."""

    policies: dict[Budget, Policy]
    shared: SharedLimits
    _held: dict[tuple[Budget, str], _Held] = field(default_factory=dict, init=False)

    async def acquire(
        self, budget: Budget, tenant_id: str, now: float, cost: int = 1, paid: int = 0
    ) -> Quota | None:
        """Spend ``cost`` requests (1, or a batch's items) of ``tenant_id``'s ``budget``;
        None when it is unlimited. A cost over the burst passes once a burst's worth is
        leased and leaves this process in debt, paid from its next leases. ``paid``:
        what this request already spent, judged together with ``cost`` (it counts
        towards the burst's worth a large cost needs)."""
        if cost < 1 or paid < 0:
            raise ValueError("cost must be at least 1, paid at least 0")
        policy = self.policies.get(budget)
        if policy is None:
            return None
        held = self._held.get((budget, tenant_id))
        if held is None:
            held = self._held[(budget, tenant_id)] = _Held()
        need = max(0, min(cost + paid, policy.burst) - paid)
        if held.tokens < need or now - held.leased_at > MAX_LEASE_AGE_SECONDS:
            # One lease at a time per bucket: concurrent requests share its batch.
            async with held.lock:
                await self._refill(held, policy, f"{budget}:{tenant_id}", need, now)
        if held.tokens < need:
            wait_seconds = max(0.0, held.empty_until - now)
            return Quota(policy, False, 0, max(1, math.ceil(wait_seconds)))
        held.tokens -= cost
        full_in = (policy.burst - held.tokens_left - held.tokens) / policy.rate_per_second
        remaining = int(held.tokens_left) + held.tokens
        return Quota(policy, True, max(0, remaining), max(0, math.ceil(full_in)))

    async def _refill(self, held: _Held, policy: Policy, key: str, need: int, now: float) -> None:
        if now - held.leased_at > MAX_LEASE_AGE_SECONDS:
            held.tokens = min(held.tokens, 0)  # unspent tokens go stale; a debt stays
        if held.tokens >= need or now < held.empty_until:
            return  # another request refilled it meanwhile, or nothing is due yet
        lease = await self.shared.lease(
            key,
            rate_per_second=policy.rate_per_second,
            burst=policy.burst,
            want=max(batch_size(policy), need - held.tokens),
            now=now,
        )
        held.tokens += lease.granted
        held.tokens_left, held.leased_at = lease.tokens_left, now
        if held.tokens < need:
            short = need - held.tokens - lease.tokens_left
            held.empty_until = now + max(0.0, short) / policy.rate_per_second
