"""Ports of completion webhooks: checking a receiver's address, sending a signed
notification, sealing the signing secrets, and storing them (docs/getting-results.md)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class WebhookUrlCheck(Protocol):
    """Whether ferryman may call a ``webhook_url`` (the SSRF guard)."""

    def check_syntax(self, url: str) -> None:
        """Raise WebhookUrlRefusedError for a URL refused by its text alone: a scheme
        other than https (http only for an allowed host), credentials in it, no host,
        a bad port, over 2,048 characters, or a literal address in a refused range."""
        ...

    async def check(self, url: str) -> None:
        """``check_syntax``, then resolve the host (off the event loop) and raise
        WebhookUrlRefusedError if it does not resolve or any address it resolves to is
        refused (loopback, private, link-local, CGNAT, multicast, unspecified, cloud
        metadata; IPv4-mapped IPv6 judged as its IPv4), unless the operator allowed
        the host (FERRYMAN_WEBHOOK_ALLOWED_HOSTS)."""
        ...


@dataclass(frozen=True, slots=True)
class SendOutcome:
    """One delivery attempt, as ferryman keeps it: never the receiver's body."""

    status_code: int | None  # None: no answer (timeout, connection refused, refused URL)
    duration_ms: int
    error: str | None = None  # why there was no answer: timeout, connect, refused_url, ...


class WebhookSender(Protocol):
    async def send(
        self,
        url: str,
        *,
        webhook_id: str,
        timestamp: int,
        body: bytes,
        signature: str,
    ) -> SendOutcome:
        """POST ``body`` to ``url`` with the Standard Webhooks headers (``webhook-id``,
        ``webhook-timestamp``, ``webhook-signature``). The host is resolved again and
        checked as at submit, and the connection goes to the address checked; no
        redirect is followed; the attempt is bounded by its timeout; the answer's body
        is not read. Never raises for what the receiver or the network did."""
        ...

    async def aclose(self) -> None:
        """Close its connections (the dispatcher does, when it stops)."""
        ...


class SecretSealer(Protocol):
    """Seals signing secrets at rest (FERRYMAN_SECRET_KEY) and opens them to sign."""

    def seal(self, secret: str) -> str: ...

    def open(self, sealed: str) -> str:
        """The secret; WebhookSecretUnreadableError when this process cannot open it."""
        ...


@dataclass(frozen=True, slots=True)
class StoredSecret:
    """A tenant's signing secrets, sealed: the current one, and the one it replaced,
    which keeps signing beside it until ``previous_until``."""

    tenant_id: str
    current: str
    created_at: float
    previous: str | None = None
    previous_until: float | None = None


class WebhookSecretStore(Protocol):
    """Each engine keeps its tenants' signing secrets (sealed) beside their jobs."""

    async def get_secret(self, tenant_id: str) -> StoredSecret | None: ...

    async def put_secret(self, secret: StoredSecret) -> None:
        """Replace the tenant's secrets (a creation or a rotation)."""
        ...
