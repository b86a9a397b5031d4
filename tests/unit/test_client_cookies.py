"""The clients take cookies only from responses that set one (client/cookies.py)."""

from __future__ import annotations

import httpx

from ferryman.client import Client
from ferryman.client.cookies import skip_cookieless_responses


def _answer(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/sticky":
        return httpx.Response(200, headers={"Set-Cookie": "lb=node-2; Path=/"}, json={})
    return httpx.Response(200, json={"seen": request.headers.get("cookie")})


def test_the_installed_httpx_takes_the_fast_path() -> None:
    with httpx.Client() as http:
        assert skip_cookieless_responses(http)


def test_a_cookie_set_by_a_response_is_still_kept_and_sent_back() -> None:
    with httpx.Client(transport=httpx.MockTransport(_answer), base_url="http://t") as http:
        assert skip_cookieless_responses(http)
        http.get("/plain")
        assert not http.cookies
        http.get("/sticky")
        assert http.cookies["lb"] == "node-2"
        assert http.get("/plain").json() == {"seen": "lb=node-2"}


def test_the_clients_use_it() -> None:
    with Client("http://127.0.0.1:9", "k") as client:
        assert type(client._http.cookies).__name__ == "_OnDemandCookies"
