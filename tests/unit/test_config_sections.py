"""Settings in sections: every knob is read by its flat name from before sections (the
variable and TOML key deployments set) and by its place in a section, from the
environment, the TOML file and keywords alike; two names for one knob with two values
are an error naming both; a misspelt name gets the closest known one."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic.fields import FieldInfo

from ferryman.config import (
    FLAT_NAMES,
    SECTIONS,
    ConfigurationError,
    Settings,
    env_name,
    known_variables,
    load_settings,
    unknown_variables,
)

ROOT = Path(__file__).resolve().parents[2]
# A valid value other than the default, for knobs whose type does not say enough.
_SPECIAL = {
    ("sqlite", "synchronous"): "NORMAL",
    ("log", "level"): "DEBUG",
    ("http", "host"): "0.0.0.0",
    ("client", "url"): "http://api.example:9000",
    ("client", "api_key"): "fm_not_a_real_key",
    ("webhooks", "allowed_hosts"): "hooks.internal:8080",
    ("webhooks", "retry_schedule"): "1,2,3",
}


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FERRYMAN_* variable and no ./ferryman.toml from the machine running the tests."""
    for name in list(os.environ):
        if name.upper().startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _other_value(section: str, field: str) -> Any:
    """A valid value of the knob that is not its default (numbers stay within bounds:
    halves of positive floats, one more than an int)."""
    if (section, field) in _SPECIAL:
        return _SPECIAL[section, field]
    info: FieldInfo = SECTIONS[section].model_fields[field]
    default = info.default
    if isinstance(default, bool):
        return not default
    if isinstance(default, int):
        return default + 1
    if isinstance(default, float):
        return default / 2
    assert default is None, f"{section}.{field}: no value chosen for the test"
    return 7.0


def _as_env(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def _as_toml(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    return f'"{value}"' if isinstance(value, str) else repr(value)


KNOBS = [(flat, section, field) for flat, (section, field) in FLAT_NAMES.items()]


def _read(settings: Settings, section: str, field: str) -> Any:
    return getattr(getattr(settings, section), field)


@pytest.mark.parametrize(("flat", "section", "field"), KNOBS, ids=[k[0] for k in KNOBS])
def test_the_old_variable_lands_in_its_section(
    monkeypatch: pytest.MonkeyPatch, flat: str, section: str, field: str
) -> None:
    value = _other_value(section, field)
    monkeypatch.setenv(f"FERRYMAN_{flat.upper()}", _as_env(value))
    assert _read(load_settings(), section, field) == value


@pytest.mark.parametrize(("flat", "section", "field"), KNOBS, ids=[k[0] for k in KNOBS])
def test_the_new_variable_lands_in_its_section(
    monkeypatch: pytest.MonkeyPatch, flat: str, section: str, field: str
) -> None:
    value = _other_value(section, field)
    variable = f"FERRYMAN_{section.upper()}__{field.upper()}"
    assert env_name(f"{section}.{field}") == variable
    monkeypatch.setenv(variable, _as_env(value))
    assert _read(load_settings(), section, field) == value


@pytest.mark.parametrize(("flat", "section", "field"), KNOBS, ids=[k[0] for k in KNOBS])
def test_the_old_toml_key_lands_in_its_section(
    tmp_path: Path, flat: str, section: str, field: str
) -> None:
    value = _other_value(section, field)
    (tmp_path / "ferryman.toml").write_text(f"{flat} = {_as_toml(value)}\n")
    assert _read(load_settings(), section, field) == value


@pytest.mark.parametrize(("flat", "section", "field"), KNOBS, ids=[k[0] for k in KNOBS])
def test_the_new_toml_table_lands_in_its_section(
    tmp_path: Path, flat: str, section: str, field: str
) -> None:
    value = _other_value(section, field)
    (tmp_path / "ferryman.toml").write_text(f"[{section}]\n{field} = {_as_toml(value)}\n")
    assert _read(load_settings(), section, field) == value


@pytest.mark.parametrize(("flat", "section", "field"), KNOBS, ids=[k[0] for k in KNOBS])
def test_the_old_keyword_lands_in_its_section(flat: str, section: str, field: str) -> None:
    value = _other_value(section, field)
    assert _read(load_settings(**{flat: value}), section, field) == value
    assert _read(Settings.model_validate({flat: value}), section, field) == value


def test_every_place_in_a_section_has_its_flat_name_or_is_new() -> None:
    # The flat names are exactly the knobs of before sections: each still one place.
    places = {(s, f) for s, model in SECTIONS.items() for f in model.model_fields}
    assert set(FLAT_NAMES.values()) == places
    assert len(set(FLAT_NAMES.values())) == len(FLAT_NAMES)


def test_old_and_new_variables_with_different_values_are_an_error_naming_both(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FERRYMAN_WORKER_CONCURRENCY", "8")
    monkeypatch.setenv("FERRYMAN_WORKER__CONCURRENCY", "16")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert "FERRYMAN_WORKER_CONCURRENCY and FERRYMAN_WORKER__CONCURRENCY" in caught.value.message
    assert "set only one" in caught.value.message


def test_a_conflict_never_shows_the_values(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_API_KEY", "fm_first1234567890abcdef")
    monkeypatch.setenv("FERRYMAN_CLIENT__API_KEY", "fm_second1234567890abcdef")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert "FERRYMAN_API_KEY and FERRYMAN_CLIENT__API_KEY" in caught.value.message
    assert "1234567890" not in caught.value.message


def test_old_and_new_variables_that_agree_are_fine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_WORKER_CONCURRENCY", "8")
    monkeypatch.setenv("FERRYMAN_WORKER__CONCURRENCY", "08")  # the same number
    monkeypatch.setenv("FERRYMAN_LOG_JSON", "true")
    monkeypatch.setenv("FERRYMAN_LOG__JSON_LINES", "1")
    s = load_settings()
    assert (s.worker.concurrency, s.log.json_lines) == (8, True)


def test_old_and_new_toml_keys_with_different_values_are_an_error_naming_both(
    tmp_path: Path,
) -> None:
    (tmp_path / "ferryman.toml").write_text("max_receives = 7\n[retries]\nmax_receives = 9\n")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = caught.value.message
    assert "max_receives and [retries] max_receives (in ferryman.toml)" in message


def test_old_and_new_keywords_with_different_values_are_an_error_naming_both() -> None:
    with pytest.raises(ConfigurationError, match=r"lease_seconds and worker\.lease_seconds"):
        Settings(lease_seconds=30, worker={"lease_seconds": 40})


def test_a_variable_beats_the_file_whichever_name_each_uses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "ferryman.toml").write_text(
        "lease_seconds = 30\n[retries]\nmax_receives = 7\n[worker]\nconcurrency = 4\n"
    )
    monkeypatch.setenv("FERRYMAN_WORKER__LEASE_SECONDS", "120")  # new beats old
    monkeypatch.setenv("FERRYMAN_MAX_RECEIVES", "12")  # old beats new
    s = load_settings()
    assert (s.worker.lease_seconds, s.retries.max_receives) == (120, 12)
    assert s.worker.concurrency == 4  # the file's, where no variable says otherwise


def test_keywords_beat_variables_whichever_name_each_uses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("FERRYMAN_WORKER__CONCURRENCY", "8")
    assert load_settings(worker_concurrency=3).worker.concurrency == 3


def test_a_bad_value_names_both_variables_and_both_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_WORKER__CONCURRENCY", "0")
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    message = caught.value.message
    assert "FERRYMAN_WORKER__CONCURRENCY or FERRYMAN_WORKER_CONCURRENCY" in message
    assert "[worker] concurrency or worker_concurrency in ferryman.toml" in message
    assert "greater than or equal to 1" in message


def test_a_misspelt_new_variable_is_reported_with_the_closest_known_name() -> None:
    found = unknown_variables(
        {"FERRYMAN_WORKER__CONCURENCY": "8", "FERRYMAN_WORKER_CONCURENCY": "8"}
    )
    assert [(u.name, u.closest) for u in found] == [
        ("FERRYMAN_WORKER_CONCURENCY", "FERRYMAN_WORKER_CONCURRENCY"),
        ("FERRYMAN_WORKER__CONCURENCY", "FERRYMAN_WORKER__CONCURRENCY"),
    ]


def test_a_misspelt_new_variable_is_ignored_like_a_misspelt_old_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Read, it would stop every command; ignored, every command warns about it (above).
    monkeypatch.setenv("FERRYMAN_WORKER__CONCURENCY", "8")
    monkeypatch.setenv("FERRYMAN_WORKER__LEASE_SECONDS", "30")
    s = load_settings()
    assert (s.worker.concurrency, s.worker.lease_seconds) == (64, 30)


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ("lease_second = 30\n", "did you mean lease_seconds, now [worker] lease_seconds?"),
        ("database_ur = 'x'\n", "did you mean database_url?"),
        ("[worker]\nconcurency = 8\n", "worker.concurency (in ferryman.toml, or "),
        ("[worker]\nconcurency = 8\n", "unknown field (did you mean worker.concurrency?)"),
        ("[worker]\nworker_concurrency = 8\n", "did you mean worker.concurrency?"),
        ("[providers.p]\nkind = 'sim'\nbase_ur = 'x'\n", "did you mean providers.p.base_url?"),
    ],
)
def test_a_misspelt_toml_key_is_named_with_the_closest_known_one(
    tmp_path: Path, toml: str, expected: str
) -> None:
    (tmp_path / "ferryman.toml").write_text(toml)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert expected in caught.value.message


def test_every_old_and_new_name_is_a_known_variable() -> None:
    known = known_variables()
    for flat, (section, field) in FLAT_NAMES.items():
        assert f"FERRYMAN_{flat.upper()}" in known
        assert f"FERRYMAN_{section.upper()}__{field.upper()}" in known


def test_the_reference_documents_every_old_and_new_name() -> None:
    reference = (ROOT / "docs" / "reference.md").read_text()
    for flat, (section, field) in FLAT_NAMES.items():
        assert f"FERRYMAN_{flat.upper()}`" in reference, flat
        assert f"FERRYMAN_{section.upper()}__{field.upper()}`" in reference, f"{section}.{field}"
        assert f"[{section}]" in reference, section
