"""Every refused range, named as the error message names it; embedded IPv4 judged as
itself; public addresses pass."""

from __future__ import annotations

from ipaddress import IPv6Address, ip_address

import pytest

from ferryman.webhooks.addresses import Refusal, embedded_ipv4, refusal

REFUSED = [
    # IPv4
    ("0.0.0.0", Refusal.UNSPECIFIED),
    ("0.1.2.3", Refusal.UNSPECIFIED),
    ("127.0.0.1", Refusal.LOOPBACK),
    ("127.255.255.254", Refusal.LOOPBACK),
    ("10.0.0.1", Refusal.PRIVATE),
    ("172.16.0.1", Refusal.PRIVATE),
    ("172.31.255.255", Refusal.PRIVATE),
    ("192.168.1.1", Refusal.PRIVATE),
    ("169.254.0.1", Refusal.LINK_LOCAL),
    ("100.64.0.1", Refusal.CGNAT),
    ("100.127.255.255", Refusal.CGNAT),
    ("224.0.0.1", Refusal.MULTICAST),
    ("239.255.255.250", Refusal.MULTICAST),
    ("192.0.2.1", Refusal.DOCUMENTATION),
    ("198.51.100.1", Refusal.DOCUMENTATION),
    ("203.0.113.1", Refusal.DOCUMENTATION),
    ("198.18.0.1", Refusal.BENCHMARKING),
    ("198.19.255.255", Refusal.BENCHMARKING),
    ("192.0.0.8", Refusal.RESERVED),
    ("192.88.99.1", Refusal.RESERVED),
    ("240.0.0.1", Refusal.RESERVED),
    ("255.255.255.255", Refusal.RESERVED),
    # cloud metadata, named before the ranges they sit in
    ("169.254.169.254", Refusal.CLOUD_METADATA),
    ("100.100.100.200", Refusal.CLOUD_METADATA),
    ("192.0.0.192", Refusal.CLOUD_METADATA),
    ("fd00:ec2::254", Refusal.CLOUD_METADATA),
    # IPv6
    ("::", Refusal.UNSPECIFIED),
    ("::1", Refusal.LOOPBACK),
    ("fe80::1", Refusal.LINK_LOCAL),
    ("fe80::1%eth0", Refusal.LINK_LOCAL),
    ("fc00::1", Refusal.PRIVATE),
    ("fd12:3456::1", Refusal.PRIVATE),
    ("fec0::1", Refusal.PRIVATE),
    ("ff02::1", Refusal.MULTICAST),
    ("ff0e::1", Refusal.MULTICAST),
    ("2001:db8::1", Refusal.DOCUMENTATION),
    ("3fff::1", Refusal.DOCUMENTATION),
    ("2001:2::1", Refusal.BENCHMARKING),
    ("::7f00:1", Refusal.RESERVED),  # IPv4-compatible (deprecated): in ::/8
    ("100::1", Refusal.RESERVED),  # discard-only
    ("64:ff9b:1::a00:1", Refusal.RESERVED),  # local-use NAT64
    # IPv4-mapped
    ("::ffff:127.0.0.1", Refusal.LOOPBACK),
    ("::ffff:10.0.0.1", Refusal.PRIVATE),
    ("::ffff:169.254.169.254", Refusal.CLOUD_METADATA),
    ("::ffff:100.64.0.1", Refusal.CGNAT),
    ("::ffff:0.0.0.0", Refusal.UNSPECIFIED),
    # NAT64 (the well-known prefix)
    ("64:ff9b::127.0.0.1", Refusal.LOOPBACK),
    ("64:ff9b::10.1.2.3", Refusal.PRIVATE),
    ("64:ff9b::a9fe:a9fe", Refusal.CLOUD_METADATA),
    # 6to4
    ("2002:7f00:1::1", Refusal.LOOPBACK),
    ("2002:c0a8:101::1", Refusal.PRIVATE),
    ("2002:a9fe:a9fe::1", Refusal.CLOUD_METADATA),
]


@pytest.mark.parametrize(("text", "reason"), REFUSED)
def test_refused_ranges_are_named(text: str, reason: Refusal) -> None:
    assert refusal(ip_address(text)) is reason


@pytest.mark.parametrize("text", ["2001::1", "2001:10::1", "2001:20::1"])
def test_what_is_not_globally_routable_is_refused(text: str) -> None:
    # Teredo, ORCHID and ORCHIDv2: special-purpose, caught by ipaddress's is_global.
    assert refusal(ip_address(text)) is not None


@pytest.mark.parametrize(
    "text",
    [
        "8.8.8.8",
        "1.1.1.1",
        "93.184.216.34",
        "100.63.255.255",  # just below CGNAT
        "100.128.0.0",  # just above
        "172.32.0.1",  # just above 172.16/12
        "2606:4700:4700::1111",
        "::ffff:8.8.8.8",
        "64:ff9b::8.8.8.8",
        "2002:808:808::1",
    ],
)
def test_public_addresses_pass(text: str) -> None:
    assert refusal(ip_address(text)) is None


def test_embedded_ipv4() -> None:
    assert str(embedded_ipv4(IPv6Address("::ffff:1.2.3.4"))) == "1.2.3.4"
    assert str(embedded_ipv4(IPv6Address("64:ff9b::102:304"))) == "1.2.3.4"
    assert str(embedded_ipv4(IPv6Address("2002:102:304::9"))) == "1.2.3.4"
    assert embedded_ipv4(IPv6Address("2606:4700::1")) is None


def test_reasons_are_short_words_for_a_message() -> None:
    assert all(len(reason) <= 25 and reason == reason.strip() for reason in Refusal)
