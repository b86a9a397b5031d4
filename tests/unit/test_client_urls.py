"""The clients' URL cache (client/calls.py Urls) merges a path as httpx would."""

from __future__ import annotations

import httpx

from ferryman.client.calls import Urls


def test_a_path_is_merged_with_the_base_url_as_httpx_merges_it() -> None:
    with httpx.Client(base_url="http://api.example:8000/prefix/") as http:
        urls = Urls(http, size=2)
        assert str(urls("/v1/generations")) == "http://api.example:8000/prefix/v1/generations"
        assert urls("/v1/generations") is urls("/v1/generations")
        escaped = "/v1/generations/a%2Fb%2E"
        assert urls(escaped) == http.build_request("GET", escaped).url
        urls("/v1/tasks")  # past the size: the cache starts again
        assert str(urls("/v1/generations")).endswith("/prefix/v1/generations")
