"""bench/sqlite_lock_wait.py: a short run prints every figure; bad flags are refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "sqlite_lock_wait.py"


def _run(*flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *flags], capture_output=True, text=True, timeout=60
    )


def test_a_short_run_reports_both_modes(tmp_path) -> None:
    done = _run("--processes", "2", "--seconds", "0.3", "--dir", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    for mode in ("sqlite", "ferryman"):
        assert figures[f"{mode}_commits_per_s"] > 0
        p50, p90, p99 = (figures[f"{mode}_wait_{q}_ms"] for q in ("p50", "p90", "p99"))
        assert 0 <= p50 <= p90 <= p99
    assert list(tmp_path.iterdir()) == []  # the databases went with their directory


def test_bad_flags_are_refused_with_a_message() -> None:
    done = _run("--processes", "0")
    assert done.returncode == 2
    assert "--processes must be at least 1" in done.stderr
