"""A provider's own ``timeout_seconds`` is the timeout its calls get, for every kind; a
provider without one gets FERRYMAN_PROVIDER_TIMEOUT_SECONDS.

Built the way ``ferryman serve`` builds it (Settings, wiring, a worker) against a server
on a loopback port that takes each request and never answers: the attempt's error names
the timeout that was applied. Small values keep the test quick; nothing here is timed.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import pytest

from ferryman.config import Settings
from ferryman.core.errors import FailureClass
from ferryman.core.job import JobStatus
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

OWN_TIMEOUT_SECONDS = 0.2
# What a call would get if the provider's own timeout were ignored: both small, so a
# broken build fails in seconds rather than hanging, and both below the attempt's.
GLOBAL_TIMEOUT_SECONDS = 2.0
ATTEMPT_TIMEOUT_SECONDS = 4.0


@pytest.fixture
async def silent_server() -> AsyncIterator[int]:
    """A TCP server on a loopback port that reads requests and never answers."""
    connections: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(writer)
        while await reader.read(65536):
            pass  # read until the client gives up and closes

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        for writer in connections:
            writer.close()
        with contextlib.suppress(Exception):
            await server.wait_closed()


def _settings(tmp_path, kind: str, port: int, *, own_timeout: float | None) -> Settings:
    base_url = f"http://127.0.0.1:{port}" + ("/v1" if kind == "openai" else "")
    provider: dict[str, object] = {"kind": kind, "base_url": base_url}
    if kind == "anthropic":
        provider["api_key_env"] = "SLOW_PROVIDER_KEY"
    if own_timeout is not None:
        provider["timeout_seconds"] = own_timeout
    return Settings(
        database_url="memory://",
        results_url=f"file://{tmp_path / 'results'}",
        provider_timeout_seconds=GLOBAL_TIMEOUT_SECONDS,
        attempt_timeout_seconds=ATTEMPT_TIMEOUT_SECONDS,
        providers={"slow": provider},
        models={"slow-model": {"provider": "slow", "model": "m"}},
    )


async def _first_attempt_error(settings: Settings) -> str:
    async with open_runtime(settings) as runtime:
        submitted = await runtime.intake.submit(
            tenant_id="t1",
            request=SubmitRequest("generate", {"prompt": "hello"}, model="slow-model"),
        )
        assert await runtime.new_worker().run_until_idle() == 1
        job = await runtime.store.get(submitted.job.job_id)
    assert job is not None
    assert job.status is JobStatus.RETRY_SCHEDULED
    assert job.error is not None
    assert job.error.failure_class is FailureClass.TRANSIENT
    assert job.error.code == "timeout"
    return job.error.message


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
async def test_a_providers_own_timeout_is_the_one_its_calls_get(
    silent_server, tmp_path, monkeypatch, kind, stream
):
    monkeypatch.setenv("SLOW_PROVIDER_KEY", "sk-test")
    settings = _settings(tmp_path, kind, silent_server, own_timeout=OWN_TIMEOUT_SECONDS)
    settings = settings.model_copy(
        update={
            "providers": {"slow": settings.providers["slow"].model_copy(update={"stream": stream})}
        }
    )
    message = await _first_attempt_error(settings)
    assert f"({OWN_TIMEOUT_SECONDS:g} s)" in message


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
async def test_without_its_own_timeout_a_provider_gets_the_global_one(
    silent_server, tmp_path, monkeypatch, kind
):
    monkeypatch.setenv("SLOW_PROVIDER_KEY", "sk-test")
    message = await _first_attempt_error(_settings(tmp_path, kind, silent_server, own_timeout=None))
    assert f"({GLOBAL_TIMEOUT_SECONDS:g} s)" in message


def test_one_rule_gives_every_kind_its_timeout():
    settings = Settings(
        provider_timeout_seconds=30,
        providers={
            "ollama": {"kind": "openai", "base_url": "http://x/v1", "timeout_seconds": 120},
            "claude": {"kind": "anthropic", "timeout_seconds": 5},
            "aws": {"kind": "bedrock", "timeout_seconds": 7},
            "fake": {"kind": "sim"},
        },
    )
    assert settings.provider_timeouts() == {"ollama": 120, "claude": 5, "aws": 7, "fake": 30}
    assert settings.provider_timeout_for("sim") == 30  # the built-in simulated model
