"""Providers against local fakes of their APIs: in-process ASGI apps, no network."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from asgi_streaming import StreamingASGITransport
from fake_anthropic import FakeAnthropic
from fake_openai import FakeOpenAI

from ferryman.providers.anthropic import AnthropicProvider
from ferryman.providers.openai import OpenAIProvider

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

# The worker tests drive the services' own test world (tests/unit/services/conftest.py);
# pytest shares fixtures only down a directory tree, so that module is loaded by path.
_spec = importlib.util.spec_from_file_location(
    "ferryman_services_test_world", Path(__file__).parents[1] / "services" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_world = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = _world  # dataclasses look their module up while it loads
_spec.loader.exec_module(_world)
make_world = _world.make_world


@pytest.fixture
def openai_server() -> FakeOpenAI:
    return FakeOpenAI()


@pytest.fixture
def anthropic_server() -> FakeAnthropic:
    return FakeAnthropic()


@pytest.fixture
async def openai_provider(
    openai_server: FakeOpenAI,
) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    made: list[OpenAIProvider] = []

    def build(**options: Any) -> OpenAIProvider:
        options.setdefault("name", "openai-fake")
        options.setdefault("api_key", "sk-test-key")
        options.setdefault("base_url", "http://openai.fake/v1")
        options.setdefault("transport", StreamingASGITransport(openai_server.app()))
        provider = OpenAIProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


@pytest.fixture
async def anthropic_provider(
    anthropic_server: FakeAnthropic,
) -> AsyncIterator[Callable[..., AnthropicProvider]]:
    made: list[AnthropicProvider] = []

    def build(**options: Any) -> AnthropicProvider:
        options.setdefault("name", "anthropic-fake")
        options.setdefault("api_key", "sk-ant-test-key")
        options.setdefault("base_url", "http://anthropic.fake")
        options.setdefault("transport", StreamingASGITransport(anthropic_server.app()))
        provider = AnthropicProvider(**options)
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()
