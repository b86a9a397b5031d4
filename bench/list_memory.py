"""Lists of jobs with large inputs: the server's memory, and another tenant's wait.

Starts a real ``ferryman api`` over a fresh SQLite file in a temporary directory,
submits ``--jobs`` jobs of one tenant whose inputs are about ``--input-kb`` KB each (no
worker runs, so they stay QUEUED), then sends ``--lists`` concurrent
``GET /v1/generations?limit=200`` of that tenant, each on its own connection. Meanwhile
a second tenant reads its own job (``GET /v1/generations/{id}``) again and again, one
request at a time. Reported: the API process's resident memory before, at its peak
(the kernel's high-water mark, reset just before the lists, and a 5 ms sampler) and
after; each list's time; and the other tenant's GET latency while the lists run.

``--before-src DIR`` first measures the ferryman of another source tree (e.g. ``git
archive`` of main, unpacked), then this one, with the same settings: the before/after
comparison of docs/benchmarks.md ("Lists of jobs with large inputs").

Run: ``.venv/bin/python bench/list_memory.py [--lists 100] [--jobs 200] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from harness import ferryman_command, fmt, free_port, percentile

HEAVY = "bench-heavy"
QUIET = "bench-quiet"
READY_TIMEOUT_SECONDS = 60.0
REQUEST_TIMEOUT_SECONDS = 300.0
SUBMITS_AT_ONCE = 8
SAMPLE_SECONDS = 0.005
SETTLE_SECONDS = 2.0
# The other tenant reads alone this long first: its latency when nothing else runs.
IDLE_SECONDS = 1.0


def _environment(directory: Path, src: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FERRYMAN_")}
    env.update(
        FERRYMAN_LOG_LEVEL="WARNING",
        FERRYMAN_DATABASE_URL=f"sqlite:///{directory / 'lists.db'}",
        FERRYMAN_RESULTS_URL=f"file://{directory / 'results'}",
        # The lists are the load; no rate limit refuses any of them.
        FERRYMAN_TENANT_RATE_PER_SECOND="0",
        FERRYMAN_TENANT_READ_RATE_PER_SECOND="0",
    )
    if src:
        env["PYTHONPATH"] = str(Path(src).resolve())
    return env


async def _api_key(env: dict[str, str], directory: Path, tenant: str) -> str:
    made = await asyncio.create_subprocess_exec(
        *ferryman_command("keys", "create", "--tenant", tenant),
        env=env,
        cwd=directory,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await made.communicate()
    if made.returncode != 0:
        raise RuntimeError(f"ferryman keys create failed: {err.decode().strip()}")
    return out.decode().split()[-1]


class Memory:
    """A process's resident memory, from /proc: now, its high-water mark, and the
    largest value a background sampler saw."""

    def __init__(self, pid: int) -> None:
        self._pid = pid
        self._sampled_kib = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def kib(self, field: str = "VmRSS") -> int:
        with open(f"/proc/{self._pid}/status", encoding="ascii") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        return 0

    def reset_peak(self) -> bool:
        """Start the kernel's high-water mark again from now (Linux: clear_refs 5)."""
        try:
            with open(f"/proc/{self._pid}/clear_refs", "w", encoding="ascii") as refs:
                refs.write("5")
        except OSError:
            return False
        return True

    def start_sampling(self) -> None:
        self._sampled_kib = self.kib()
        self._stop.clear()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def stop_sampling(self) -> int:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._sampled_kib

    def _sample(self) -> None:
        while not self._stop.wait(SAMPLE_SECONDS):
            with contextlib.suppress(OSError):
                self._sampled_kib = max(self._sampled_kib, self.kib())


async def _wait_ready(client: httpx.AsyncClient) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_SECONDS
    while loop.time() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if (await client.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError("ferryman api did not become ready")


async def _submit(client: httpx.AsyncClient, prompt: str) -> str:
    body = {"task": "generate", "input": {"prompt": prompt}}
    response = await client.post("/v1/generations", json=body)
    if response.status_code != 202:
        raise RuntimeError(f"POST answered {response.status_code}: {response.text[:200]}")
    job_id: str = response.json()["job_id"]
    return job_id


async def _fill(client: httpx.AsyncClient, jobs: int, input_kb: int) -> None:
    # The generate task takes a prompt of at most 100,000 characters.
    pad = "w" * min(input_kb * 1024, 99_000)
    gate = asyncio.Semaphore(SUBMITS_AT_ONCE)

    async def one(i: int) -> None:
        async with gate:
            await _submit(client, f"{i} {pad}")

    await asyncio.gather(*(one(i) for i in range(jobs)))


async def _one_list(client: httpx.AsyncClient) -> tuple[float, int, int]:
    """One list: its time in ms, bytes and items."""
    began = time.perf_counter()
    response = await client.get("/v1/generations", params={"limit": 200})
    elapsed = (time.perf_counter() - began) * 1000
    if response.status_code != 200:
        raise RuntimeError(f"list answered {response.status_code}: {response.text[:200]}")
    return elapsed, len(response.content), len(response.json()["data"])


# The other tenant, in a process of its own (so this one's work never delays its
# requests): reads its job one request at a time until a line arrives on stdin, then
# prints [[start, ms], ...] (start on the system's monotonic clock, which every
# process shares).
QUIET_READER = """
import json, select, sys, time
import httpx
url, key, job_id = sys.argv[1:4]
done = []
with httpx.Client(base_url=url, headers={"Authorization": "Bearer " + key}, timeout=300) as c:
    while not select.select([sys.stdin], [], [], 0)[0]:
        began = time.monotonic()
        c.get("/v1/generations/" + job_id).raise_for_status()
        done.append([began, (time.monotonic() - began) * 1000])
print(json.dumps(done))
"""


async def measure(args: argparse.Namespace, src: str | None, directory: Path) -> dict[str, Any]:
    env = _environment(directory, src)
    heavy_key = await _api_key(env, directory, HEAVY)
    quiet_key = await _api_key(env, directory, QUIET)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    api = await asyncio.create_subprocess_exec(
        *ferryman_command("api", "--port", str(port)),
        env=env,
        cwd=directory,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        memory = Memory(api.pid)
        async with httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": f"Bearer {heavy_key}"},
            timeout=REQUEST_TIMEOUT_SECONDS,
            limits=httpx.Limits(max_connections=args.lists, max_keepalive_connections=args.lists),
        ) as heavy:
            await _wait_ready(heavy)
            await _fill(heavy, args.jobs, args.input_kb)
            quiet_job = await _submit_as(url, quiet_key, "a small job of another tenant")
            reader = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                QUIET_READER,
                url,
                quiet_key,
                quiet_job,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
            )
            await asyncio.sleep(IDLE_SECONDS)
            before_kib = memory.kib()
            hwm_reset = memory.reset_peak()
            memory.start_sampling()
            began = time.monotonic()
            lists = await asyncio.gather(*(_one_list(heavy) for _ in range(args.lists)))
            ended = time.monotonic()
            sampled_kib = memory.stop_sampling()
            hwm_kib = memory.kib("VmHWM")
            after_kib = memory.kib()
            out, _ = await reader.communicate(b"stop\n")
            await asyncio.sleep(SETTLE_SECONDS)
            settled_kib = memory.kib()
    finally:
        api.terminate()
        await api.wait()
    reads = json.loads(out)
    idle = [ms for start, ms in reads if start < began]
    # A read that started during the lists, or was still waiting when they began.
    during = [ms for start, ms in reads if start <= ended and start + ms / 1000 >= began]
    times = [elapsed for elapsed, _, _ in lists]
    return {
        "ferryman_src": src or "this tree",
        "jobs": args.jobs,
        "input_kb": args.input_kb,
        "lists": args.lists,
        "list_items": lists[0][2],
        "list_bytes": lists[0][1],
        "rss_before_mb": before_kib / 1024,
        "rss_peak_mb": (max(hwm_kib, sampled_kib) if hwm_reset else sampled_kib) / 1024,
        "rss_after_mb": after_kib / 1024,
        "rss_settled_mb": settled_kib / 1024,
        "lists_seconds": ended - began,
        "list_p50_ms": percentile(times, 50),
        "list_max_ms": max(times),
        "other_get_idle_p50_ms": percentile(idle, 50),
        "other_gets_during": len(during),
        "other_get_p50_ms": percentile(during, 50),
        "other_get_p99_ms": percentile(during, 99),
        "other_get_max_ms": max(during),
    }


async def _submit_as(url: str, key: str, prompt: str) -> str:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60.0) as client:
        return await _submit(client, prompt)


def _run(args: argparse.Namespace, src: str | None) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="fm-lists-", dir=args.dir) as tmp:
        return asyncio.run(measure(args, src, Path(tmp)))


ROWS = [
    ("server RSS before the lists", "rss_before_mb", "MB"),
    ("server RSS peak during them", "rss_peak_mb", "MB"),
    ("server RSS right after", "rss_after_mb", "MB"),
    (f"server RSS {SETTLE_SECONDS:g} s later", "rss_settled_mb", "MB"),
    ("all lists answered in", "lists_seconds", "s"),
    ("one list, p50", "list_p50_ms", "ms"),
    ("one list, max", "list_max_ms", "ms"),
    ("list answer", "list_bytes", "B"),
    ("other tenant's GET, idle p50", "other_get_idle_p50_ms", "ms"),
    ("other tenant's GETs during the lists", "other_gets_during", ""),
    ("other tenant's GET during, p50", "other_get_p50_ms", "ms"),
    ("other tenant's GET during, p99", "other_get_p99_ms", "ms"),
    ("other tenant's GET during, max", "other_get_max_ms", "ms"),
]


def _print(runs: dict[str, dict[str, Any]]) -> None:
    first = next(iter(runs.values()))
    print(
        f"{first['lists']} concurrent GET /v1/generations?limit=200 over {first['jobs']} jobs "
        f"with ~{first['input_kb']} KB inputs (ferryman api, SQLite)"
    )
    labels = list(runs)
    width = max(len(name) for name, _, _ in ROWS)
    print(" " * (width + 2) + "  ".join(f"{label:>12}" for label in labels))
    for name, key, unit in ROWS:
        cells = "  ".join(
            f"{fmt(float(runs[label][key])) + (' ' + unit if unit else ''):>12}" for label in labels
        )
        print(f"{name:<{width}}  {cells}")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lists", type=int, default=100, help="concurrent lists")
    parser.add_argument("--jobs", type=int, default=200, help="jobs of the listing tenant")
    parser.add_argument("--input-kb", type=int, default=97, help="each job's input, KB")
    parser.add_argument(
        "--before-src", help="first measure the ferryman of this src/ (e.g. main's), then this one"
    )
    parser.add_argument("--dir", help="where the temporary directory goes (default: /tmp)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    runs: dict[str, dict[str, Any]] = {}
    if args.before_src:
        runs["before"] = _run(args, args.before_src)
    runs["after" if args.before_src else "this tree"] = _run(args, None)
    if args.json:
        print(json.dumps(runs))
    else:
        _print(runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
