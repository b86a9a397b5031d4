"""Cookies only when a response sets one.

httpx hands every response to the standard library's cookie jar, which wraps the
response and its request in adapter objects and a ``urllib.request.Request`` before
finding no ``Set-Cookie`` header: ~40 us a request, a third of the sync client's own
work per submit against a mock transport. The jar only ever reads ``Set-Cookie`` and
``Set-Cookie2``, so a response without either is skipped with nothing lost; one that
sets a cookie (a load balancer's sticky session) is taken exactly as before.
"""

from __future__ import annotations

import httpx


class _OnDemandCookies(httpx.Cookies):
    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


def skip_cookieless_responses(http: httpx.Client | httpx.AsyncClient) -> bool:
    """Give ``http`` the same jar behind ``_OnDemandCookies``. httpx offers no way to
    choose its Cookies class, so this replaces its private ``_cookies`` when it is
    still where httpx 0.27-0.28 keep it; otherwise nothing changes (False)."""
    jar = http.cookies
    if getattr(http, "_cookies", None) is not jar:
        return False
    http._cookies = _OnDemandCookies(jar.jar)  # the same CookieJar, not a copy
    return True
