"""Keys never reach an error message: a key where a variable's name belongs, a key written
inline, a secret-like setting of the wrong type, a rule across settings."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from pydantic import ValidationError

from ferryman.config import (
    ConfigurationError,
    ProviderSettings,
    Settings,
    load_settings,
    may_be_secret,
)
from ferryman.engines import InvalidUrlError
from ferryman.wiring import results_directory

if TYPE_CHECKING:
    from pathlib import Path

OPENAI_LIKE = "sk-proj-4fQ9xT2mZ8LkW1vB7nR3cY6hJ0aD5eG"
AWS_ACCESS_KEY_LIKE = "AKIAIOSFODNN7EXAMPLE"
HEX_TOKEN = "9f86d081884c7d659a2feaa0c55ad015"


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FERRYMAN_* variable and no ./ferryman.toml from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _refused(tmp_path: Path, toml: str) -> str:
    (tmp_path / "ferryman.toml").write_text(toml)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    return caught.value.message


@pytest.mark.parametrize("key", [OPENAI_LIKE, AWS_ACCESS_KEY_LIKE, HEX_TOKEN])
def test_a_key_where_the_variable_name_belongs_is_refused_unshown(tmp_path: Path, key: str) -> None:
    message = _refused(tmp_path, f'[providers.openai]\nkind = "openai"\napi_key_env = "{key}"\n')

    assert "providers.openai.api_key_env" in message
    assert "name of the environment variable" in message
    assert key not in message


@pytest.mark.parametrize("name", ["OPENAI_API_KEY", "MY_VLLM_TOKEN_2", "anthropic_key"])
def test_a_variable_name_is_taken(tmp_path: Path, name: str) -> None:
    (tmp_path / "ferryman.toml").write_text(
        f'[providers.p]\nkind = "openai"\napi_key_env = "{name}"\n'
    )

    assert load_settings().providers["p"].api_key_env == name


def test_an_inline_key_is_refused_naming_api_key_env(tmp_path: Path) -> None:
    message = _refused(
        tmp_path, f'[providers.openai]\nkind = "openai"\napi_key = "{OPENAI_LIKE}"\n'
    )

    assert "providers.openai" in message
    assert "api_key_env" in message
    assert OPENAI_LIKE not in message


def test_an_inline_key_from_the_environment_is_refused_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FERRYMAN_PROVIDERS__OPENAI__KIND", "openai")
    monkeypatch.setenv("FERRYMAN_PROVIDERS__OPENAI__API_KEY", OPENAI_LIKE)

    with pytest.raises(ConfigurationError) as caught:
        load_settings()

    assert "api_key_env" in caught.value.message
    assert OPENAI_LIKE not in caught.value.message


@pytest.mark.parametrize(
    ("line", "place"),
    [
        (f'api_key_env = ["{OPENAI_LIKE}"]', "providers.openai.api_key_env"),
        (f'base_url = ["https://me:{OPENAI_LIKE}@llm.example"]', "providers.openai.base_url"),
        (f"region = {{ secret = '{OPENAI_LIKE}' }}", "providers.openai.region"),
    ],
)
def test_a_secret_like_field_of_the_wrong_type_is_named_not_shown(
    tmp_path: Path, line: str, place: str
) -> None:
    message = _refused(tmp_path, f'[providers.openai]\nkind = "openai"\n{line}\n')

    assert place in message
    assert "valid string" in message
    assert OPENAI_LIKE not in message


def test_a_top_level_secret_of_the_wrong_type_is_not_shown(tmp_path: Path) -> None:
    message = _refused(tmp_path, f'database_url = ["postgresql://me:{OPENAI_LIKE}@db/x"]\n')

    assert "FERRYMAN_DATABASE_URL" in message
    assert OPENAI_LIKE not in message


def test_a_rule_across_settings_names_them_without_showing_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FERRYMAN_API_KEY", f"fm_{HEX_TOKEN}")
    monkeypatch.setenv("FERRYMAN_POSTGRES_POOL_MIN_SIZE", "5")
    monkeypatch.setenv("FERRYMAN_POSTGRES_POOL_MAX_SIZE", "2")

    with pytest.raises(ConfigurationError) as caught:
        load_settings()

    assert "postgres_pool_min_size (5) is above postgres_pool_max_size (2)" in caught.value.message
    assert HEX_TOKEN not in caught.value.message


def test_a_wrong_value_that_is_safe_to_show_is_still_shown(tmp_path: Path) -> None:
    message = _refused(tmp_path, '[providers.openai]\nkind = "openaii"\nmax_concurrency = 0\n')

    assert "providers.openai.kind" in message and "got 'openaii'" in message
    assert "providers.openai.max_concurrency" in message and "got 0" in message


def test_a_validation_error_printed_as_it_is_shows_no_value() -> None:
    # Code that builds the models itself (not through load_settings) gets pydantic's own
    # message, which would show the input unless told not to.
    with pytest.raises(ValidationError) as provider:
        ProviderSettings.model_validate({"kind": "openai", "api_key_env": OPENAI_LIKE})
    with pytest.raises(ValidationError) as settings:
        Settings(database_url=[OPENAI_LIKE])  # type: ignore[arg-type]

    assert OPENAI_LIKE not in str(provider.value)
    assert OPENAI_LIKE not in str(settings.value)


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        (OPENAI_LIKE, True),
        (AWS_ACCESS_KEY_LIKE, True),
        (HEX_TOKEN, True),
        ("https://user@host/x", True),
        ("OPENAI_API_KEY", False),
        ("file:///var/lib/ferryman/results", False),
        ("sqlite:///./ferryman.db", False),
        ("abcdefghijklmnopqrstuvwxyz", False),  # letters only: a word, not a key
    ],
)
def test_what_may_be_a_secret(text: str, secret: bool) -> None:
    assert may_be_secret(text) is secret


def test_a_results_url_is_shown_only_when_it_cannot_hold_a_credential() -> None:
    with pytest.raises(InvalidUrlError) as plain:
        results_directory("/var/lib/results")
    with pytest.raises(InvalidUrlError) as with_user:
        results_directory(f"https://me:{OPENAI_LIKE}@store.example/results")

    assert "'/var/lib/results'" in plain.value.message
    assert "FERRYMAN_RESULTS_URL" in with_user.value.message
    assert OPENAI_LIKE not in with_user.value.message
