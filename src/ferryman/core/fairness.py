"""Fair dispatch between tenants: which waiting messages a receive takes, in what order.

The rule (docs/architecture.md, the worker's steps): a tenant's share of a receiver's
slots is bounded, and no tenant's backlog or retries hold another tenant's fresh work
behind them. Given each tenant's waiting messages (oldest-visible first, already cut to what
that tenant may still hold), slots go one at a time to the tenant holding the fewest,
ties to the one whose next message has waited longest. A tenant with 90 queued jobs
and one with 2 therefore split free slots evenly until the small one is served.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

T = TypeVar("T")


def fair_pick(
    waiting: Mapping[str, Sequence[T]],
    *,
    held: Callable[[str], int],
    waited_since: Callable[[T], float],
    limit: int,
) -> list[T]:
    """Up to ``limit`` items from ``waiting`` (per tenant, oldest first), fairly.

    ``held(tenant)`` is how many the tenant already holds; ``waited_since(item)`` is
    when the item became available (smaller waited longer).
    """
    heap: list[tuple[int, float, str]] = []
    for tenant, items in waiting.items():
        if items:
            heapq.heappush(heap, (held(tenant), waited_since(items[0]), tenant))
    taken: dict[str, int] = {}
    picked: list[T] = []
    while heap and len(picked) < limit:
        holding, _, tenant = heapq.heappop(heap)
        index = taken.get(tenant, 0)
        items = waiting[tenant]
        picked.append(items[index])
        taken[tenant] = index + 1
        if index + 1 < len(items):
            heapq.heappush(heap, (holding + 1, waited_since(items[index + 1]), tenant))
    return picked
