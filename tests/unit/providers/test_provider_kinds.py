"""provider_kinds: one entry per kind of provider, the only place a kind is named."""

from __future__ import annotations

from typing import get_args

import pytest
from pydantic import ValidationError

from ferryman.config import ConfigurationError, ProviderKind, ProviderSettings, Settings
from ferryman.provider_kinds import PROVIDER_KINDS, build_provider, factory_for
from ferryman.wiring import call_budgets


def test_the_kinds_the_configuration_takes_are_the_kinds_the_registry_builds() -> None:
    assert set(get_args(ProviderKind)) == set(PROVIDER_KINDS)


def test_a_table_of_an_unknown_kind_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValidationError) as raised:
        Settings(providers={"p": {"kind": "gemini"}})
    message = str(raised.value)
    assert "providers.p.kind" in message
    assert all(repr(kind) in message for kind in PROVIDER_KINDS)


def test_an_unknown_kind_that_got_past_the_configuration_falls_through_to_nothing() -> None:
    # It used to be built as Bedrock, the if-chain's last branch.
    table = ProviderSettings.model_construct(kind="gemini")
    with pytest.raises(ConfigurationError) as raised:
        build_provider("p", table, Settings())
    assert raised.value.message == (
        "providers.p.kind: 'gemini' is not a kind of provider "
        "(known: anthropic, bedrock, openai, sim)"
    )


def test_each_kind_builds_its_own_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    settings = Settings()
    for kind in ("openai", "anthropic", "sim"):
        provider = build_provider("p", ProviderSettings(kind=kind), settings)
        assert provider.name == "p"
        assert type(provider).__module__ == f"ferryman.providers.{_module(kind)}"


def _module(kind: str) -> str:
    return {"sim": "simulated"}.get(kind, kind)


def test_a_real_apis_window_starts_small_and_the_sims_at_its_whole_concurrency() -> None:
    settings = Settings(
        providers={
            "real": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"},
            "double": {"kind": "sim"},
            "told": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1", "start_concurrency": 3},
        }
    )
    budgets = call_budgets(settings)
    assert budgets["real"].start_concurrency == 8
    assert budgets["double"].start_concurrency is None
    assert budgets["told"].start_concurrency == 3
    assert [
        k
        for k in PROVIDER_KINDS
        if not factory_for("p", ProviderSettings(kind=k)).has_limits_to_find
    ] == ["sim"]
