"""Who is calling: Bearer API keys, the admin check, and the per-tenant budgets.

The tenant of every request is the key's tenant; nothing in a body or header can
choose another. The request budget (http/rate_limit.py: reads and submissions
apart) is spent per tenant right after authentication, so an anonymous flood
never spends a tenant's budget, and every authenticated response says where the
budget stands.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from ferryman.core.errors import AuthenticationError, ForbiddenError, InvalidRequestError
from ferryman.http.context import request_info
from ferryman.http.errors import RateLimitedError
from ferryman.http.rate_limit import Budget
from ferryman.services.access import Principal

if TYPE_CHECKING:
    from ferryman.http.app import AppDeps
    from ferryman.http.rate_lease import LeasedBudgets
    from ferryman.http.rate_limit import TenantBudgets

# Longer than any key we issue; refused before it is hashed.
_MAX_TOKEN_CHARS = 512
_RATE_LIMIT_HEADERS = frozenset({"RateLimit", "RateLimit-Policy"})


# Declares the scheme in the OpenAPI document (so Swagger's Authorize button works) on
# every route that authenticates; the header itself is read by _bearer_token below,
# which also bounds its length and answers a problem rather than FastAPI's own 403.
bearer_scheme = HTTPBearer(
    auto_error=False,
    scheme_name="bearerAuth",
    description="An API key (`ferryman keys create`), as `Authorization: Bearer <key>`.",
)
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)]


def app_deps(request: Request) -> AppDeps:
    deps: AppDeps = request.app.state.deps
    return deps


async def authenticated(request: Request, _scheme: Credentials) -> Principal:
    return await authenticate(request)


async def authenticate(request: Request) -> Principal:
    """What the ``Tenant`` dependency does, called by a route itself: the submit route
    does, since FastAPI's solving of a dependency chain costs more than the check
    (``operation(..., authenticates_itself=True)`` still names the scheme in the
    document)."""
    principal = await _identify(request)
    await spend(request, principal, cost=1)
    # Here rather than before: an anonymous caller learns nothing about validation.
    refuse_repeated_query(request)
    return principal


async def identified(request: Request, _scheme: Credentials) -> Principal:
    """Who is calling, without spending their budget: for a route that knows its cost
    only once it has read the body (a batch) and calls ``spend`` itself."""
    principal = await _identify(request)
    refuse_repeated_query(request)
    return principal


async def _identify(request: Request) -> Principal:
    principal = await app_deps(request).api_keys.authenticate(_bearer_token(request))
    request_info(request).tenant_id = principal.tenant_id
    return principal


async def spend(request: Request, principal: Principal, *, cost: int, paid: int = 0) -> None:
    """Spend ``cost`` requests of the caller's budget; 429 when it is used up. Budgets
    shared through the database (http/rate_lease.py) may have to ask it. ``paid``:
    what this request already spent (http/rate_limit.py), whose headers this replaces."""
    budgets: TenantBudgets | LeasedBudgets = request.app.state.budgets
    now = app_deps(request).clock.now()
    budget = Budget.for_method(request.method)
    quota = await budgets.acquire(budget, principal.tenant_id, now, cost, paid)
    if quota is not None:
        headers = request_info(request).response_headers
        if paid:
            headers[:] = [(k, v) for k, v in headers if k not in _RATE_LIMIT_HEADERS]
        headers.extend(quota.headers())
        if not quota.allowed:
            raise RateLimitedError(retry_after_seconds=quota.retry_after_seconds)


# Query parameters that are lists, given once per value (``?job_id=a&job_id=b``).
LIST_QUERY_PARAMETERS = frozenset({"job_id"})


def refuse_repeated_query(request: Request) -> None:
    """Every other query parameter of this API takes one value: one given twice is
    refused (422) rather than read as whichever came last."""
    if not request.scope.get("query_string"):
        return  # nothing to parse (a submit has no query)
    seen: set[str] = set()
    for name, _ in request.query_params.multi_items():
        if name in seen and name not in LIST_QUERY_PARAMETERS:
            msg = f"the query parameter {name!r} is given more than once"
            raise InvalidRequestError(msg, errors=[{"loc": ["query", name], "msg": msg}])
        seen.add(name)


async def admin(principal: Annotated[Principal, Depends(authenticated)]) -> Principal:
    if not principal.admin:
        raise ForbiddenError()
    return principal


def _bearer_token(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or len(token) > _MAX_TOKEN_CHARS:
        raise AuthenticationError()
    return token


Tenant = Annotated[Principal, Depends(authenticated)]
# Authenticated; the route spends the budget itself (http/routes/batch.py).
UnmeteredTenant = Annotated[Principal, Depends(identified)]
Admin = Annotated[Principal, Depends(admin)]
