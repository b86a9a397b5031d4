"""One JSON-over-HTTP model API: a shared keep-alive client, its timeouts and its errors.

Both HTTP providers post a JSON body and read either one JSON answer or a stream of
server-sent events. What differs (paths, headers, bodies, how an answer is read) stays
in the provider; what is the same lives here:

- Keep-alive clients per provider, so calls reuse connections: one ``httpx.AsyncClient``
  per ``CONNECTIONS_PER_CLIENT`` connections, each call on the least busy. httpcore's
  pool looks at every one of its connections (a socket poll each) for every request,
  so one pool of 200 connections costs milliseconds of CPU per call; shards of 16 keep
  that small. Tests pass an ``httpx`` transport (an ASGI app) instead of the network.
- A non-streamed call is bounded as a whole by the timeout. A streamed call is bounded
  by the time *between* events: a long generation keeps proving progress, a stalled
  one is caught. Both are enforced here with ``asyncio.timeout`` as well as httpx's
  own timeouts, so they hold whatever the transport.
- Every failure leaves as a ProviderError (``http_errors``), with the provider's
  request id whenever the headers carried one that looks like one (``provider_token``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from ferryman.core.errors import ProviderError, ProviderTimeoutError
from ferryman.providers.http_errors import (
    MAX_ERROR_BODY_BYTES,
    ErrorBody,
    error_for_status,
    malformed,
    parse_error_body,
    provider_token,
    ratelimit_reset_seconds,
    retry_after_seconds,
    transport_errors,
)
from ferryman.providers.sse import SseEvent, sse_events

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

_DEFAULT_TIMEOUT_SECONDS = 60.0
CONNECTIONS_PER_CLIENT = 16


@dataclass(frozen=True, slots=True)
class Answer:
    """A successful exchange: the provider's request id, and the JSON body when the
    answer came in one piece (None when it was streamed into the caller's sink)."""

    request_id: str | None
    body: dict[str, Any] | None


class HttpApi:
    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        request_id_header: str,
        max_connections: int = 64,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._provider = provider
        self._request_id_header = request_id_header
        self._clients = [
            httpx.AsyncClient(
                base_url=base_url.rstrip("/") + "/",
                headers=dict(headers),
                transport=transport,
                timeout=_DEFAULT_TIMEOUT_SECONDS,
                limits=httpx.Limits(max_connections=size, max_keepalive_connections=size),
                # Redirects are not part of these APIs; following one could resend the key.
                follow_redirects=False,
            )
            for size in shard_sizes(max_connections)
        ]
        self._busy = [0] * len(self._clients)  # calls under way on each client

    async def aclose(self) -> None:
        for client in self._clients:
            await client.aclose()

    async def get(self, path: str, *, timeout_seconds: float) -> Answer:
        """GET a JSON document (the models list), the whole call bounded."""
        return await self._exchange("GET", path, None, timeout_seconds, sink=None, hook=None)

    async def post(
        self,
        path: str,
        body: dict[str, Any],
        *,
        timeout_seconds: float,
        sink: Callable[[SseEvent], None] | None = None,
        on_rejected: Callable[[int, ErrorBody, str], Exception | None] | None = None,
    ) -> Answer:
        """POST ``body``. With a ``sink``, a streamed answer's events are fed to it as
        they come and the timeout is the longest silence allowed; a server that answers
        in one piece anyway is returned as a body. Without one, the timeout bounds the
        whole call. ``on_rejected`` sees a refused request (status 4xx: its identifiers
        and its message in lower case) and may return an exception to raise instead of the
        ProviderError, so a provider can change its request and try again."""
        return await self._exchange(
            "POST", path, body, timeout_seconds, sink=sink, hook=on_rejected
        )

    async def _exchange(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None,
        timeout_seconds: float,
        *,
        sink: Callable[[SseEvent], None] | None,
        hook: Callable[[int, ErrorBody, str], Exception | None] | None,
    ) -> Answer:
        with self._least_busy() as client:
            request_id: list[str | None] = [None]
            loop = asyncio.get_running_loop()
            timeouts = httpx.Timeout(timeout_seconds)
            try:
                with transport_errors(self._provider, request_id):
                    async with asyncio.timeout(timeout_seconds) as deadline:
                        request = client.build_request(
                            method, path.lstrip("/"), json=body, timeout=timeouts
                        )
                        response = await client.send(request, stream=True)
                        try:
                            request_id[0] = provider_token(
                                response.headers.get(self._request_id_header)
                            )
                            if sink is not None:  # the headers are the stream's first progress
                                deadline.reschedule(loop.time() + timeout_seconds)
                            if response.status_code >= 300:
                                raise await self._refusal(response, request_id[0], hook)
                            if sink is not None and _is_event_stream(response):
                                async for event in sse_events(response.aiter_lines()):
                                    # Progress: the silence allowed starts again.
                                    deadline.reschedule(loop.time() + timeout_seconds)
                                    sink(event)
                                return Answer(request_id[0], None)
                            raw = await response.aread()
                        except ProviderError as exc:
                            # Raised while reading the answer: it names the provider's request.
                            if exc.provider_request_id is None:
                                exc.provider_request_id = request_id[0]
                            raise
                        finally:
                            await response.aclose()
            except TimeoutError:
                what = "between two parts of its answer" if sink else "within the timeout"
                raise ProviderTimeoutError(
                    f"{self._provider} did not answer {what} ({timeout_seconds:g} s)",
                    provider_request_id=request_id[0],
                ) from None
            return Answer(request_id[0], _json_object(raw, self._provider, request_id[0]))

    @contextlib.contextmanager
    def _least_busy(self) -> Iterator[httpx.AsyncClient]:
        shard = self._busy.index(min(self._busy))
        self._busy[shard] += 1
        try:
            yield self._clients[shard]
        finally:
            self._busy[shard] -= 1

    async def _refusal(
        self,
        response: httpx.Response,
        request_id: str | None,
        hook: Callable[[int, ErrorBody, str], Exception | None] | None,
    ) -> Exception:
        raw = await _read_bounded(response)
        body, text = parse_error_body(raw)
        if hook is not None and 400 <= response.status_code < 500:
            replacement = hook(response.status_code, body, text)
            if replacement is not None:
                return replacement
        retry_after = retry_after_seconds(response.headers)
        if retry_after is None and response.status_code == 429:
            retry_after = ratelimit_reset_seconds(response.headers)
        error: ProviderError = error_for_status(
            response.status_code,
            body,
            provider=self._provider,
            request_id=request_id or _body_request_id(raw),
            retry_after=retry_after,
        )
        return error


def shard_sizes(max_connections: int) -> list[int]:
    """How ``max_connections`` is split between clients of at most
    ``CONNECTIONS_PER_CLIENT`` each, as evenly as it goes."""
    shards = max(1, -(-max_connections // CONNECTIONS_PER_CLIENT))
    base, extra = divmod(max(1, max_connections), shards)
    return [base + 1 if i < extra else base for i in range(shards)]


def _is_event_stream(response: httpx.Response) -> bool:
    content_type: str = response.headers.get("content-type", "")
    return content_type.startswith("text/event-stream")


async def _read_bounded(response: httpx.Response) -> bytes:
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size >= MAX_ERROR_BODY_BYTES:
            break
    return b"".join(chunks)[:MAX_ERROR_BODY_BYTES]


def _body_request_id(raw: bytes) -> str | None:
    """Anthropic repeats the request id in its error bodies."""
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return provider_token(data.get("request_id")) if isinstance(data, dict) else None


def _json_object(raw: bytes, provider: str, request_id: str | None) -> dict[str, Any]:
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        raise malformed(provider, "a body that is not JSON", request_id) from None
    if not isinstance(data, dict):
        raise malformed(provider, "a JSON body that is not an object", request_id)
    return data


def json_event(event: SseEvent, provider: str, request_id: str | None) -> dict[str, Any]:
    """The JSON object an event carries; ProviderServerError when it carries none."""
    return _json_object(event.data.encode("utf-8"), provider, request_id)
