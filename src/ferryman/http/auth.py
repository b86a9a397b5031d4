"""Who is calling: Bearer API keys, the admin check, and the per-tenant rate limit.

The tenant of every request is the key's tenant; nothing in a body or header can
choose another. The rate limit is applied per tenant right after authentication,
so an anonymous flood never spends a tenant's budget.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from ferryman.core.errors import AuthenticationError, ForbiddenError
from ferryman.http.context import request_info
from ferryman.http.errors import RateLimitedError
from ferryman.services.access import Principal

if TYPE_CHECKING:
    from ferryman.core.ratelimit import KeyedRateLimiter
    from ferryman.http.app import AppDeps

# Longer than any key we issue; refused before it is hashed.
_MAX_TOKEN_CHARS = 512


def app_deps(request: Request) -> AppDeps:
    deps: AppDeps = request.app.state.deps
    return deps


async def authenticated(request: Request) -> Principal:
    deps = app_deps(request)
    principal = await deps.api_keys.authenticate(_bearer_token(request))
    request_info(request).tenant_id = principal.tenant_id
    limiter: KeyedRateLimiter | None = request.app.state.rate_limiter
    if limiter is not None:
        wait_seconds = limiter.take(principal.tenant_id, deps.clock.now())
        if wait_seconds > 0:
            raise RateLimitedError(retry_after_seconds=max(1, math.ceil(wait_seconds)))
    return principal


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
Admin = Annotated[Principal, Depends(admin)]
