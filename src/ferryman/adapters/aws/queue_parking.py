"""Deliveries a receive took from SQS but may not return yet: their tenant is at its
share of the receiver's TenantBudget. Pure bookkeeping; adapters/aws/queue.py does
the SQS calls (keeping them hidden, handing them out, letting the oldest go).

Why park instead of putting the message straight back: every SQS receive raises the
message's ApproximateReceiveCount, and redrive dead-letters it after
``maxReceiveCount``. A receiver that gave back (visibility 0) each delivery over a
tenant's share, and received it again a moment later, would dead-letter a flooding
tenant's jobs that never ran. A parked delivery keeps its one receive.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ferryman.ports.queue import Delivery, TenantBudget


# A parked delivery is hidden again this long before it would show (at most; a third of
# its hiding when that is shorter), so a slow round never lets it show.
REFRESH_AHEAD_SECONDS = 10.0


@dataclass(slots=True)
class Parked:
    delivery: Delivery
    message_id: str
    hidden_until: float  # epoch seconds, as this process last set it
    # How long each hiding lasts: what a crash of this process leaves it hidden at most.
    hide_seconds: int

    @property
    def due_at(self) -> float:
        """When it is to be hidden again."""
        return self.hidden_until - min(REFRESH_AHEAD_SECONDS, self.hide_seconds / 3)


class Allowance:
    """What one receive may still return: in all, and per tenant within the budget.

    The budget's ``in_flight`` counts only deliveries the receiver has started, so
    this receive counts its own as it gives them."""

    def __init__(self, max_messages: int, budget: TenantBudget | None) -> None:
        self.room = max(0, max_messages)
        self._budget = budget
        self._given: collections.Counter[str] = collections.Counter()

    def allows(self, tenant_id: str) -> bool:
        if self.room <= 0:
            return False
        return self._budget is None or self._given[tenant_id] < self._budget.allowance(tenant_id)

    def give(self, tenant_id: str) -> None:
        self.room -= 1
        self._given[tenant_id] += 1

    def take_back(self, tenant_id: str) -> None:
        """A delivery given then found stale (SQS refused to hide it again)."""
        self.room += 1
        self._given[tenant_id] -= 1


class ParkingLot:
    """At most ``capacity`` parked deliveries, oldest sent first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("the parking capacity must be at least 1")
        self.capacity = capacity
        self._parked: list[Parked] = []

    def __len__(self) -> int:
        return len(self._parked)

    def __bool__(self) -> bool:
        return bool(self._parked)

    @property
    def full(self) -> bool:
        return len(self._parked) >= self.capacity

    def park(self, parked: Parked) -> list[Parked]:
        """Park one; the oldest ones beyond the capacity come back, to be let go."""
        self.drop_message(parked.message_id)
        self._parked.append(parked)
        self._parked.sort(key=lambda p: p.delivery.sent_at)
        overflow = len(self._parked) - self.capacity
        if overflow <= 0:
            return []
        released, self._parked = self._parked[:overflow], self._parked[overflow:]
        return released

    def take(self, allowance: Allowance) -> list[Parked]:
        """The oldest parked deliveries the allowance lets this receive return, out."""
        taken: list[Parked] = []
        kept: list[Parked] = []
        for parked in self._parked:
            tenant = parked.delivery.message.tenant_id
            if allowance.allows(tenant):
                allowance.give(tenant)
                taken.append(parked)
            else:
                kept.append(parked)
        self._parked = kept
        return taken

    def drop_message(self, message_id: str) -> None:
        """Forget a message's parked delivery (received again: its receipt is stale)."""
        self._parked = [p for p in self._parked if p.message_id != message_id]

    def drop(self, receipts: set[str]) -> None:
        self._parked = [p for p in self._parked if p.delivery.receipt not in receipts]

    def all(self) -> list[Parked]:
        return list(self._parked)

    def due(self, *, now: float) -> list[Parked]:
        """Those to be hidden again now (Parked.due_at)."""
        return [p for p in self._parked if p.due_at <= now]

    def next_due_at(self) -> float | None:
        return min((p.due_at for p in self._parked), default=None)

    def empty(self) -> list[Parked]:
        everything, self._parked = self._parked, []
        return everything
