"""The SSRF guard: a URL refused by its text, by what its host resolves to (any one
refused address refuses it), and what the operator's allowed hosts change."""

from __future__ import annotations

import asyncio

import pytest
from webhook_receiver import FakeResolver

from ferryman.core.errors import WebhookUrlRefusedError
from ferryman.webhooks.urls import (
    MAX_URL_CHARS,
    AllowedHost,
    WebhookUrlGuard,
    parse_allowed_hosts,
)

PUBLIC = "93.184.216.34"


def guard(answers: dict[str, list[list[str]]] | None = None, allowed: str = "") -> WebhookUrlGuard:
    return WebhookUrlGuard(parse_allowed_hosts(allowed), resolver=FakeResolver(answers or {}))


def refused(url: str, guard_: WebhookUrlGuard | None = None) -> str:
    with pytest.raises(WebhookUrlRefusedError) as caught:
        (guard_ or guard()).check_syntax(url)
    assert caught.value.code == "webhook_url_refused"
    return caught.value.message


async def refused_at_check(url: str, guard_: WebhookUrlGuard) -> str:
    with pytest.raises(WebhookUrlRefusedError) as caught:
        await guard_.check(url)
    return caught.value.message


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://127.0.0.1/hook", "loopback"),
        ("https://[::1]/hook", "loopback"),
        ("https://[::ffff:127.0.0.1]/", "loopback"),
        ("https://[64:ff9b::7f00:1]/", "loopback"),
        ("https://[2002:7f00:1::1]/", "loopback"),
        ("https://10.1.2.3/", "private"),
        ("https://[fd00::1]/", "private"),
        ("https://169.254.1.1/", "link-local"),
        ("https://[fe80::1]/", "link-local"),
        ("https://100.64.1.1/", "CGNAT"),
        ("https://224.0.0.1/", "multicast"),
        ("https://0.0.0.0/", "unspecified"),
        ("https://[::]/", "unspecified"),
        ("https://169.254.169.254/latest/meta-data/", "cloud metadata"),
        ("https://[fd00:ec2::254]/", "cloud metadata"),
        ("https://100.100.100.200/", "cloud metadata"),
        ("https://192.0.2.1/", "documentation"),
    ],
)
def test_a_literal_address_in_a_refused_range_is_refused_by_its_text(url: str, reason: str) -> None:
    message = refused(url)
    assert f"({reason})" in message
    assert "FERRYMAN_WEBHOOK_ALLOWED_HOSTS" in message


async def test_localhost_is_refused_with_the_real_resolver() -> None:
    message = await refused_at_check("https://localhost/hook", WebhookUrlGuard())
    assert "resolves to a refused address (loopback)" in message


async def test_a_name_resolving_to_loopback_is_refused() -> None:
    g = guard({"hooks.example": [["127.0.0.1"]]})
    g.check_syntax("https://hooks.example/hook")  # the text alone is fine
    assert "(loopback)" in await refused_at_check("https://hooks.example/hook", g)


async def test_any_refused_address_refuses_the_name() -> None:
    g = guard({"mixed.example": [[PUBLIC, "10.0.0.5"]]})
    assert "(private)" in await refused_at_check("https://mixed.example/", g)


async def test_a_name_that_does_not_resolve_is_refused() -> None:
    message = await refused_at_check("https://nowhere.example/", guard())
    assert "does not resolve" in message


async def test_a_public_name_passes_and_targets_its_first_address() -> None:
    g = guard({"hooks.example": [[PUBLIC, "2606:4700::1"]]})
    await g.check("https://hooks.example/hook?tenant=7#ignored")
    target = await g.target("https://Hooks.Example:8443/hook?tenant=7#ignored")
    assert (target.scheme, target.host, target.port, target.address) == (
        "https",
        "hooks.example",
        8443,
        PUBLIC,
    )
    assert target.path == "/hook?tenant=7"
    assert target.authority == "hooks.example:8443"
    assert target.url == "https://hooks.example:8443/hook?tenant=7"


async def test_a_public_literal_address_needs_no_resolver() -> None:
    resolver = FakeResolver({})
    target = await WebhookUrlGuard(resolver=resolver).target("https://[2606:4700::1]/")
    assert target.address == "2606:4700::1"
    assert target.url == "https://[2606:4700::1]/"
    assert resolver.calls == []


async def test_idn_hosts_are_resolved_as_their_ascii_form() -> None:
    resolver = FakeResolver({"xn--bcher-kva.example": [[PUBLIC]]})
    target = await WebhookUrlGuard(resolver=resolver).target("https://Bücher.example/hook")
    assert target.host == "xn--bcher-kva.example"
    assert resolver.calls == ["xn--bcher-kva.example"]


def test_http_is_refused_unless_the_host_is_allowed() -> None:
    assert "must use https" in refused("http://hooks.example/hook")
    guard(allowed="hooks.example").check_syntax("http://hooks.example/hook")


async def test_an_allowed_host_may_use_http_and_private_addresses() -> None:
    g = guard({"hooks.internal": [["10.0.0.7"]]}, allowed="hooks.internal")
    target = await g.target("http://hooks.internal:8080/hook")
    assert (target.address, target.port) == ("10.0.0.7", 8080)
    assert "(loopback)" in refused("https://127.0.0.1/", g)  # only the allowed host


async def test_an_allowed_host_and_port_allows_that_port_only() -> None:
    g = guard({"hooks.internal": [["10.0.0.7"]]}, allowed="hooks.internal:8080")
    await g.check("http://hooks.internal:8080/hook")
    assert "must use https" in refused("http://hooks.internal:9090/hook", g)
    assert "(private)" in await refused_at_check("https://hooks.internal/hook", g)


async def test_an_allowed_literal_address() -> None:
    g = guard(allowed="127.0.0.1:8080,[::1]")
    await g.check("http://127.0.0.1:8080/")
    await g.check("http://[::1]:9999/")
    assert "(loopback)" in refused("https://127.0.0.1:8081/", g)


async def test_an_allowed_host_still_never_reaches_cloud_metadata() -> None:
    g = guard({"hooks.internal": [["169.254.169.254"]]}, allowed="hooks.internal,169.254.169.254")
    assert "(cloud metadata)" in await refused_at_check("http://hooks.internal/", g)
    assert "(cloud metadata)" in refused("http://169.254.169.254/", g)


@pytest.mark.parametrize(
    "url",
    [
        "https://user:secret@hooks.example/",
        "https://user@hooks.example/",
        "https://:secret@hooks.example/",
        "https://hooks.example@127.0.0.1/",
    ],
)
def test_credentials_are_refused(url: str) -> None:
    assert "credentials" in refused(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example:0/",
        "https://hooks.example:65536/",
        "https://hooks.example:99999999/",
        "https://hooks.example:http/",
        "https://hooks.example:+443/",
        "https://hooks.example:-1/",
        "https://hooks.example:/",
        "https://[2606:4700::1]x/",
    ],
)
def test_bad_ports_are_refused(url: str) -> None:
    assert "port" in refused(url)


def test_at_most_2048_characters() -> None:
    base = "https://hooks.example/"
    guard().check_syntax(base + "a" * (MAX_URL_CHARS - len(base)))
    assert "longer than 2,048" in refused(base + "a" * (MAX_URL_CHARS - len(base) + 1))


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example/a b",
        " https://hooks.example/",
        "https://hooks.example/\n",
        "https://hooks.\texample/",
        "https://hooks.example/\x00",
        "https://hooks.example/\u200b",
        "https://hooks.example/\u00a0",
    ],
)
def test_whitespace_and_control_characters_are_refused(url: str) -> None:
    assert "whitespace or control" in refused(url)


@pytest.mark.parametrize(
    "url",
    [
        "ftp://hooks.example/",
        "file:///etc/passwd",
        "javascript:alert(1)",
        "gopher://hooks.example/",
        "//hooks.example/",
        "hooks.example/hook",
    ],
)
def test_only_https_and_http(url: str) -> None:
    assert "https URL" in refused(url)


@pytest.mark.parametrize("url", ["https:///hook", "https://:443/", "https://?x", "https://."])
def test_a_host_is_needed(url: str) -> None:
    refused(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://2130706433/",  # 127.0.0.1 as one number
        "https://0x7f.1/",
        "https://0177.0.0.1/",
        "https://127.1/",
        "https://127.0.0.1./",
        "https://hooks.123/",
    ],
)
def test_numeric_hosts_must_be_written_as_addresses(url: str) -> None:
    refused(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://[fe80::1%25eth0]/",  # a zone
        "https://[127.0.0.1]/",
        "https://[::1/",
        "https://::1/",
        "https://hooks_.example%2f/",
        "https://-hooks.example/",
        "https://xn--a.example/",  # punycode that decodes to nothing valid
        "https://" + "a" * 64 + ".example/",
        "https://" + ".".join(["abcdefgh"] * 30) + "/",
    ],
)
def test_malformed_hosts_are_refused(url: str) -> None:
    refused(url)


def test_parse_allowed_hosts() -> None:
    allowed = parse_allowed_hosts(
        " hooks.internal, Receiver.Internal:8080 ,[::1]:9000,fd00::7,10.0.0.7:80,Bücher.example,"
    )
    assert allowed == {
        AllowedHost("hooks.internal"),
        AllowedHost("receiver.internal", 8080),
        AllowedHost("::1", 9000),
        AllowedHost("fd00::7"),
        AllowedHost("10.0.0.7", 80),
        AllowedHost("xn--bcher-kva.example"),
    }
    assert parse_allowed_hosts("") == frozenset()
    assert parse_allowed_hosts(None) == frozenset()


@pytest.mark.parametrize(
    "entry",
    [
        "http://hooks.internal",
        "hooks.internal/path",
        "user@hooks.internal",
        "hooks.internal:0",
        "hooks.internal:http",
        "hooks internal",
        "*.internal",
        "a:b:c",
        "[hooks.internal]:80",
    ],
)
def test_a_malformed_allowed_host_is_a_clear_error(entry: str) -> None:
    with pytest.raises(ValueError, match="FERRYMAN_WEBHOOK_ALLOWED_HOSTS") as caught:
        parse_allowed_hosts(f"ok.internal,{entry}")
    assert repr(entry) in str(caught.value)
    assert "host:port" in str(caught.value)


async def test_a_name_that_resolves_too_slowly_is_refused() -> None:
    never = asyncio.Event()

    async def stalled(host: str, port: int) -> list[str]:
        await never.wait()
        return [PUBLIC]

    g = WebhookUrlGuard(resolver=stalled, resolve_timeout_seconds=0.05)
    assert "did not resolve in time" in await refused_at_check("https://slow.example/", g)


async def test_a_submit_time_check_is_remembered_but_a_delivery_resolves_again() -> None:
    resolver = FakeResolver(
        {"hooks.example": [[PUBLIC], ["10.0.0.9"]], "bad.example": [["10.0.0.1"]]}
    )
    guard = WebhookUrlGuard(resolver=resolver)

    await guard.check("https://hooks.example/a")
    await guard.check("https://hooks.example/b")  # the same host: judged once
    for _ in range(2):
        with pytest.raises(WebhookUrlRefusedError, match="private"):
            await guard.check("https://bad.example/x")  # a refusal is remembered too
    assert resolver.calls == ["hooks.example", "bad.example"]
    # Delivery never trusts the remembered judgement: the name now points inside.
    with pytest.raises(WebhookUrlRefusedError, match="private"):
        await guard.target("https://hooks.example/a")
