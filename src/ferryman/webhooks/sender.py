"""Sending one signed notification: ``HttpWebhookSender`` (``ports.webhooks.WebhookSender``).

Each attempt resolves the URL's host through the guard, which checks every address,
and connects to the checked one: the connection is pinned to it by the network backend
under httpx (``_PinnedBackend``), which is given the address for the request at hand
and refuses to connect anywhere else. The request itself keeps the URL's host name, so
the ``Host`` header, TLS's server name and the certificate check are all for the name,
and the connection pool is keyed by the name too.

Why not put the address in the URL and the name in ``Host`` and ``sni_hostname``: the
pool is keyed by the URL's host, so two receivers behind one address (a CDN, shared
hosting) would share a pooled TLS connection, and the second would be sent over a
connection whose certificate was checked for the first.

A kept-alive connection was made to an address checked when it was opened; reusing it
after the name moved to another public address is harmless, and a name that moved to a
refused address is refused by the guard before the pool is asked for anything.
"""

from __future__ import annotations

import asyncio
import contextvars
import enum
import ssl
import time
from typing import TYPE_CHECKING, Any

import httpcore
import httpx

from ferryman import __version__
from ferryman.core.errors import WebhookUrlRefusedError
from ferryman.core.webhooks import DELIVERY_TIMEOUT_SECONDS
from ferryman.ports.webhooks import SendOutcome

if TYPE_CHECKING:
    from collections.abc import Iterable

    from ferryman.webhooks.urls import Target, WebhookUrlGuard

USER_AGENT = f"ferryman/{__version__}"


class SendError(enum.StrEnum):
    """Why an attempt got no answer (``SendOutcome.error``)."""

    TIMEOUT = "timeout"  # no answer's head within the attempt's timeout
    CONNECT = "connect"  # the connection was refused, reset or unreachable
    TLS = "tls"  # the handshake or the certificate check failed
    NETWORK = "network"  # the connection broke after it was made
    PROTOCOL = "protocol"  # the receiver did not speak HTTP/1.1 as it should
    REFUSED_URL = "refused_url"  # the guard refused the URL, or the host did not resolve


# The checked target of the request being sent in this task: the backend reads it to
# know where to connect. A context variable, since httpcore connects in the task that
# sends the request.
_TARGET: contextvars.ContextVar[Target | None] = contextvars.ContextVar(
    "ferryman_webhook_target", default=None
)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects only to the checked address of the request being sent."""

    def __init__(self) -> None:
        self._network = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = _TARGET.get()
        # Fails closed: a connection for anything but the request's own checked target.
        if target is None or (target.host, target.port) != (host, port):
            raise httpcore.ConnectError("no checked address for this host")
        return await self._network.connect_tcp(
            target.address,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,  # noqa: ASYNC109 (httpcore's interface)
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("webhooks are not sent over unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._network.sleep(seconds)


class _PinnedTransport(httpx.AsyncHTTPTransport):
    """httpx's own transport (its request mapping and error translation), over a pool
    whose connections go through ``_PinnedBackend``. httpx has no argument for the
    network backend, so the pool it made is replaced by an equal one that has it."""

    def __init__(self, *, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        super().__init__(verify=ssl_context, limits=limits, http1=True, http2=False)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            http1=True,
            http2=False,
            network_backend=_PinnedBackend(),
        )


class HttpWebhookSender:
    """Posts notifications with one shared ``httpx.AsyncClient``.

    Args:
        guard: resolves and checks each URL again at delivery (``WebhookUrlGuard``).
        timeout_seconds: bounds one attempt, from connecting to the answer's head.
        verify: True for the system's CAs, or an ``ssl.SSLContext`` (a test's own CA).
        max_connections: connections open at once, over all receivers.
        max_keepalive_connections: idle connections kept for reuse.
        keepalive_expiry_seconds: how long an idle connection is kept.
    """

    def __init__(
        self,
        guard: WebhookUrlGuard,
        *,
        timeout_seconds: float = DELIVERY_TIMEOUT_SECONDS,
        verify: ssl.SSLContext | bool = True,
        max_connections: int = 64,
        max_keepalive_connections: int = 16,
        keepalive_expiry_seconds: float = 30.0,
    ) -> None:
        self._guard = guard
        self._timeout_seconds = timeout_seconds
        context = verify if isinstance(verify, ssl.SSLContext) else httpx.create_ssl_context(verify)
        limits = httpx.Limits(
            max_connections=max_connections,
            max_keepalive_connections=max_keepalive_connections,
            keepalive_expiry=keepalive_expiry_seconds,
        )
        self._client = httpx.AsyncClient(
            transport=_PinnedTransport(ssl_context=context, limits=limits),
            timeout=timeout_seconds,
            # A redirect is a non-2xx answer, never a second request to an unchecked URL.
            follow_redirects=False,
            # No proxy or .netrc from the environment: a proxy would connect for us, to
            # whatever address it resolves, and a .netrc could send credentials.
            trust_env=False,
        )

    async def send(
        self,
        url: str,
        *,
        webhook_id: str,
        timestamp: int,
        body: bytes,
        signature: str,
    ) -> SendOutcome:
        """POST ``body`` to ``url`` (see ``ports.webhooks.WebhookSender.send``). The
        answer's status, or None and why; never raises for what the network or the
        receiver did."""
        started = time.perf_counter()
        status_code: int | None = None
        error: SendError | None = None
        try:
            # Resolving is bounded apart from the attempt (core/webhooks.py CLAIM_SECONDS
            # leaves room for both).
            async with asyncio.timeout(self._timeout_seconds):
                target = await self._guard.target(url)
            status_code = await self._post(target, webhook_id, timestamp, body, signature)
        except WebhookUrlRefusedError:
            error = SendError.REFUSED_URL
        except (TimeoutError, httpx.HTTPError, httpx.InvalidURL, OSError) as exc:
            error = _classify(exc)
        duration_ms = round((time.perf_counter() - started) * 1000)
        return SendOutcome(status_code=status_code, duration_ms=duration_ms, error=error)

    async def _post(
        self, target: Target, webhook_id: str, timestamp: int, body: bytes, signature: str
    ) -> int:
        request = self._client.build_request(
            "POST",
            target.url,
            content=body,
            headers={
                "content-type": "application/json",
                "user-agent": USER_AGENT,
                "webhook-id": webhook_id,
                "webhook-timestamp": str(timestamp),
                "webhook-signature": signature,
            },
        )
        token = _TARGET.set(target)
        try:
            # httpx's timeouts bound each step; this bounds the attempt as a whole.
            async with asyncio.timeout(self._timeout_seconds):
                response = await self._client.send(request, stream=True)
                if _bodiless(response):
                    # Nothing to read but the message's end, which makes the connection
                    # reusable: without it httpcore closes it as if a body were left.
                    await response.aread()
                # Otherwise closed unread: the body is neither kept nor waited for.
                await response.aclose()
        finally:
            _TARGET.reset(token)
        return response.status_code

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()


def _bodiless(response: httpx.Response) -> bool:
    return response.status_code in (204, 304) or response.headers.get("content-length") == "0"


def _classify(exc: BaseException) -> SendError:
    if isinstance(exc, TimeoutError | httpx.TimeoutException):
        return SendError.TIMEOUT
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return SendError.REFUSED_URL
    if _caused_by_tls(exc):
        return SendError.TLS
    if isinstance(exc, httpx.ConnectError | OSError):
        return SendError.CONNECT
    if isinstance(exc, httpx.NetworkError):
        return SendError.NETWORK
    return SendError.PROTOCOL


def _caused_by_tls(exc: BaseException) -> bool:
    """httpx wraps httpcore's error, which wraps the ssl module's."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    return any(isinstance(link, ssl.SSLError) for link in chain)
