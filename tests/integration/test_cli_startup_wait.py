"""A worker started while its database is away waits for it instead of exiting."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.timeout(60)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])  # nobody listens once the socket is closed


def test_a_worker_whose_database_refuses_connections_keeps_retrying() -> None:
    env = {
        **os.environ,
        "FERRYMAN_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{_closed_port()}/ferryman",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "ferryman.cli.main", "worker"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
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
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stderr is not None:
            proc.stderr.close()
