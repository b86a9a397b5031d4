"""bench/throughput.py --database postgresql://... run as a user runs it, tiny: with
``--worker-processes`` the work is done by ``ferryman worker`` processes, its --json
output is one JSON object, and the per-phase CPU figures are there, the server's
included when the server is on this machine. No figure's size is checked: speed is the bench's business.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest

if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import NoReturn

BENCH = Path(__file__).resolve().parents[2] / "bench"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


@pytest.fixture
def server(require_service: Callable[[str, str], NoReturn]) -> str:
    import psycopg

    url = os.environ.get("FERRYMAN_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    try:
        psycopg.connect(url, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        require_service("postgresql", f"{url}: {str(exc).strip()[:200]}")
    return url


def _drop_scratch_databases(server: str, pid: int) -> None:
    """What a bench killed before its own cleanup left behind (its names end in its pid)."""
    import psycopg

    with psycopg.connect(server, autocommit=True) as conn:
        names = conn.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"ferryman\\_bench\\_pg\\_%\\_{pid}",),
        ).fetchall()
        for (name,) in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_worker_processes_run_gives_one_json_object_with_the_cpu_figures(server: str) -> None:
    command = [sys.executable, str(BENCH / "throughput.py"), "--database", server]
    command += ["--jobs", "40", "--warmup", "10", "--raw-jobs", "20", "--pickup-jobs", "3"]
    command += ["--pickup-gap-ms", "1", "--skip-procrastinate", "--worker-processes", "2"]
    # Its own session: on a timeout the bench and its worker processes go together.
    bench = subprocess.Popen(
        [*command, "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = bench.communicate(timeout=100)  # under pytest's own timeout
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGKILL)
            bench.wait()
        with contextlib.suppress(Exception):  # never hide the run's own failure
            _drop_scratch_databases(server, bench.pid)
    assert bench.returncode == 0, stderr[-2000:]
    out = json.loads(stdout)
    assert out["settings"]["worker_processes"] == 2
    for phase in ("e2e", "drain"):
        assert len(out[f"{phase}_worker_process_cpu_ms_per_job"]) == 2
        assert out[f"{phase}_process_cpu_ms_per_job"] >= 0
    # One process may drain 40 jobs alone: the claims are reported, not required.
    assert sum(out["drain_claims_per_worker_process"]) == 40
    local = (urlsplit(server).hostname or "") in ("", "localhost", "127.0.0.1", "::1")
    if local and out["drain_postgres_cpu_ms_per_job"] is not None:
        # 40 jobs may take less than one clock tick of the server's: only its presence.
        # (None on this machine too when the server runs in another pid namespace.)
        assert out["drain_postgres_cpu_ms_per_job"] >= 0
        assert out["e2e_postgres_cpu_ms_per_job"] >= 0
    if not local:
        assert out["drain_postgres_cpu_ms_per_job"] is None
