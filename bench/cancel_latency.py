"""Cancel latency: cancel request -> job CANCELLED, in ``ferryman api`` + ``ferryman worker``.

Two processes over one database (a fresh SQLite file in a temporary directory, or
the PostgreSQL database ``--database-url`` names). One at a time, a slow sim job
(``latency_ms`` of ten minutes) is submitted, seen PROCESSING in the worker, then
cancelled through ``POST /v1/generations/{id}/cancel`` after a random pause of up to
``--jitter-ms`` (so cancels do not fall in step with the worker's periodic check).
The latency is the gap between the job's CANCEL_REQUESTED event (written by the api
process) and its CANCELLED event (written by the worker once the call has stopped),
both as the service recorded them with the machine's clock.

``--ferryman-src DIR`` runs the two ferryman processes from another source tree
(e.g. ``git archive`` of an older commit), the script itself from this one: the
before/after comparison of docs/benchmarks.md.

Run: ``.venv/bin/python bench/cancel_latency.py [--jobs 50] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from harness import ferryman_command, fmt, free_port, percentile, print_table

TENANT = "bench-cancel"
SLOW_MS = 600_000
READY_TIMEOUT_SECONDS = 30.0
STATE_TIMEOUT_SECONDS = 30.0


def _environment(args: argparse.Namespace, directory: Path) -> dict[str, str]:
    # The held calls are scripted (input.simulate), which a server refuses by default.
    env = {**os.environ, "FERRYMAN_LOG_LEVEL": "WARNING", "FERRYMAN_SIM_SCRIPTS": "true"}
    if args.database_url:
        env["FERRYMAN_DATABASE_URL"] = args.database_url
        env["FERRYMAN_RESULTS_URL"] = "db"
    else:
        env["FERRYMAN_DATABASE_URL"] = f"sqlite:///{directory / 'cancel.db'}"
        env["FERRYMAN_RESULTS_URL"] = f"file://{directory / 'results'}"
    if args.cancel_check_seconds is not None:
        env["FERRYMAN_CANCEL_CHECK_SECONDS"] = str(args.cancel_check_seconds)
    if args.ferryman_src:
        env["PYTHONPATH"] = str(Path(args.ferryman_src).resolve())
    return env


async def _api_key(env: dict[str, str]) -> str:
    made = await asyncio.create_subprocess_exec(
        *ferryman_command("keys", "create", "--tenant", TENANT),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await made.communicate()
    if made.returncode != 0:
        raise RuntimeError(f"ferryman keys create failed: {err.decode().strip()}")
    return out.decode().split()[-1]


async def _wait_ready(client: httpx.AsyncClient) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + READY_TIMEOUT_SECONDS
    while loop.time() < deadline:
        with contextlib.suppress(httpx.TransportError):
            if (await client.get("/readyz")).status_code == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError("ferryman api did not become ready")


async def _wait_status(client: httpx.AsyncClient, job_id: str, status: str) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + STATE_TIMEOUT_SECONDS
    while loop.time() < deadline:
        job = (await client.get(f"/v1/generations/{job_id}")).json()
        if job["status"] == status:
            return
        await asyncio.sleep(0.005)
    raise RuntimeError(f"job {job_id} did not reach {status}")


def _at(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


async def one_cancel(client: httpx.AsyncClient, jitter_ms: float) -> float:
    """Submit a slow job, cancel it while its call runs; the latency in ms."""
    body = {"task": "generate", "input": {"prompt": "hold", "simulate": {"latency_ms": SLOW_MS}}}
    response = await client.post("/v1/generations", json=body)
    if response.status_code != 202:
        raise RuntimeError(f"POST answered {response.status_code}: {response.text}")
    job_id = response.json()["job_id"]
    await _wait_status(client, job_id, "PROCESSING")
    await asyncio.sleep(random.uniform(0, jitter_ms) / 1000)
    cancelled = await client.post(f"/v1/generations/{job_id}/cancel")
    if cancelled.status_code != 200:
        raise RuntimeError(f"cancel answered {cancelled.status_code}: {cancelled.text}")
    await _wait_status(client, job_id, "CANCELLED")
    events = (await client.get(f"/v1/generations/{job_id}/events")).json()["events"]
    at = {event["kind"]: _at(event["at"]) for event in events}
    return (at["CANCELLED"] - at["CANCEL_REQUESTED"]) * 1000


async def measure(args: argparse.Namespace, directory: Path) -> dict[str, Any]:
    env = _environment(args, directory)
    key = await _api_key(env)
    port = free_port()
    quiet = asyncio.subprocess.DEVNULL
    api = await asyncio.create_subprocess_exec(
        *ferryman_command("api", "--port", str(port)), env=env, stderr=quiet
    )
    worker = await asyncio.create_subprocess_exec(
        *ferryman_command("worker"), env=env, stderr=quiet
    )
    try:
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Bearer {key}"},
            timeout=30.0,
        ) as client:
            await _wait_ready(client)
            for _ in range(args.warmup):
                await one_cancel(client, args.jitter_ms)
            latencies = [await one_cancel(client, args.jitter_ms) for _ in range(args.jobs)]
    finally:
        for process in (api, worker):
            process.terminate()
            await process.wait()
    return {
        "engine": "postgresql" if args.database_url else "sqlite",
        "cancels": len(latencies),
        "cancel_check_seconds": args.cancel_check_seconds,
        "cancel_latency_p50_ms": percentile(latencies, 50),
        "cancel_latency_p99_ms": percentile(latencies, 99),
        "cancel_latency_max_ms": max(latencies),
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=50, help="cancels measured")
    parser.add_argument("--warmup", type=int, default=3, help="cancels before measuring")
    parser.add_argument(
        "--jitter-ms", type=float, default=1000.0, help="random pause before each cancel"
    )
    parser.add_argument(
        "--database-url",
        help="a PostgreSQL scratch database (default: a fresh SQLite file)",
    )
    parser.add_argument(
        "--cancel-check-seconds",
        type=float,
        help="FERRYMAN_CANCEL_CHECK_SECONDS for the worker (default: ferryman's)",
    )
    parser.add_argument("--ferryman-src", help="run the ferryman processes from this src/")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="fm-cancel-", dir="/tmp") as tmp:
        out = asyncio.run(measure(args, Path(tmp)))
    if args.json:
        print(json.dumps(out))
        return 0
    print_table(
        f"cancel latency, ferryman api + worker on {out['engine']} ({out['cancels']} cancels)",
        [
            ("p50", f"{fmt(out['cancel_latency_p50_ms'])} ms"),
            ("p99", f"{fmt(out['cancel_latency_p99_ms'])} ms"),
            ("max", f"{fmt(out['cancel_latency_max_ms'])} ms"),
        ],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
