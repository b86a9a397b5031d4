"""Provider kinds: what each ``kind`` of a ``[providers.NAME]`` table builds, in one place.

A new kind of provider is a module in ``ferryman/providers`` (which imports only core
and ports) and one entry in ``PROVIDER_KINDS`` here (with its name added to
``config.ProviderKind``, which the configuration checks tables against; a test holds
the two equal). This module is wiring's: it reads Settings, which providers never do.
Wiring builds every configured provider through ``build_provider``; nothing else
names a kind.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING

from ferryman.config import SIM, ConfigurationError
from ferryman.providers.anthropic import DEFAULT_ANTHROPIC_BASE_URL, AnthropicProvider
from ferryman.providers.bedrock import BedrockProvider, BedrockUnavailableError
from ferryman.providers.openai import DEFAULT_OPENAI_BASE_URL, OpenAIProvider
from ferryman.providers.simulated import SimulatedProvider

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from ferryman.config import ProviderSettings, Settings
    from ferryman.ports.provider import ModelProvider


@dataclass(frozen=True)
class ProviderFactory:
    """How to build one kind of provider from its table."""

    build: Callable[[str, ProviderSettings, Settings], ModelProvider]
    # A real API has limits to find: a fresh worker's window opens small and grows
    # (slow start). A test double has none, so it opens at its whole concurrency.
    has_limits_to_find: bool = True


def _simulated(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    return SimulatedProvider(name=name, scripts=settings.sim.scripts)


def _openai(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    # OpenAI itself needs a key (OPENAI_API_KEY unless named); a server at another
    # base_url (Ollama, vLLM, ...) may need none.
    default_env = None if provider.base_url else "OPENAI_API_KEY"
    return OpenAIProvider(
        name=name,
        api_key=api_key(name, provider, default_env=default_env),
        base_url=provider.base_url or DEFAULT_OPENAI_BASE_URL,
        structured_output=provider.structured_output,
        stream=provider.stream,
        max_connections=provider.max_concurrency,
    )


def _anthropic(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    key = api_key(name, provider, default_env="ANTHROPIC_API_KEY")
    assert key is not None  # a default variable is named, so a key was found
    return AnthropicProvider(
        name=name,
        api_key=key,
        base_url=provider.base_url or DEFAULT_ANTHROPIC_BASE_URL,
        stream=provider.stream,
        max_connections=provider.max_concurrency,
    )


def _bedrock(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    try:
        return BedrockProvider(
            name=name,
            region=provider.region,
            timeout_seconds=settings.provider_timeout_for(name),
            max_connections=provider.max_concurrency,
        )
    except BedrockUnavailableError as exc:
        raise ConfigurationError(f"providers.{name}: {exc.message}") from None


PROVIDER_KINDS: Mapping[str, ProviderFactory] = MappingProxyType(
    {
        "openai": ProviderFactory(_openai),
        "anthropic": ProviderFactory(_anthropic),
        "bedrock": ProviderFactory(_bedrock),
        SIM: ProviderFactory(_simulated, has_limits_to_find=False),
    }
)


def factory_for(name: str, provider: ProviderSettings) -> ProviderFactory:
    """The entry for the table's kind; an unknown kind is a configuration error that
    names the known ones."""
    try:
        return PROVIDER_KINDS[provider.kind]
    except KeyError:
        raise ConfigurationError(
            f"providers.{name}.kind: {provider.kind!r} is not a kind of provider "
            f"(known: {', '.join(sorted(PROVIDER_KINDS))})"
        ) from None


def build_provider(name: str, provider: ProviderSettings, settings: Settings) -> ModelProvider:
    """One provider adapter from its ``[providers.NAME]`` table. A key is read from the
    variable named by ``api_key_env`` now, so a missing one stops the process at start."""
    return factory_for(name, provider).build(name, provider, settings)


def api_key(name: str, provider: ProviderSettings, *, default_env: str | None) -> str | None:
    """The key from the variable ``api_key_env`` names (else ``default_env``); None when
    neither names one. The key itself is never in a file, a message or a log."""
    variable = provider.api_key_env or default_env
    if variable is None:
        return None
    key = os.environ.get(variable, "").strip()
    if not key:
        raise ConfigurationError(
            f"providers.{name}: the API key is read from the environment variable "
            f"{variable}, which is not set (set it, or name another with api_key_env)"
        )
    return key
