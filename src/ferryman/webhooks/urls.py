"""The SSRF guard for ``webhook_url``: its text, the addresses its host resolves to, and
the one checked address a delivery connects to.

A URL is checked twice. At submit, ``check`` refuses it (422 ``webhook_url_refused``)
when its text is unfit or its host resolves to any refused address. At delivery,
``target`` resolves the name again, checks every answer again, and returns the address
to connect to: the sender connects to that address and no other, so a name that
answered a public address at submit and a private one later (DNS rebinding) is refused
then, before any connection is made.

The operator may allow hosts (``FERRYMAN_WEBHOOK_ALLOWED_HOSTS``: ``host`` for any port,
``host:port`` for one): those may use ``http`` and private addresses, for receivers
inside the operator's own network and for tests. Cloud metadata addresses stay refused
even then: no receiver lives there, and a mistyped or hijacked name must not reach one.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import unicodedata
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address, ip_address
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import idna

from ferryman.core.errors import WebhookUrlRefusedError
from ferryman.webhooks.addresses import CLOUD_METADATA, Address, refusal

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence
    from typing import TypeAlias

    # host, port -> the addresses the host resolves to, as text.
    Resolver: TypeAlias = Callable[[str, int], Awaitable[Sequence[str]]]

MAX_URL_CHARS = 2_048
# How long check() (at submit) trusts its judgement of a host, and how many it keeps.
CHECK_CACHE_SECONDS = 30.0
CHECK_CACHE_ENTRIES = 4_096
DEFAULT_PORTS = {"https": 443, "http": 80}
ALLOWED_HOSTS_VARIABLE = "FERRYMAN_WEBHOOK_ALLOWED_HOSTS"

# One label of a host name once IDNA has made it ASCII. The underscore is not valid in
# DNS host names, but service names inside the operator's network (docker compose) use it.
_LABEL = re.compile(r"(?!-)[a-z0-9_-]{1,63}(?<!-)")
_PORT = re.compile(r"[0-9]{1,5}")
# A last label that is a number (decimal, octal or hex) makes getaddrinfo read the whole
# host as an IPv4 address in a legacy form (2130706433, 0x7f.1, 0177.0.0.1): refused
# unless written a.b.c.d, so what is judged is what is connected to.
_NUMERIC_LABEL = re.compile(r"[0-9]+|0x[0-9a-f]*")


async def resolve_with_loop(host: str, port: int) -> list[str]:
    """The addresses ``host`` resolves to, asked of the event loop's getaddrinfo (which
    runs it on a thread: resolving never blocks the loop)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


@dataclass(frozen=True, slots=True)
class AllowedHost:
    """One entry of FERRYMAN_WEBHOOK_ALLOWED_HOSTS: a host (ASCII, lower case; an IPv6
    address without brackets), and the one port it is allowed on (None: any port)."""

    host: str
    port: int | None = None

    def allows(self, host: str, port: int) -> bool:
        return self.host == host and self.port in (None, port)


@dataclass(frozen=True, slots=True)
class Target:
    """Where one delivery goes: the URL's parts, with the host normalised (ASCII, lower
    case), and ``address``, the checked IP address to connect to."""

    scheme: str
    host: str
    port: int
    path: str  # the request target: path and query, at least "/"
    address: str

    @property
    def authority(self) -> str:
        """``host[:port]`` as the ``Host`` header carries it (no port when default)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if DEFAULT_PORTS[self.scheme] == self.port else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL to request, with the host normalised (no credentials, no fragment)."""
        return f"{self.scheme}://{self.authority}{self.path}"


@dataclass(frozen=True, slots=True)
class _Url:
    scheme: str
    host: str
    port: int
    path: str
    literal: Address | None  # the host, when it is an IP address


def parse_allowed_hosts(text: str | None) -> frozenset[AllowedHost]:
    """FERRYMAN_WEBHOOK_ALLOWED_HOSTS: comma-separated ``host`` or ``host:port`` entries
    (``[v6addr]`` or ``[v6addr]:port`` for IPv6; unicode names as their IDNA form).
    ValueError names the variable and the entry that is malformed."""
    allowed: set[AllowedHost] = set()
    for raw in (text or "").split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            allowed.add(_allowed_host(entry))
        except ValueError as exc:
            raise ValueError(
                f"{ALLOWED_HOSTS_VARIABLE}: {entry!r} is not a host or host:port ({exc}); "
                "e.g. 'hooks.internal,10.0.0.7:8080,[fd00::7]:8443'"
            ) from None
    return frozenset(allowed)


def _allowed_host(entry: str) -> AllowedHost:
    if "://" in entry or "/" in entry or "@" in entry or _has_space_or_control(entry):
        raise ValueError("write the host alone: no scheme, path or credentials")
    if entry.count(":") > 1 and not entry.startswith("["):
        entry = f"[{entry}]"  # a bare IPv6 address: no port can follow it
    host_text, port_text = _split_authority(entry)
    host, _ = _normalise_host(host_text)
    return AllowedHost(host, None if port_text is None else _port(port_text))


class WebhookUrlGuard:
    """The SSRF guard (``ports.webhooks.WebhookUrlCheck``), and the source of each
    delivery's checked address (``target``).

    Args:
        allowed_hosts: the operator's allowed hosts (``parse_allowed_hosts``).
        resolver: ``async (host, port) -> addresses``; the event loop's getaddrinfo
            unless a test injects another.
        resolve_timeout_seconds: a name that has not resolved by then is refused (a
            slow name server must not hold a submit for its own retries' length).
    """

    def __init__(
        self,
        allowed_hosts: Iterable[AllowedHost] = (),
        *,
        resolver: Resolver = resolve_with_loop,
        resolve_timeout_seconds: float = 5.0,
    ) -> None:
        self._allowed = frozenset(allowed_hosts)
        self._resolve = resolver
        self._resolve_timeout_seconds = resolve_timeout_seconds
        # (host, port) -> (until when, the refusal or None): check()'s judgements.
        self._checked: dict[tuple[str, int], tuple[float, str | None]] = {}

    def check_syntax(self, url: str) -> None:
        """Raise WebhookUrlRefusedError for a URL refused by its text alone."""
        self._parse(url)

    async def check(self, url: str) -> None:
        """Raise WebhookUrlRefusedError unless the URL's text is fit and every address
        its host resolves to may be called. What a host resolved to is judged once per
        CHECK_CACHE_SECONDS: a tenant submitting hundreds of jobs a second with one URL
        costs one lookup, not one per job. Delivery never uses it (``target`` resolves
        and judges anew), so a cached judgement can never send a request anywhere."""
        parsed = self._parse(url)
        key = (parsed.host, parsed.port)
        now = time.monotonic()
        cached = self._checked.get(key)
        if cached is not None and cached[0] > now:
            if cached[1] is not None:
                raise WebhookUrlRefusedError(cached[1])
            return
        try:
            await self.target(url)
        except WebhookUrlRefusedError as exc:
            self._remember(key, now, exc.message)
            raise
        self._remember(key, now, None)

    def _remember(self, key: tuple[str, int], now: float, refusal: str | None) -> None:
        if len(self._checked) >= CHECK_CACHE_ENTRIES:
            self._checked.pop(next(iter(self._checked)))  # the oldest judgement
        self._checked[key] = (now + CHECK_CACHE_SECONDS, refusal)

    async def target(self, url: str) -> Target:
        """Resolve the URL's host, check every address, and return where to connect:
        the first address (getaddrinfo's order of preference). WebhookUrlRefusedError
        when the text is unfit, the host does not resolve, or any address is refused."""
        parsed = self._parse(url)  # judges a literal address already
        if parsed.literal is not None:
            address = parsed.literal
        else:
            addresses = await self._addresses(parsed.host, parsed.port)
            allowed = self._allows(parsed)
            for each in addresses:
                _judge(each, allowed=allowed, resolved=True)
            address = addresses[0]
        return Target(parsed.scheme, parsed.host, parsed.port, parsed.path, str(address))

    def _allows(self, url: _Url) -> bool:
        return any(entry.allows(url.host, url.port) for entry in self._allowed)

    async def _addresses(self, host: str, port: int) -> list[Address]:
        try:
            async with asyncio.timeout(self._resolve_timeout_seconds):
                answers = await self._resolve(host, port)
        except TimeoutError:
            raise WebhookUrlRefusedError("webhook_url's host did not resolve in time") from None
        except (OSError, UnicodeError):
            raise WebhookUrlRefusedError("webhook_url's host does not resolve") from None
        addresses: list[Address] = []
        for text in answers:
            address = _literal(text)
            if address is None:  # not an address: nothing to judge, so nothing to call
                raise WebhookUrlRefusedError("webhook_url's host does not resolve")
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise WebhookUrlRefusedError("webhook_url's host does not resolve")
        return addresses

    def _parse(self, url: str) -> _Url:
        parsed = _parse_url(url)
        allowed = self._allows(parsed)
        if parsed.scheme == "http" and not allowed:
            raise _refused("webhook_url must use https")
        if parsed.literal is not None:
            _judge(parsed.literal, allowed=allowed, resolved=False)
        return parsed


def _judge(address: Address, *, allowed: bool, resolved: bool) -> None:
    if allowed:
        reason = "cloud metadata" if address in CLOUD_METADATA else None
    else:
        reason = refusal(address)
    if reason is not None:
        where = "resolves to" if resolved else "is"
        raise _refused(f"webhook_url's host {where} a refused address ({reason})")


def _refused(message: str) -> WebhookUrlRefusedError:
    """A refusal for where the URL points, with what would be delivered to."""
    return WebhookUrlRefusedError(
        f"{message}: ferryman delivers only to public https addresses, or to hosts the "
        f"operator allowed ({ALLOWED_HOSTS_VARIABLE})"
    )


def _parse_url(url: str) -> _Url:
    if len(url) > MAX_URL_CHARS:
        raise WebhookUrlRefusedError(f"webhook_url is longer than {MAX_URL_CHARS:,} characters")
    # Before urlsplit, which silently drops tabs and newlines.
    if _has_space_or_control(url):
        raise WebhookUrlRefusedError(
            "webhook_url must not contain whitespace or control characters"
        )
    try:
        parts = urlsplit(url)
    except ValueError:
        raise WebhookUrlRefusedError("webhook_url is not a URL") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise _refused("webhook_url must be an https URL")
    if "@" in parts.netloc:
        raise WebhookUrlRefusedError("webhook_url must not contain credentials (user:password@)")
    if not parts.netloc:
        raise WebhookUrlRefusedError("webhook_url has no host")
    try:
        host_text, port_text = _split_authority(parts.netloc)
        host, literal = _normalise_host(host_text)
        port = DEFAULT_PORTS[scheme] if port_text is None else _port(port_text)
    except ValueError as exc:
        raise WebhookUrlRefusedError(f"webhook_url's {exc}") from None
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return _Url(scheme, host, port, path, literal)


def _has_space_or_control(text: str) -> bool:
    return any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf") for ch in text)


def _split_authority(authority: str) -> tuple[str, str | None]:
    """``host`` and ``port`` (None when absent) of ``host[:port]`` / ``[v6][:port]``."""
    if authority.startswith("["):
        end = authority.find("]")
        host, rest = authority[1:end], authority[end + 1 :]
        if end < 0 or not isinstance(_literal(host), IPv6Address):
            raise ValueError("host is not an IPv6 address in brackets")
        if rest and not rest.startswith(":"):
            raise ValueError("port does not follow ':'")
        return host, rest[1:] if rest else None
    host, colon, port = authority.partition(":")
    if ":" in port:
        raise ValueError("host has more than one ':' (an IPv6 address goes in brackets)")
    return host, port if colon else None


def _port(text: str) -> int:
    if not _PORT.fullmatch(text) or not 0 < int(text) < 65_536:
        raise ValueError("port must be a number from 1 to 65535")
    return int(text)


def _literal(text: str) -> Address | None:
    try:
        return ip_address(text)
    except ValueError:
        return None


def _normalise_host(text: str) -> tuple[str, Address | None]:
    """The host as compared and requested (ASCII, lower case, no final dot) and, when it
    is an IP address, that address."""
    literal = _literal(text)
    if isinstance(literal, IPv6Address):
        if literal.scope_id:
            raise ValueError("host is an IPv6 address with a zone")
        return literal.compressed, literal
    if isinstance(literal, IPv4Address):
        return str(literal), literal
    host = text.lower().removesuffix(".")
    if not host:
        raise ValueError("host is empty")
    try:
        if not host.isascii():
            host = idna.encode(host, uts46=True).decode("ascii")
        elif "xn--" in host:
            idna.decode(host)  # refuse punycode that decodes to nothing valid
    except idna.IDNAError:
        raise ValueError("host is not a valid internationalised name") from None
    labels = host.split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise ValueError("host is not a valid host name")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        raise ValueError("host is numeric but not an address written a.b.c.d")
    return host, None
