""".ci/services outside CI: it installs nothing and starts nothing, whatever is missing;
it says what is missing and how to get it, and lets the run go on (the suites that
need it skip with their reason).

Run with every program that could install a package or control a server replaced by
a stub that only records that it was called, and a PostgreSQL URL where nothing
listens. Under CI=true the script may install and start (on a machine CI owns); that
path is not run here, since on a developer's machine it would do exactly that.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ROOT / ".ci" / "services"
STUBBED = (
    "apt-get",
    "apt",
    "dpkg",
    "dnf",
    "yum",
    "brew",
    "sudo",
    "service",
    "systemctl",
    "invoke-rc.d",
    "pg_ctlcluster",
    "pg_ctl",
    "pg_createcluster",
    "initdb",
    "postgres",
    "docker",
)


def _closed_port() -> int:
    """A port of 127.0.0.1 where nothing listens (bound, then released, by us)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def stubs(tmp_path: Path) -> tuple[Path, Path]:
    """A directory of recording stubs (first on PATH) and the file they record into."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    for name in STUBBED:
        stub = bin_dir / name
        stub.write_text(f'#!/bin/sh\necho "{name} $*" >> "{calls}"\nexit 0\n')
        stub.chmod(0o755)
    return bin_dir, calls


def _run(bin_dir: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k != "CI"}
    base["PATH"] = f"{bin_dir}{os.pathsep}{base.get('PATH', '')}"
    base["FERRYMAN_TEST_POSTGRES_URL"] = f"postgresql://postgres@127.0.0.1:{_closed_port()}/x"
    return subprocess.run(
        ["bash", str(SERVICES), sys.executable],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("ci", [None, "false", "1", "yes"], ids=["unset", "false", "1", "yes"])
def test_outside_ci_a_missing_server_is_reported_never_installed_or_started(
    stubs: tuple[Path, Path], ci: str | None
) -> None:
    bin_dir, calls = stubs
    done = _run(bin_dir, **({} if ci is None else {"CI": ci}))
    assert done.returncode == 0, done.stderr  # the suites skip; the run goes on
    assert "not available" in done.stdout
    assert "apt-get install postgresql" in done.stdout  # how to get it
    assert "FERRYMAN_TEST_POSTGRES_URL" in done.stdout
    assert not calls.exists(), calls.read_text()
