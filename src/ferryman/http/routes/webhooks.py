"""/v1/webhooks/secret: create or rotate the caller's webhook signing secret.

The secret appears once, in this answer (marked no-store), and never again: ferryman
keeps it sealed (FERRYMAN_SECRET_KEY) to sign with. After a rotation the replaced
secret keeps signing beside the new one for 24 hours, so a receiver can switch over
without missing a notification (docs/getting-results.md).
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from ferryman.core.errors import UnsupportedFieldError
from ferryman.http.auth import Tenant, app_deps
from ferryman.http.openapi import Access, operation
from ferryman.http.schemas import WebhookSecret
from ferryman.services.webhooks import PREVIOUS_SECRET_SECONDS

router = APIRouter(prefix="/v1/webhooks", tags=["webhooks"])


@router.post(
    "/secret",
    **operation(
        "rotateWebhookSecret",
        WebhookSecret,
        access=Access.TENANT,
        status=201,
        summary="Create or rotate the webhook signing secret (shown once)",
        response_headers={
            "Cache-Control": {"description": "no-store", "schema": {"type": "string"}}
        },
    ),
)
async def rotate_secret(request: Request, principal: Tenant) -> JSONResponse:
    secrets = app_deps(request).webhook_secrets
    if secrets is None:
        raise UnsupportedFieldError("webhooks are not offered by this server")
    secret = await secrets.rotate(principal.tenant_id)
    return JSONResponse(
        {"secret": secret, "previous_valid_for_seconds": PREVIOUS_SECRET_SECONDS},
        status_code=201,
        headers={"Cache-Control": "no-store"},
    )
