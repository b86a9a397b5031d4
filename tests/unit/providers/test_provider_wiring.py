"""wiring builds each provider from its [providers.NAME] table, keys read at start."""

from __future__ import annotations

import sys

import pytest

from ferryman.config import ConfigurationError, Settings
from ferryman.providers.anthropic import AnthropicProvider
from ferryman.providers.bedrock import BedrockProvider
from ferryman.providers.openai import OpenAIProvider, OutputMode
from ferryman.wiring import build_catalog


def _settings(**provider) -> Settings:
    return Settings(
        providers={"p": provider}, models={"m": {"provider": "p", "model": "some-model"}}
    )


@pytest.fixture
async def built():
    made = []

    def build(settings: Settings):
        catalog = build_catalog(settings)
        made.append(catalog)
        return catalog.route("m").provider

    yield build
    for catalog in made:
        for provider in catalog.providers():
            close = getattr(provider, "aclose", None)
            if close is not None:
                await close()


async def test_openai_reads_its_key_from_the_named_variable(built, monkeypatch):
    monkeypatch.setenv("MY_OPENAI_KEY", "sk-from-env")
    provider = built(_settings(kind="openai", api_key_env="MY_OPENAI_KEY"))
    assert isinstance(provider, OpenAIProvider)
    assert provider.name == "p"


def test_openai_itself_needs_openai_api_key(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY") as raised:
        build_catalog(_settings(kind="openai"))
    assert "providers.p" in raised.value.message


def test_a_named_variable_that_is_unset_is_named(monkeypatch):
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="VLLM_API_KEY"):
        build_catalog(
            _settings(
                kind="openai", base_url="http://127.0.0.1:8001/v1", api_key_env="VLLM_API_KEY"
            )
        )


async def test_a_local_server_needs_no_key(built):
    provider = built(
        _settings(
            kind="openai",
            base_url="http://127.0.0.1:11434/v1",
            structured_output="json_object",
            stream=False,
        )
    )
    assert isinstance(provider, OpenAIProvider)
    assert provider.output_mode is OutputMode.JSON_OBJECT


async def test_anthropic_needs_its_key(built, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(ConfigurationError, match="ANTHROPIC_API_KEY"):
        build_catalog(_settings(kind="anthropic"))
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant")
    assert isinstance(built(_settings(kind="anthropic")), AnthropicProvider)


async def test_bedrock_with_a_region(built):
    provider = built(_settings(kind="bedrock", region="eu-west-1"))
    assert isinstance(provider, BedrockProvider)


def test_bedrock_without_any_region_says_where_to_set_one(monkeypatch, tmp_path):
    for variable in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    with pytest.raises(ConfigurationError, match="region"):
        build_catalog(_settings(kind="bedrock"))


def test_bedrock_without_boto3_says_which_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "boto3", None)  # import boto3 now fails
    with pytest.raises(ConfigurationError, match=r"ferryman\[aws\]"):
        build_catalog(_settings(kind="bedrock", region="eu-west-1"))
