"""The doctor's rules (ARCHITECTURE.md section 7): each one passes and fails as it should."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.cli import doctor
from ferryman.config import Settings

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in list(os.environ):
        if name.startswith("FERRYMAN_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def settings(**values: Any) -> Settings:
    return Settings(**values)


def test_defaults_pass_every_rule() -> None:
    checks = doctor.check_settings(settings())
    assert len(checks) == len(doctor.RULES)
    assert all(check.ok for check in checks), checks
    assert all(check.fix == "" for check in checks)


CASES: list[tuple[Callable[[Settings], doctor.Check], dict[str, Any], dict[str, Any], str]] = [
    (
        doctor.provider_timeout_below_attempt_timeout,
        {"provider_timeout_seconds": 44, "attempt_timeout_seconds": 45},
        {"provider_timeout_seconds": 45, "attempt_timeout_seconds": 45},
        "FERRYMAN_PROVIDER_TIMEOUT_SECONDS",
    ),
    (
        doctor.attempt_timeout_within_lease,
        {"attempt_timeout_seconds": 60, "lease_seconds": 60},
        {"attempt_timeout_seconds": 61, "lease_seconds": 60},
        "FERRYMAN_LEASE_SECONDS",
    ),
    (
        doctor.heartbeat_within_third_of_lease,
        {"heartbeat_interval_seconds": 20, "lease_seconds": 60},
        {"heartbeat_interval_seconds": 21, "lease_seconds": 60},
        "FERRYMAN_HEARTBEAT_INTERVAL_SECONDS",
    ),
    (
        doctor.visibility_above_heartbeat,
        {"heartbeat_interval_seconds": 10, "visibility_timeout_seconds": 11},
        {"heartbeat_interval_seconds": 10, "visibility_timeout_seconds": 10},
        "FERRYMAN_VISIBILITY_TIMEOUT_SECONDS",
    ),
    (
        doctor.max_receives_at_least_five,
        {"max_receives": 5, "max_attempts": 1},
        {"max_receives": 4, "max_attempts": 1},
        "FERRYMAN_MAX_RECEIVES",
    ),
    (
        doctor.max_receives_above_max_attempts,
        {"max_receives": 8, "max_attempts": 7},
        {"max_receives": 7, "max_attempts": 7},
        "FERRYMAN_MAX_RECEIVES",
    ),
]


@pytest.mark.parametrize(
    ("rule", "passing", "failing", "variable"), CASES, ids=[c[0].__name__ for c in CASES]
)
def test_each_rule_passes_at_its_edge_and_fails_past_it(
    rule: Callable[[Settings], doctor.Check],
    passing: dict[str, Any],
    failing: dict[str, Any],
    variable: str,
) -> None:
    assert rule(settings(**passing)).ok
    check = rule(settings(**failing))
    assert not check.ok
    assert variable in check.fix
    assert check.value  # says what was compared


def test_the_default_heartbeat_follows_the_lease() -> None:
    # Unset, the heartbeat is min(lease, visibility) / 3, which always fits.
    check = doctor.heartbeat_within_third_of_lease(
        settings(lease_seconds=9, visibility_timeout_seconds=300)
    )
    assert check.ok
    assert check.value == "3s <= 3s"


def test_max_receives_three_fails_two_rules() -> None:
    failed = [c.rule for c in doctor.check_settings(settings(max_receives=3)) if not c.ok]
    assert failed == ["max receives >= 5", "max receives > max attempts"]


async def test_live_checks_pass_on_a_fresh_directory(tmp_path: Path) -> None:
    checks = await doctor.check_live(
        settings(
            database_url=f"sqlite:///{tmp_path}/db/ferryman.db",
            results_url=f"file://{tmp_path}/results",
        )
    )
    assert [c.rule for c in checks] == ["database reachable", "results location writable"]
    assert all(c.ok for c in checks), checks


async def test_live_checks_report_an_unwritable_results_location(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    checks = await doctor.check_live(
        settings(database_url=f"sqlite:///{tmp_path}/f.db", results_url=f"file://{blocker}/sub")
    )
    results = next(c for c in checks if c.rule == "results location writable")
    assert not results.ok
    assert "FERRYMAN_RESULTS_URL" in results.fix


async def test_live_checks_report_an_unavailable_backend() -> None:
    checks = await doctor.check_live(settings(database_url="postgresql://db/ferryman"))
    assert len(checks) == 1
    assert not checks[0].ok
    assert "not available in this version" in checks[0].fix


async def test_live_checks_report_an_unreachable_database(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    checks = await doctor.check_live(settings(database_url=f"sqlite:///{blocker}/x.db"))
    assert not checks[0].ok
    assert "FERRYMAN_DATABASE_URL" in checks[0].fix
