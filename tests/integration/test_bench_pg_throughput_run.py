"""bench/throughput.py --database postgresql://... run as a user runs it, tiny: with
``--worker-processes`` the work is done by ``ferryman worker`` processes, its --json
output is one JSON object, and the per-phase CPU figures are there, the server's
included when the server is on this machine. No figure's size is checked: speed is the bench's business.
"""

from __future__ import annotations

import json
import os
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


def test_worker_processes_run_gives_one_json_object_with_the_cpu_figures(server: str) -> None:
    command = [sys.executable, str(BENCH / "throughput.py"), "--database", server]
    command += ["--jobs", "40", "--warmup", "10", "--raw-jobs", "20", "--pickup-jobs", "3"]
    command += ["--pickup-gap-ms", "1", "--skip-procrastinate", "--worker-processes", "1"]
    ran = subprocess.run([*command, "--json"], capture_output=True, text=True, timeout=240)
    assert ran.returncode == 0, ran.stderr[-2000:]
    out = json.loads(ran.stdout)
    assert out["settings"]["worker_processes"] == 1
    for phase in ("e2e", "drain"):
        assert len(out[f"{phase}_worker_process_cpu_ms_per_job"]) == 1
        assert out[f"{phase}_process_cpu_ms_per_job"] >= 0
    local = (urlsplit(server).hostname or "") in ("", "localhost", "127.0.0.1", "::1")
    if local:
        # 40 jobs may take less than one clock tick of the server's: only its presence.
        assert out["drain_postgres_cpu_ms_per_job"] >= 0
        assert out["e2e_postgres_cpu_ms_per_job"] >= 0
    else:
        assert out["drain_postgres_cpu_ms_per_job"] is None
