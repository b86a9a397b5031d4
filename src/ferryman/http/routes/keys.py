"""/v1/admin/keys: list, create and revoke API keys; admin keys only (others get 403).

A key's secret appears once, in the answer that creates it (marked no-store), and
never in a list. Keys are named by their public id in paths, never by the whole
key: a secret in a URL would end up in access logs.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool

from ferryman.core.errors import ApiKeyNotFoundError, InvalidRequestError, LastAdminKeyError
from ferryman.http.auth import Admin, app_deps
from ferryman.http.bodies import read_body
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import ApiKeyList, CreatedApiKey, RevokedApiKey
from ferryman.http.timestamps import epoch_seconds, rfc3339
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome
from ferryman.services.access import MAX_KEY_LIFETIME_SECONDS, TENANT_PATTERN, key_state

router = APIRouter(prefix="/v1/admin/keys", tags=["operations"])

KEY_ID_PATTERN = r"^[0-9a-f]{12}$"


class KeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The pattern is checked by ApiKeys (its message names the rule); here it is shown.
    tenant: str = Field(min_length=1, max_length=64, json_schema_extra={"pattern": TENANT_PATTERN})
    admin: StrictBool = False
    # At most one of the two; neither: the key never expires.
    # RFC 3339 with its offset (read by http/timestamps.py, which refuses anything else).
    expires_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    expires_in_seconds: float | None = Field(default=None, gt=0, le=MAX_KEY_LIFETIME_SECONDS)


def key_body(record: ApiKeyRecord, now: float) -> dict[str, Any]:
    """A key as lists show it: everything but its secret (and the secret's hash)."""
    return {
        "key_id": record.key_id,
        "tenant_id": record.tenant_id,
        "admin": record.admin,
        "status": str(key_state(record, now)),
        "created_at": rfc3339(record.created_at),
        "expires_at": rfc3339(record.expires_at),
        "revoked_at": rfc3339(record.revoked_at),
        "revoked_by": record.revoked_by,
    }


@router.get(
    "",
    **operation(
        "listApiKeys", ApiKeyList, access=Access.ADMIN, params=True, summary="List API keys"
    ),
)
async def list_keys(
    request: Request,
    principal: Admin,
    tenant: Annotated[str | None, Query(min_length=1, max_length=64)] = None,
) -> JSONResponse:
    api_keys = app_deps(request).api_keys
    records = await api_keys.list_keys(tenant_id=tenant)
    now = api_keys.now()
    return JSONResponse({"data": [key_body(record, now) for record in records]})


@router.post(
    "",
    **operation(
        "createApiKey",
        CreatedApiKey,
        access=Access.ADMIN,
        status=201,
        body=KeyRequest,
        summary="Create an API key (its secret is shown once)",
        response_headers={
            "Cache-Control": {"description": "no-store", "schema": {"type": "string"}}
        },
    ),
)
async def create_key(request: Request, principal: Admin) -> JSONResponse:
    body = await read_body(request, KeyRequest)
    api_keys = app_deps(request).api_keys
    issued = await api_keys.issue(
        body.tenant, admin=body.admin, expires_at=_expiry(body, api_keys.now())
    )
    return JSONResponse(
        {"key": issued.token, **key_body(issued.record, api_keys.now())},
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )


def _expiry(body: KeyRequest, now: float) -> float | None:
    if body.expires_at is not None and body.expires_in_seconds is not None:
        msg = "give expires_at or expires_in_seconds, not both"
        raise InvalidRequestError(msg, errors=[{"loc": ["body", "expires_at"], "msg": msg}])
    if body.expires_at is not None:
        return epoch_seconds(body.expires_at, loc=["body", "expires_at"])
    if body.expires_in_seconds is not None:
        return now + body.expires_in_seconds
    return None


@router.post(
    "/{key_id}/revoke",
    **operation(
        "revokeApiKey",
        RevokedApiKey,
        access=Access.ADMIN,
        params=True,
        summary="Revoke an API key",
        errors=(ApiKeyNotFoundError, LastAdminKeyError),
    ),
)
async def revoke_key(
    request: Request,
    principal: Admin,
    key_id: Annotated[str, Path(pattern=KEY_ID_PATTERN)],
) -> JSONResponse:
    api_keys = app_deps(request).api_keys
    revocation = await api_keys.revoke(key_id, actor=principal.key_id)
    assert revocation.record is not None
    return JSONResponse(
        {
            **key_body(revocation.record, api_keys.now()),
            "already_revoked": revocation.outcome is RevokeOutcome.ALREADY_REVOKED,
        }
    )
