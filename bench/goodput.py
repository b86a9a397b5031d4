"""Goodput against a provider that limits requests per second.

A local Chat Completions server (its own process, on a loopback port) accepts at most
``--limit`` requests in any one-second window and answers 429 above it, at once,
with ``retry-after-ms`` saying when the oldest accepted call leaves the window (as
OpenAI and Anthropic say when to come back; ``--no-retry-after``: say nothing, the
worst case); an accepted call answers after ``--latency-ms``. ``--jobs`` jobs
are submitted through the wired service (ferryman.toml pointing a model alias at the
server), then one ``ferryman worker --concurrency 200`` process runs them.

The worker is told nothing about the limit: what keeps it close is what it learns
from the throttles (services/limiter.py: the window's slow start and AIMD, and the
learned request rate). The server's own counts are the figures:

goodput_fraction         completions per second, first call to last completion, over
                         the limit
steady_goodput_fraction  accepted calls per second after the first five seconds (the
                         limit learned), over the limit
throttled_fraction       429 answers over all calls the server received

Target (issue 6): goodput_fraction >= 0.9, throttled_fraction <= 0.05. ``--limit 0``
(no limit) measures the ceiling of this setup instead: what one worker process and
the server process manage on this machine, which any limit must stay under to mean
anything.
Run: ``.venv/bin/python bench/goodput.py [--limit 50] [--latency-ms 200] [--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ferryman.config import load_settings
from ferryman.observability.logging import configure_logging
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from starlette.requests import Request

TENANTS = ("t1", "t2", "t3", "t4")  # one worker's slots are shared fairly between them
ANSWER = json.dumps({"text": "done"})


def limited_chat_server(limit: int, latency_seconds: float, *, retry_after: bool) -> Starlette:
    """Chat Completions that accepts ``limit`` requests in any second, 429 above; with
    ``retry_after`` the 429 says when the oldest accepted call leaves the window."""
    accepted: collections.deque[float] = collections.deque()
    stats: dict[str, Any] = {"ok": 0, "throttled": 0, "first_at": None, "last_ok_at": None}
    # Accepted and throttled calls in each second from the first call: the shape of the run.
    per_second: collections.defaultdict[int, list[int]] = collections.defaultdict(lambda: [0, 0])

    async def models(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [{"id": "limited", "object": "model"}]})

    async def completions(request: Request) -> Response:
        body = await request.json()
        now = time.time()
        if stats["first_at"] is None:
            stats["first_at"] = now
        while accepted and accepted[0] <= now - 1.0:
            accepted.popleft()
        second = int(now - stats["first_at"])
        if limit and len(accepted) >= limit:
            stats["throttled"] += 1
            per_second[second][1] += 1
            error = {
                "message": "Rate limit reached for requests",
                "type": "requests",
                "code": "rate_limit_exceeded",
            }
            headers = {}
            if retry_after:
                headers["retry-after-ms"] = str(int((accepted[0] + 1.0 - now) * 1000) + 1)
            return JSONResponse({"error": error}, status_code=429, headers=headers)
        accepted.append(now)
        per_second[second][0] += 1
        await asyncio.sleep(latency_seconds)
        stats["ok"] += 1
        stats["last_ok_at"] = time.time()
        base = {"id": f"chatcmpl-{stats['ok']}", "model": body["model"], "created": int(now)}
        usage = {"prompt_tokens": 12, "completion_tokens": 4, "total_tokens": 16}
        if not body.get("stream"):
            message = {"role": "assistant", "content": ANSWER}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            whole = {**base, "object": "chat.completion", "choices": [choice], "usage": usage}
            return JSONResponse(whole)

        async def events() -> AsyncIterator[bytes]:
            chunk = {"object": "chat.completion.chunk", **base}
            delta = {"index": 0, "delta": {"role": "assistant", "content": ANSWER}}
            yield f"data: {json.dumps({**chunk, 'choices': [delta]})}\n\n".encode()
            stop = {"index": 0, "delta": {}, "finish_reason": "stop"}
            yield f"data: {json.dumps({**chunk, 'choices': [stop]})}\n\n".encode()
            yield f"data: {json.dumps({**chunk, 'choices': [], 'usage': usage})}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def read_stats(request: Request) -> Response:
        return JSONResponse({**stats, "per_second": [per_second[s] for s in sorted(per_second)]})

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", completions, methods=["POST"]),
            Route("/stats", read_stats, methods=["GET"]),
        ]
    )


def serve_provider(port: int, limit: int, latency_ms: int, *, retry_after: bool) -> None:
    app = limited_chat_server(limit, latency_ms / 1000, retry_after=retry_after)
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_listening(port: int, timeout_seconds: float = 15.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the provider server did not listen on port {port}")


def write_config(directory: Path, port: int, *, stream: bool) -> Path:
    path = directory / "ferryman.toml"
    path.write_text(
        f"""
[providers.limited]
kind = "openai"
base_url = "http://127.0.0.1:{port}/v1"
max_concurrency = 200
stream = {"true" if stream else "false"}

[models.limited]
provider = "limited"
model = "limited-chat"
""",
        encoding="utf-8",
    )
    return path


async def submit(jobs: int) -> None:
    """Through the wired service, as the API would: the model alias is checked."""
    configure_logging("WARNING")
    async with open_runtime(load_settings()) as runtime:
        for start in range(0, jobs, 100):
            await asyncio.gather(
                *(
                    runtime.intake.submit(
                        tenant_id=TENANTS[i % len(TENANTS)],
                        request=SubmitRequest(
                            "generate", {"prompt": f"goodput job {i}"}, model="limited"
                        ),
                    )
                    for i in range(start, min(jobs, start + 100))
                )
            )


def statuses(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as conn:
        rows = conn.execute("SELECT status, count(*) FROM jobs GROUP BY status").fetchall()
    return {str(status): int(count) for status, count in rows}


def attempt_outcomes(database: Path) -> dict[str, int]:
    with sqlite3.connect(database) as conn:
        rows = conn.execute(
            "SELECT coalesce(failure_class, outcome), count(*) FROM attempts GROUP BY 1"
        ).fetchall()
    return {str(kind): count for kind, count in rows}


def run(args: argparse.Namespace) -> dict[str, Any]:
    port = free_port()
    provider = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve-provider",
            str(port),
            "--limit",
            str(args.limit),
            "--latency-ms",
            str(args.latency_ms),
            *([] if args.retry_after else ["--no-retry-after"]),
        ]
    )
    try:
        wait_listening(port)
        with tempfile.TemporaryDirectory(prefix="ferryman-goodput-") as tmp:
            directory = Path(tmp)
            database = directory / "ferryman.db"
            env = {
                **os.environ,
                "FERRYMAN_CONFIG": str(write_config(directory, port, stream=args.stream)),
                "FERRYMAN_DATABASE_URL": f"sqlite:///{database}",
                "FERRYMAN_RESULTS_URL": f"file://{directory / 'results'}",
                "FERRYMAN_LOG_LEVEL": "WARNING",
            }
            os.environ.update(env)
            asyncio.run(submit(args.jobs))
            worker = subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("ferryman")),
                    "worker",
                    "--concurrency",
                    str(args.concurrency),
                ],
                env=env,
            )
            try:
                expected_seconds = args.jobs / (args.limit or 100)
                stats = wait_done(port, args.jobs, timeout_seconds=expected_seconds * 4 + 60)
            finally:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=60)
            return figures(args, stats, statuses(database), attempt_outcomes(database))
    finally:
        provider.terminate()
        provider.wait(timeout=30)


def wait_done(port: int, jobs: int, *, timeout_seconds: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_seconds
    with httpx.Client(base_url=f"http://127.0.0.1:{port}") as client:
        while True:
            stats: dict[str, Any] = client.get("/stats").json()
            if stats["ok"] >= jobs:
                return stats
            if time.monotonic() > deadline:
                raise SystemExit(f"only {stats['ok']} of {jobs} calls went through in time")
            time.sleep(0.5)


def figures(
    args: argparse.Namespace,
    stats: dict[str, Any],
    statuses: dict[str, int],
    attempts: dict[str, int],
) -> dict[str, Any]:
    seconds = stats["last_ok_at"] - stats["first_at"]
    calls = stats["ok"] + stats["throttled"]
    return {
        "limit_per_second": args.limit,
        "latency_ms": args.latency_ms,
        "jobs": args.jobs,
        "concurrency": args.concurrency,
        "stream": args.stream,
        "retry_after": args.retry_after,
        "seconds": round(seconds, 2),
        "completions_per_second": round(stats["ok"] / seconds, 2),
        "goodput_fraction": round(stats["ok"] / seconds / args.limit, 3) if args.limit else None,
        # After the first five seconds (the limit learned), to the last whole second.
        "steady_goodput_fraction": steady_fraction(stats["per_second"], args.limit),
        "calls": calls,
        "throttled_calls": stats["throttled"],
        "throttled_fraction": round(stats["throttled"] / calls, 4),
        "job_statuses": statuses,
        "attempts": attempts,
        "per_second": stats["per_second"],
    }


def steady_fraction(per_second: list[list[int]], limit: int) -> float | None:
    steady = per_second[5:-1]
    if not limit or not steady:
        return None
    return round(sum(ok for ok, _ in steady) / len(steady) / limit, 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--limit", type=int, default=50, help="requests/s the server accepts (0: no limit)"
    )
    parser.add_argument("--latency-ms", type=int, default=200, help="an accepted call's latency")
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=200)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument(
        "--no-retry-after",
        dest="retry_after",
        action="store_false",
        help="429s without retry-after-ms (the worst case: nothing says when to come back)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--serve-provider", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_provider:
        serve_provider(
            args.serve_provider, args.limit, args.latency_ms, retry_after=args.retry_after
        )
        return
    result = run(args)
    if args.json:
        print(json.dumps(result))
        return
    for key, value in result.items():
        print(f"{key:24} {value}")
    if not args.limit:
        return
    met = result["goodput_fraction"] >= 0.9 and result["throttled_fraction"] <= 0.05
    print(f"{'target':24} {'met' if met else 'NOT met'} (goodput >= 0.9, throttled <= 0.05)")


if __name__ == "__main__":
    main()
