"""The restart test's own server (throwaway_postgres.py): made on a free port of 127.0.0.1,
restarted for real, and gone afterwards, even when the test fails. It never is the
machine's server. About two seconds."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import psycopg
import pytest
import throwaway_postgres as cluster


@pytest.fixture
def binaries(require_service: Callable[[str, str], NoReturn]) -> None:
    try:
        cluster.find_bindir()
    except cluster.ServerUnavailableError as exc:
        require_service("PostgreSQL server binaries", str(exc))


def _ends(pid: int, seconds: float = 30) -> bool:
    """Whether the process ends (or is only a zombie left to reap) within ``seconds``:
    pg_ctl returns once the pid file is gone, a moment before the process is."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except FileNotFoundError:
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


@pytest.mark.usefixtures("binaries")
def test_a_restart_ends_every_session_keeps_the_data_and_the_server_goes_at_the_end() -> None:
    with cluster.throwaway_postgres() as server:
        assert server.url.startswith("postgresql://postgres@127.0.0.1:")
        assert server.port != 5432
        directory, first = server.directory, server.postmaster_pid()
        assert first is not None
        with psycopg.connect(server.url, autocommit=True) as session:
            session.execute("CREATE TABLE kept (v int)")
            session.execute("INSERT INTO kept VALUES (1)")

            server.restart()

            second = server.postmaster_pid()
            assert second is not None and second != first
            assert _ends(first)
            with pytest.raises(psycopg.OperationalError):
                session.execute("SELECT 1")  # ended by the fast shutdown
        with psycopg.connect(server.url) as again:
            assert again.execute("SELECT v FROM kept").fetchall() == [(1,)]
    assert not directory.exists()
    assert _ends(second)
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(server.url, connect_timeout=3)


@pytest.mark.usefixtures("binaries")
def test_the_server_is_stopped_and_removed_when_the_test_fails() -> None:
    made: list[tuple[cluster.ThrowawayPostgres, int | None]] = []

    def failing_test() -> None:
        with cluster.throwaway_postgres() as server:
            made.append((server, server.postmaster_pid()))
            raise RuntimeError("the test failed")

    with pytest.raises(RuntimeError, match="the test failed"):
        failing_test()
    [(server, pid)] = made
    assert pid is not None and _ends(pid)
    assert not server.directory.exists()


def test_without_the_binaries_the_reason_says_how_to_get_them(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no pg_config, no initdb
    monkeypatch.setattr(cluster, "DEBIAN_BINDIRS", str(tmp_path / "*" / "bin"))
    with pytest.raises(cluster.ServerUnavailableError, match="apt-get install postgresql"):
        cluster.find_bindir()
