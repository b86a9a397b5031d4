"""The suite's own rule: a missing service skips locally and fails under CI."""

from __future__ import annotations

import pytest

from .conftest import ENGINES


def test_a_missing_service_skips_locally(monkeypatch, require_service):
    monkeypatch.delenv("CI", raising=False)

    with pytest.raises(pytest.skip.Exception, match="postgres"):
        require_service("postgres", "no server on localhost:5432")


def test_a_missing_service_fails_under_ci(monkeypatch, require_service):
    monkeypatch.setenv("CI", "true")

    with pytest.raises(pytest.fail.Exception, match="no server"):
        require_service("postgres", "no server on localhost:5432")


def test_the_memory_sqlite_and_postgres_engines_are_registered():
    assert {"memory", "sqlite", "postgres"} <= set(ENGINES)
