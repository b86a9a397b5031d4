"""A ferryman server from a given source tree, for benchmarks that compare two builds.

``--tree NAME=PATH`` (repeatable) names source trees; each run starts ``ferryman api``
or ``serve`` with ``PYTHONPATH=PATH/src`` in front, so the same virtualenv runs that
tree's code (its dependencies must be the same). To compare with main in one run:

    git worktree add --detach /tmp/ferryman-main main
    .venv/bin/python bench/SCRIPT.py --tree old=/tmp/ferryman-main --tree new=.

Also: how much memory a process holds (``rss_mib``), and latency percentiles.
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

if TYPE_CHECKING:
    from collections.abc import Iterator

HERE = Path(__file__).resolve().parent.parent
STARTUP_SECONDS = 60.0


@dataclass(frozen=True)
class Served:
    url: str
    pid: int
    directory: Path
    env: dict[str, str]

    def key(self, tenant: str) -> str:
        made = subprocess.run(
            [sys.executable, "-m", "ferryman.cli.main", "keys", "create", "--tenant", tenant],
            cwd=self.directory,
            env=self.env,
            capture_output=True,
            text=True,
            check=True,
        )
        return made.stdout.strip()


def trees(given: list[str] | None) -> dict[str, Path]:
    """``NAME=PATH`` pairs (default: this checkout as ``new``)."""
    if not given:
        return {"new": HERE}
    named = {}
    for pair in given:
        name, _, path = pair.partition("=")
        if not path or not (Path(path) / "src" / "ferryman").is_dir():
            raise SystemExit(f"--tree {pair!r}: want NAME=PATH of a ferryman checkout")
        named[name] = Path(path).resolve()
    return named


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def serve(tree: Path, *, command: str = "api", **settings: Any) -> Iterator[Served]:
    """``ferryman COMMAND`` of ``tree`` on a fresh SQLite file; stopped on exit."""
    with tempfile.TemporaryDirectory(prefix="ferryman-bench-") as scratch:
        directory = Path(scratch)
        env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
        env["PYTHONPATH"] = os.pathsep.join([str(tree / "src"), env.get("PYTHONPATH", "")])
        env.update({f"FERRYMAN_{k.upper()}": str(v) for k, v in settings.items()})
        port = _free_port()
        log = (directory / "server.log").open("wb")
        process = subprocess.Popen(
            [sys.executable, "-m", "ferryman.cli.main", command, "--port", str(port)],
            cwd=directory,
            env=env,
            stdout=log,
            stderr=log,
        )
        served = Served(f"http://127.0.0.1:{port}", process.pid, directory, env)
        try:
            _wait_healthy(served, process)
            yield served
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _wait_healthy(served: Served, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            text = (served.directory / "server.log").read_text(errors="replace")
            raise RuntimeError(f"the server exited early:\n{text[-3000:]}")
        try:
            if httpx.get(f"{served.url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError("the server did not become healthy")


def rss_mib(pid: int) -> float:
    """Resident memory of process ``pid`` now, in MiB (Linux)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def percentile(values: list[float], share: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def summary_ms(seconds: list[float]) -> dict[str, float]:
    ms = [s * 1000 for s in seconds]
    return {
        "p50_ms": round(statistics.median(ms), 1) if ms else float("nan"),
        "p99_ms": round(percentile(ms, 0.99), 1),
        "max_ms": round(max(ms), 1) if ms else float("nan"),
    }
