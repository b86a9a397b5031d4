"""A worker started while its database is away waits for it instead of exiting."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.timeout(60)


@contextlib.contextmanager
def _worker(env: dict[str, str], *, output: int) -> Iterator[subprocess.Popen[str]]:
    """``ferryman worker`` with its log lines on a pipe (stdout with stderr when
    ``output`` is STDOUT, else stderr alone); killed and closed after the block."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferryman.cli.main", "worker"],
        env=env,
        stdout=subprocess.PIPE if output == subprocess.STDOUT else subprocess.DEVNULL,
        stderr=output,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nobody listens once the socket is closed


def test_a_worker_whose_database_refuses_connections_keeps_retrying() -> None:
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{_closed_port()}/ferryman",
    }
    with _worker(env, output=subprocess.PIPE) as proc:
        assert proc.stderr is not None
        deadline = time.monotonic() + 45
        lines: list[str] = []
        while time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "retrying in" in line:
                break
        said = "".join(lines)
        assert "the database is not available yet" in said, said
        assert "Traceback" not in said, said
        assert proc.poll() is None, "the worker exited instead of waiting"


def test_a_worker_on_a_missing_sqlite_file_waits_for_it_and_makes_none(tmp_path) -> None:
    path = tmp_path / "mistyped.db"
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": f"sqlite:///{path}",
        "FERRYMAN_RESULTS_URL": f"file://{tmp_path / 'results'}",
    }
    with _worker(env, output=subprocess.STDOUT) as proc:
        stdout = proc.stdout
        assert stdout is not None
        lines: list[str] = []

        def read_until(text: str) -> None:
            # Other lines may come first (a warning about an unknown FERRYMAN_ variable).
            while not lines or text not in lines[-1]:
                line = stdout.readline()
                assert line, "".join(lines)
                lines.append(line)

        # Named, absolute, and not made: an empty new database would take no jobs.
        read_until(f"no database file at {path}")
        assert not path.exists()
        # The API (or `ferryman migrate`) makes it; the worker then starts on it.
        subprocess.run([sys.executable, "-m", "ferryman.cli.main", "migrate"], env=env, check=True)
        read_until("worker.started")
        assert proc.poll() is None
