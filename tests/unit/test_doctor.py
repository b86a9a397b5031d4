"""The doctor's rules (docs/architecture.md, Timeouts that must agree): each one passes
and fails as it should."""

from __future__ import annotations

import os
import sqlite3
from typing import TYPE_CHECKING, Any

import pytest

from ferryman.adapters.sqlite.migrations import applied_version, available, latest_version
from ferryman.cli import doctor
from ferryman.config import Settings
from ferryman.core.clock import SystemClock
from ferryman.engines import open_engine

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


def snapshot(root: Path) -> dict[str, tuple[int, int, bytes]]:
    """Every file and directory under root with its mode, mtime and content."""
    seen: dict[str, tuple[int, int, bytes]] = {}
    for path in sorted(root.rglob("*")):
        info = path.stat()
        data = path.read_bytes() if path.is_file() else b""
        seen[str(path.relative_to(root))] = (info.st_mode, info.st_mtime_ns, data)
    return seen


def resolved(root: Path, *parts: str) -> str:
    return str(root.resolve().joinpath(*parts))


def at(tmp_path: Path, results: str = "results") -> Settings:
    return settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db", results_url=f"file://{tmp_path}/{results}"
    )


async def make_database(path: Path) -> None:
    async with open_engine(f"sqlite:///{path}", clock=SystemClock()):
        pass


def by_rule(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {check.rule: check for check in checks}


async def test_a_missing_database_fails_naming_its_absolute_path_and_nothing_is_created(
    tmp_path: Path,
) -> None:
    # A mistyped path, relative to the working directory (tmp_path), in a directory
    # that does not exist either.
    before = snapshot(tmp_path)
    checks = await doctor.check_live(
        settings(database_url="sqlite:///./typo/ferryman.db", results_url="file://./typo/results")
    )
    assert snapshot(tmp_path) == before
    found = by_rule(checks)
    database = found["database reachable"]
    assert not database.ok
    assert database.value == resolved(tmp_path, "typo", "ferryman.db")
    assert database.value in database.fix
    assert "FERRYMAN_DATABASE_URL" in database.fix
    results = found["results location writable"]
    assert not results.ok
    assert resolved(tmp_path, "typo", "results") in results.fix


async def test_a_ready_setup_passes_and_is_left_exactly_as_it_was(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    (tmp_path / "results").mkdir()
    before = snapshot(tmp_path)
    checks = await doctor.check_live(at(tmp_path))
    assert snapshot(tmp_path) == before  # no -wal, -shm or probe result left behind
    assert [c.rule for c in checks] == [
        "database reachable",
        "database schema current",
        "database writable",
        "results location writable",
        "results free space >= floor",
    ]
    assert all(c.ok for c in checks), checks


async def test_a_database_in_use_is_read_through_its_wal(tmp_path: Path) -> None:
    async with open_engine(f"sqlite:///{tmp_path / 'ferryman.db'}", clock=SystemClock()):
        (tmp_path / "results").mkdir()
        before = snapshot(tmp_path)
        checks = by_rule(await doctor.check_live(at(tmp_path)))
        assert snapshot(tmp_path).keys() == before.keys()  # no file made (the WAL may move)
    assert checks["database schema current"].ok, checks


async def test_pending_migrations_fail_and_are_not_applied(tmp_path: Path) -> None:
    # A file from ferryman 0.1: the first schema only.
    conn = sqlite3.connect(tmp_path / "ferryman.db")
    conn.executescript(available()[0].sql)
    conn.close()
    (tmp_path / "results").mkdir()

    schema = by_rule(await doctor.check_live(at(tmp_path)))["database schema current"]

    assert not schema.ok
    assert schema.value == f"version 1 of {latest_version()}"
    assert f"{latest_version() - 1} migration(s) pending" in schema.fix
    assert "ferryman migrate" in schema.fix
    conn = sqlite3.connect(tmp_path / "ferryman.db")
    try:
        assert applied_version(conn) == 1
    finally:
        conn.close()


async def test_a_schema_newer_than_this_version_fails(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    conn = sqlite3.connect(tmp_path / "ferryman.db")
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    conn.commit()
    conn.close()

    schema = by_rule(await doctor.check_live(at(tmp_path, results="")))["database schema current"]

    assert not schema.ok
    assert "newer ferryman" in schema.fix


async def test_a_file_that_is_not_a_database_fails(tmp_path: Path) -> None:
    (tmp_path / "ferryman.db").write_bytes(b"not sqlite at all, just some bytes " * 100)
    database = by_rule(await doctor.check_live(at(tmp_path)))["database reachable"]
    assert not database.ok
    assert "cannot read it" in database.fix


async def test_results_in_the_database_need_no_directory(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    checks = await doctor.check_live(
        settings(database_url=f"sqlite:///{tmp_path}/ferryman.db", results_url="db")
    )
    assert all(c.ok for c in checks), checks


async def test_a_results_path_that_is_a_file_fails(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    (tmp_path / "results").write_text("not a directory")
    results = by_rule(await doctor.check_live(at(tmp_path)))["results location writable"]
    assert not results.ok
    assert "not a directory" in results.fix


async def test_results_below_the_free_space_floor_fail_naming_the_setting(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    (tmp_path / "results").mkdir()
    above_any_disk = 2**62

    checks = by_rule(
        await doctor.check_live(
            settings(
                database_url=f"sqlite:///{tmp_path}/ferryman.db",
                results_url=f"file://{tmp_path}/results",
                results_min_free_bytes=above_any_disk,
            )
        )
    )

    floor = checks["results free space >= floor"]
    assert not floor.ok
    assert floor.value.endswith(f">= {above_any_disk / 2**20:,.1f} MiB")
    assert "FERRYMAN_RESULTS_MIN_FREE_BYTES" in floor.fix
    assert str(tmp_path / "results") in floor.fix


def test_the_free_space_floor_is_judged_where_a_missing_directory_would_be_made(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "not" / "yet" / "results"

    assert doctor.results_free_space(missing, 0).ok
    assert not doctor.results_free_space(missing, 2**62).ok
    assert not missing.exists()


async def test_results_in_the_database_have_no_free_space_floor(tmp_path: Path) -> None:
    await make_database(tmp_path / "ferryman.db")
    checks = await doctor.check_live(
        settings(
            database_url=f"sqlite:///{tmp_path}/ferryman.db",
            results_url="db",
            results_min_free_bytes=2**62,
        )
    )
    assert "results free space >= floor" not in by_rule(checks)


async def test_live_checks_report_an_unknown_backend() -> None:
    checks = await doctor.check_live(settings(database_url="mysql://x"))
    assert len(checks) == 1
    assert not checks[0].ok
    assert "FERRYMAN_DATABASE_URL must be" in checks[0].fix


async def test_an_aws_url_goes_to_the_aws_checks_before_any_engine_opens() -> None:
    # No AWS call is made: the URL itself is refused first.
    checks = await doctor.check_live(settings(database_url="aws://"))
    assert [(c.rule, c.ok) for c in checks] == [("aws:// URL valid", False)]
    assert "a NAME is needed" in checks[0].fix


def test_unknown_ferryman_variables_fail_with_the_closest_name() -> None:
    check = doctor.check_environment(
        {"FERRYMAN_MAX_RECIEVES": "3", "FERRYMAN_LEASE_SECONDS": "30", "HOME": "/root"}
    )
    assert not check.ok
    assert check.value == "FERRYMAN_MAX_RECIEVES"
    assert "did you mean FERRYMAN_MAX_RECEIVES?" in check.fix


def test_known_ferryman_variables_pass() -> None:
    check = doctor.check_environment({"FERRYMAN_CONFIG": "x.toml", "ferryman_port": "9000"})
    assert check.ok, check


def priced(**prices: float) -> Settings:
    return settings(
        providers={"local": {"kind": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        models={
            "llama": {"provider": "local", "model": "llama3.2", **prices},
            "fake": {"provider": "sim", "model": "sim"},
        },
    )


def test_an_alias_without_prices_is_a_warning_naming_it_not_a_failure() -> None:
    check = doctor.model_prices_given(priced(input_price_per_mtok=0.1))

    assert check.ok and check.warning
    assert check.value == "llama (no output_price_per_mtok)"
    assert "[models.llama]" in check.fix
    assert "0 for a free model" in check.fix


def test_prices_given_as_zero_and_the_simulated_model_pass_without_a_warning() -> None:
    check = doctor.model_prices_given(priced(input_price_per_mtok=0, output_price_per_mtok=0))

    assert check.ok and not check.warning
    assert check.fix == ""


def test_a_price_given_in_the_environment_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FERRYMAN_MODELS__LLAMA__OUTPUT_PRICE_PER_MTOK", "0.4")

    check = doctor.model_prices_given(priced(input_price_per_mtok=0.1))

    assert not check.warning
