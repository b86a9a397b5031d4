"""Which IP addresses a webhook may never reach, and why (the SSRF guard's judgement).

A tenant chooses the ``webhook_url``; ferryman makes the request from inside the
operator's network. Without this judgement a tenant could make ferryman call the cloud's
metadata service (and read its credentials), the database next door, or any service
listening on loopback. Only globally routable unicast addresses pass.

Addresses that carry an IPv4 address inside an IPv6 one (IPv4-mapped ``::ffff:a.b.c.d``,
NAT64 ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the IPv4 address they carry:
a socket, a NAT64 gateway or a 6to4 relay delivers them there.
"""

from __future__ import annotations

import enum
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network

Address = IPv4Address | IPv6Address


class Refusal(enum.StrEnum):
    """Why an address is refused: a short word for the error message."""

    CLOUD_METADATA = "cloud metadata"
    UNSPECIFIED = "unspecified"
    LOOPBACK = "loopback"
    LINK_LOCAL = "link-local"
    PRIVATE = "private"
    CGNAT = "CGNAT"
    MULTICAST = "multicast"
    DOCUMENTATION = "documentation"
    BENCHMARKING = "benchmarking"
    RESERVED = "reserved"
    NOT_GLOBAL = "not globally routable"


# Named before the ranges they sit in (link-local, private, CGNAT), so the error says
# what the address really is. AWS, GCP, Azure and OCI answer on 169.254.169.254, AWS's
# IPv6 endpoint is fd00:ec2::254, Alibaba's 100.100.100.200, OCI's also 192.0.0.192.
CLOUD_METADATA: frozenset[Address] = frozenset(
    {
        IPv4Address("169.254.169.254"),
        IPv4Address("100.100.100.200"),
        IPv4Address("192.0.0.192"),
        IPv6Address("fd00:ec2::254"),
    }
)

# The first range that holds an address names the refusal; is_global is the backstop
# for whatever special-purpose range is not listed (and for ones registered later).
_IPV4_RANGES: tuple[tuple[IPv4Network, Refusal], ...] = (
    (IPv4Network("0.0.0.0/8"), Refusal.UNSPECIFIED),
    (IPv4Network("127.0.0.0/8"), Refusal.LOOPBACK),
    (IPv4Network("169.254.0.0/16"), Refusal.LINK_LOCAL),
    (IPv4Network("10.0.0.0/8"), Refusal.PRIVATE),
    (IPv4Network("172.16.0.0/12"), Refusal.PRIVATE),
    (IPv4Network("192.168.0.0/16"), Refusal.PRIVATE),
    (IPv4Network("100.64.0.0/10"), Refusal.CGNAT),
    (IPv4Network("224.0.0.0/4"), Refusal.MULTICAST),
    (IPv4Network("192.0.2.0/24"), Refusal.DOCUMENTATION),
    (IPv4Network("198.51.100.0/24"), Refusal.DOCUMENTATION),
    (IPv4Network("203.0.113.0/24"), Refusal.DOCUMENTATION),
    (IPv4Network("198.18.0.0/15"), Refusal.BENCHMARKING),
    (IPv4Network("192.0.0.0/24"), Refusal.RESERVED),  # IETF protocol assignments
    (IPv4Network("192.88.99.0/24"), Refusal.RESERVED),  # the retired 6to4 relay anycast
    (IPv4Network("240.0.0.0/4"), Refusal.RESERVED),  # with 255.255.255.255, broadcast
)
_IPV6_RANGES: tuple[tuple[IPv6Network, Refusal], ...] = (
    (IPv6Network("::/128"), Refusal.UNSPECIFIED),
    (IPv6Network("::1/128"), Refusal.LOOPBACK),
    (IPv6Network("fe80::/10"), Refusal.LINK_LOCAL),
    (IPv6Network("fc00::/7"), Refusal.PRIVATE),
    # Site-local: deprecated, but still routed inside some networks; Python 3.11 calls
    # it global.
    (IPv6Network("fec0::/10"), Refusal.PRIVATE),
    (IPv6Network("ff00::/8"), Refusal.MULTICAST),
    (IPv6Network("2001:db8::/32"), Refusal.DOCUMENTATION),
    (IPv6Network("3fff::/20"), Refusal.DOCUMENTATION),
    (IPv6Network("2001:2::/48"), Refusal.BENCHMARKING),
)
_NAT64 = IPv6Network("64:ff9b::/96")


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 address delivers to: IPv4-mapped, NAT64 (the well-known
    prefix) or 6to4; None for any other address."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFF_FFFF)
    return address.sixtofour


def refusal(address: Address) -> Refusal | None:
    """Why a webhook may not be delivered to ``address``, or None when it may."""
    if isinstance(address, IPv6Address):
        # A zone (fe80::1%eth0) does not change what the address is.
        address = IPv6Address(int(address))
        carried = embedded_ipv4(address)
        if carried is not None:
            return refusal(carried)
    if address in CLOUD_METADATA:
        return Refusal.CLOUD_METADATA
    ranges = _IPV4_RANGES if isinstance(address, IPv4Address) else _IPV6_RANGES
    for network, reason in ranges:
        if address in network:
            return reason
    if address.is_reserved:
        return Refusal.RESERVED
    if not address.is_global:
        return Refusal.NOT_GLOBAL
    return None
