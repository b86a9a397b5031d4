"""Standard Webhooks signatures: the secrets tenants verify with, and the
``webhook-signature`` header made from them.

Signing goes through the ``standardwebhooks`` package's own ``Webhook.sign`` rather
than a copy of its HMAC: what receivers verify with the standard's libraries is then
the standard's algorithm by construction, not by a test of ours.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from secrets import token_bytes
from typing import TYPE_CHECKING

from standardwebhooks.webhooks import Webhook

if TYPE_CHECKING:
    from collections.abc import Sequence

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the standard asks for 24 to 64 random bytes


def new_secret() -> str:
    """A new signing secret, ``whsec_`` and the base64 of 32 random bytes: the form the
    standard's libraries accept as given."""
    return SECRET_PREFIX + base64.b64encode(token_bytes(SECRET_BYTES)).decode("ascii")


def signature(secrets: Sequence[str], webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header: ``v1,<base64 HMAC-SHA256 of id.timestamp.body>``
    for each secret, space-separated, in the order given (the current secret first;
    after a rotation the previous one signs beside it, so receivers still holding it
    keep verifying).

    Args:
        secrets: the signing secrets (``whsec_...``), at least one.
        webhook_id: the ``webhook-id`` header, the same on every attempt.
        timestamp: the ``webhook-timestamp`` header, seconds since the epoch.
        body: the exact bytes sent, UTF-8 JSON (the standard signs text).

    Raises:
        ValueError: no secret, or a body that is not UTF-8.
    """
    if not secrets:
        raise ValueError("a webhook signature needs at least one secret")
    text = body.decode("utf-8")
    at = datetime.fromtimestamp(timestamp, tz=UTC)
    return " ".join(Webhook(secret).sign(webhook_id, at, text) for secret in secrets)
