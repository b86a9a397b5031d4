"""Where results go when FERRYMAN_RESULTS_URL is not set: beside an embedded database,
but inside a database that processes on several machines share."""

from __future__ import annotations

from ferryman.config import Settings
from ferryman.wiring import results_location, results_url

PG = "postgresql://ferryman@db.internal/ferryman"


def test_on_postgresql_results_default_to_the_database(monkeypatch):
    monkeypatch.delenv("FERRYMAN_RESULTS_URL", raising=False)
    settings = Settings(database_url=PG)

    assert results_url(settings) == "db"
    assert results_location(settings) is None


def test_a_results_url_that_is_set_wins_on_postgresql_too(monkeypatch, tmp_path):
    monkeypatch.setenv("FERRYMAN_RESULTS_URL", f"file://{tmp_path}/r")

    assert results_url(Settings(database_url=PG)) == f"file://{tmp_path}/r"
    assert results_url(Settings(database_url=PG, results_url="file://x")) == "file://x"


def test_on_sqlite_results_default_to_a_directory(monkeypatch):
    monkeypatch.delenv("FERRYMAN_RESULTS_URL", raising=False)

    assert results_url(Settings(database_url="sqlite:///./f.db")) == "file://./ferryman-results"
