"""/v1/usage: a tenant's own tokens, calls and cost; /v1/admin/usage: any tenant's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from fastapi import APIRouter, Query, Request

from ferryman.core.models import usd
from ferryman.http.auth import Admin, Tenant, app_deps
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import TenantUsageReport
from ferryman.http.schemas import UsageReport as UsageReportBody
from ferryman.http.timestamps import epoch_seconds, rfc3339
from ferryman.http.views import JsonBody
from ferryman.ports.store import UsageGroup

if TYPE_CHECKING:
    from ferryman.ports.store import UsageRow
    from ferryman.services.usage import UsageReport

router = APIRouter(tags=["usage"])

# Strings read by http/timestamps.py, so a time is RFC 3339 (with its offset) and
# nothing else: not an epoch number, not a time without an offset.
From = Annotated[
    str | None,
    Query(
        alias="from",
        description="RFC 3339 start, offset included (default: 30 days before `to`)",
        json_schema_extra={"format": "date-time"},
    ),
]
To = Annotated[
    str | None,
    Query(
        description="RFC 3339 end, exclusive, offset included (default: now)",
        json_schema_extra={"format": "date-time"},
    ),
]
GroupBy = Annotated[UsageGroup, Query(description="day (UTC), model (alias) or task")]


@router.get(
    "/v1/usage",
    **operation(
        "getUsage",
        UsageReportBody,
        access=Access.TENANT,
        params=True,
        summary="Your usage and cost",
    ),
)
async def tenant_usage(
    request: Request,
    principal: Tenant,
    start: From = None,
    to: To = None,
    group_by: GroupBy = UsageGroup.DAY,
) -> JsonBody:
    report = await app_deps(request).usage.report(
        principal.tenant_id,
        group_by=group_by,
        start=epoch_seconds(start, loc=["query", "from"]),
        end=epoch_seconds(to, loc=["query", "to"]),
    )
    return JsonBody(_report_body(report))


@router.get(
    "/v1/admin/usage",
    **operation(
        "getTenantUsage",
        TenantUsageReport,
        access=Access.ADMIN,
        params=True,
        summary="Any tenant's usage and cost, or every tenant's",
    ),
    tags=["operations"],
)
async def admin_usage(
    request: Request,
    principal: Admin,
    tenant: Annotated[str | None, Query(max_length=64, description="default: every tenant")] = None,
    start: From = None,
    to: To = None,
    group_by: GroupBy = UsageGroup.DAY,
) -> JsonBody:
    report = await app_deps(request).usage.report(
        tenant,
        group_by=group_by,
        start=epoch_seconds(start, loc=["query", "from"]),
        end=epoch_seconds(to, loc=["query", "to"]),
    )
    return JsonBody({"tenant_id": tenant, **_report_body(report)})


def _report_body(report: UsageReport) -> dict[str, Any]:
    return {
        "from": rfc3339(report.start),
        "to": rfc3339(report.end),
        "group_by": str(report.group_by),
        "data": [{str(report.group_by): row.key, **_row_body(row)} for row in report.rows],
        "total": _row_body(report.total),
    }


def _row_body(row: UsageRow) -> dict[str, Any]:
    return {
        "calls": row.calls,
        "failed_calls": row.failed_calls,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cost_usd": usd(row.cost_nano_usd),
        "wasted_cost_usd": usd(row.wasted_nano_usd),
        "unknown_usage_calls": row.unknown_usage_calls,
    }
