"""What a tenant's model calls used and cost, over a period, by day, model or task.

Every attempt records its tokens and its cost (from its model alias's prices), so a
report is a sum over attempts. "Wasted" cost is what the durability machinery and
failures cost: calls whose result is not the job's published one (retries, lost
leases, abandoned or cancelled attempts, final failures). A crashed attempt never
reported its tokens, so its cost is unknown and counted as nothing. An answer that
reported no usage is unknown too: its tokens and cost are null on the attempt, left out
of the sums, and counted in ``unknown_usage_calls``, so a report never passes an unknown
off as 0 tokens and $0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ferryman.core.errors import InvalidRequestError
from ferryman.ports.store import UsageRow

if TYPE_CHECKING:
    from ferryman.core.clock import Clock
    from ferryman.ports.store import JobReads, UsageGroup

DEFAULT_PERIOD_SECONDS = 30 * 86_400.0
# One report covers at most this long: a bounded amount of work per request.
MAX_PERIOD_SECONDS = 366 * 86_400.0


@dataclass(frozen=True, slots=True)
class UsageReport:
    start: float
    end: float
    group_by: UsageGroup
    rows: list[UsageRow]
    total: UsageRow


class UsageReports:
    def __init__(self, *, store: JobReads, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def report(
        self,
        tenant_id: str | None,
        *,
        group_by: UsageGroup,
        start: float | None = None,
        end: float | None = None,
    ) -> UsageReport:
        """``tenant_id`` None: every tenant (operators). Raises InvalidRequestError for
        a period that ends before it starts or spans more than a year."""
        until = self._clock.now() if end is None else end
        since = until - DEFAULT_PERIOD_SECONDS if start is None else start
        if since >= until:
            raise _bad_period("'from' must be before 'to'")
        if until - since > MAX_PERIOD_SECONDS:
            raise _bad_period("a report covers at most 366 days")
        rows = await self._store.usage_report(
            tenant_id=tenant_id, start=since, end=until, group_by=group_by
        )
        return UsageReport(start=since, end=until, group_by=group_by, rows=rows, total=_total(rows))


def _bad_period(message: str) -> InvalidRequestError:
    return InvalidRequestError(message, errors=[{"loc": ["query", "from"], "msg": message}])


def _total(rows: list[UsageRow]) -> UsageRow:
    return UsageRow(
        key="total",
        calls=sum(r.calls for r in rows),
        failed_calls=sum(r.failed_calls for r in rows),
        input_tokens=sum(r.input_tokens for r in rows),
        output_tokens=sum(r.output_tokens for r in rows),
        cost_nano_usd=sum(r.cost_nano_usd for r in rows),
        wasted_nano_usd=sum(r.wasted_nano_usd for r in rows),
        unknown_usage_calls=sum(r.unknown_usage_calls for r in rows),
    )
