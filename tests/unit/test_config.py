"""Settings: defaults, environment, the TOML file, precedence and clear errors."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest

from ferryman.adapters.files.store import DEFAULT_MIN_FREE_BYTES
from ferryman.config import (
    FLAT_NAMES,
    SECTIONS,
    ConfigurationError,
    Settings,
    env_name,
    load_settings,
    unknown_variables,
)

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No FERRYMAN_* variable and no ./ferryman.toml from the machine running the tests."""
    for name in list(os.environ):
        if name.startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def test_defaults_follow_the_public_contract() -> None:
    s = load_settings()
    assert s.database_url == "sqlite:///./ferryman.db"
    assert s.results_url == "file://./ferryman-results"
    assert (s.http.host, s.http.port, s.client.url, s.client.api_key) == (
        "127.0.0.1",
        8000,
        "http://127.0.0.1:8000",
        None,
    )
    assert s.worker.concurrency == 64
    assert (s.worker.lease_seconds, s.worker.visibility_timeout_seconds) == (60, 60)
    assert (s.retries.max_attempts, s.retries.max_receives) == (5, 10)
    assert s.http.idempotency_retention_seconds == 86400
    assert s.http.max_body_bytes == 262144
    assert s.failpoints is None


def test_defaults_of_the_extra_knobs() -> None:
    s = load_settings()
    assert (s.worker.provider_timeout_seconds, s.worker.attempt_timeout_seconds) == (30, 45)
    assert s.worker.heartbeat_interval_seconds is None
    assert s.heartbeat_seconds == 20  # min(lease, visibility) / 3
    assert s.stalled_seconds == 120  # visibility + lease
    assert s.sqlite.synchronous == "FULL"
    assert (s.tenants.rate_per_second, s.tenants.burst) == (5000, 100)
    assert (s.log.level, s.log.json_lines) == ("INFO", False)
    assert (s.worker.receive_wait_seconds, s.worker.receive_linger_seconds) == (1.0, 0.005)
    # The results directory's free-space floor is the file store's own default.
    assert s.results.min_free_bytes == DEFAULT_MIN_FREE_BYTES == 16 * 1024 * 1024


def test_environment_overrides_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_LEASE_SECONDS", "90")
    monkeypatch.setenv("FERRYMAN_PORT", "9001")
    monkeypatch.setenv("FERRYMAN_SQLITE_SYNCHRONOUS", "normal")
    monkeypatch.setenv("FERRYMAN_LOG_JSON", "true")
    monkeypatch.setenv("FERRYMAN_HEARTBEAT_INTERVAL_SECONDS", "7")
    s = load_settings()
    assert s.worker.lease_seconds == 90
    assert s.http.port == 9001
    assert s.sqlite.synchronous == "NORMAL"
    assert s.log.json_lines is True
    assert s.heartbeat_seconds == 7


def test_an_empty_variable_means_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_HEARTBEAT_INTERVAL_SECONDS", "")
    assert load_settings().worker.heartbeat_interval_seconds is None


def test_toml_file_named_by_ferryman_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    config = tmp_path / "elsewhere.toml"
    config.write_text('lease_seconds = 30\nresults_url = "db"\n')
    monkeypatch.setenv("FERRYMAN_CONFIG", str(config))
    s = load_settings()
    assert s.worker.lease_seconds == 30
    assert s.results_url == "db"


def test_ferryman_toml_in_the_working_directory_is_read(tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text("max_attempts = 3\n")
    assert load_settings().retries.max_attempts == 3


def test_environment_beats_the_toml_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text("lease_seconds = 30\nmax_receives = 7\n")
    monkeypatch.setenv("FERRYMAN_LEASE_SECONDS", "120")
    s = load_settings()
    assert s.worker.lease_seconds == 120
    assert s.retries.max_receives == 7


def test_a_missing_named_config_file_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_CONFIG", "/nonexistent/ferryman.toml")
    with pytest.raises(ConfigurationError, match="FERRYMAN_CONFIG"):
        load_settings()


def test_an_unknown_toml_key_is_named(tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text("lease_second = 30\n")
    with pytest.raises(ConfigurationError, match="lease_second: unknown setting"):
        load_settings()


def test_malformed_toml_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "ferryman.toml").write_text("lease_seconds = = 3\n")
    with pytest.raises(ConfigurationError, match="configuration file"):
        load_settings()


@pytest.mark.parametrize(
    ("variable", "value", "why"),
    [
        ("FERRYMAN_LEASE_SECONDS", "-1", "greater than 0"),
        ("FERRYMAN_LEASE_SECONDS", "soon", "valid number"),
        ("FERRYMAN_PORT", "70000", "less than or equal to 65535"),
        # Milliseconds typed where seconds are read.
        ("FERRYMAN_RECEIVE_LINGER_SECONDS", "5", "less than or equal to 0.5"),
        ("FERRYMAN_RECEIVE_LINGER_SECONDS", "-0.001", "greater than or equal to 0"),
        ("FERRYMAN_MAX_ATTEMPTS", "0", "greater than or equal to 1"),
        ("FERRYMAN_RESULTS_MIN_FREE_BYTES", "-1", "greater than or equal to 0"),
        ("FERRYMAN_RESULTS_MIN_FREE_BYTES", "16MiB", "valid integer"),
        ("FERRYMAN_SQLITE_SYNCHRONOUS", "OFF", "FULL"),
        ("FERRYMAN_LOG_LEVEL", "chatty", "must be one of"),
        ("FERRYMAN_FAILPOINTS", "nowhere=crash", "unknown failpoint"),
        ("FERRYMAN_FAILPOINTS", "after_claim=crash@2", "within 0..1"),
    ],
)
def test_bad_values_name_the_variable_and_the_reason(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, why: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError) as caught:
        load_settings()
    assert variable in caught.value.message
    assert why in caught.value.message


def test_credentials_are_not_echoed_in_errors() -> None:
    with pytest.raises(ConfigurationError) as caught:
        load_settings(api_key=987654321)
    assert "FERRYMAN_API_KEY" in caught.value.message
    assert "987654321" not in caught.value.message


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(ValueError, match="frozen"):
        s.worker.lease_seconds = 1  # type: ignore[misc]


def test_policies_carry_the_settings() -> None:
    s = Settings(
        lease_seconds=40,
        visibility_timeout_seconds=50,
        heartbeat_interval_seconds=5,
        max_attempts=4,
        max_invalid_output_attempts=1,
        retry_initial_interval_seconds=0.5,
        retry_backoff_coefficient=3,
        retry_maximum_interval_seconds=60,
    )
    lease = s.lease_policy()
    assert (lease.lease_seconds, lease.visibility_timeout_seconds) == (40, 50)
    assert lease.heartbeat_seconds == 5
    retry = s.retry_policy()
    assert (retry.max_attempts, retry.max_invalid_output_attempts) == (4, 1)
    assert (retry.initial_interval_seconds, retry.backoff_coefficient) == (0.5, 3)
    assert retry.maximum_interval_seconds == 60
    assert s.failpoint_set().probabilities == {}


def test_every_setting_and_ferryman_config_are_known_variables() -> None:
    # A setting added later is known without touching any list: each top-level field
    # and section, each place in a section, and each flat name from before sections.
    places = [f"{name}.{field}" for name, model in SECTIONS.items() for field in model.model_fields]
    names = [*Settings.model_fields, *places, *FLAT_NAMES]
    environ = {env_name(name): "1" for name in names}
    environ["FERRYMAN_CONFIG"] = "ferryman.toml"
    assert unknown_variables(environ) == []


def test_a_misspelt_variable_is_reported_with_the_closest_known_name() -> None:
    found = unknown_variables(
        {"FERRYMAN_MAX_RECIEVES": "3", "FERRYMAN_NO_SUCH_THING": "1", "PATH": "/bin"}
    )
    assert [(u.name, u.closest) for u in found] == [
        ("FERRYMAN_MAX_RECIEVES", "FERRYMAN_MAX_RECEIVES"),
        ("FERRYMAN_NO_SUCH_THING", None),
    ]
    assert "did you mean FERRYMAN_MAX_RECEIVES?" in found[0].describe()


def test_variables_are_matched_without_regard_to_case_as_settings_reads_them() -> None:
    assert unknown_variables({"ferryman_lease_seconds": "3"}) == []
    assert [u.name for u in unknown_variables({"ferryman_lease_second": "3"})] == [
        "ferryman_lease_second"
    ]
