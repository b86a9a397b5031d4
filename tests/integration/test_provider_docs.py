"""The configuration docs/providers.md shows for a local server, run as written.

The page's ``tested-config: local-fake`` block is read from the page, pointed at a
small Chat Completions server on a loopback port, loaded the way ``ferryman serve``
loads ferryman.toml, and a job runs end to end through it: the wiring, the key read
from its variable, the provider's check and a streamed call.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ferryman.cli.doctor import check_settings
from ferryman.config import ConfigurationError, load_settings
from ferryman.core.job import JobStatus
from ferryman.services.intake import SubmitRequest
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

DOCS = Path(__file__).parents[2] / "docs" / "providers.md"
DOCUMENTED_PORT = "8089"
KEY = "local-test-key"
ANSWER = {"category": "billing", "priority": "high", "summary": "charged twice"}


def documented_config() -> str:
    page = DOCS.read_text(encoding="utf-8")
    found = re.search(r"<!-- tested-config: local-fake -->\s*```toml\n(.*?)```", page, re.S)
    assert found, "docs/providers.md lost its tested local-fake configuration"
    return found.group(1)


def chat_server(seen: list[dict[str, Any]]) -> Starlette:
    """Just enough of Chat Completions: /models and a streamed answer, key checked."""

    def refused(request: Request) -> Response | None:
        if request.headers.get("authorization") != f"Bearer {KEY}":
            error = {
                "message": "bad key",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            return JSONResponse({"error": error}, status_code=401)
        return None

    async def models(request: Request) -> Response:
        return refused(request) or JSONResponse({"object": "list", "data": []})

    async def completions(request: Request) -> Response:
        body = await request.json()
        seen.append(body)
        refusal = refused(request)
        if refusal is not None:
            return refusal
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": body["model"]}
        text = json.dumps(ANSWER)

        async def events() -> AsyncIterator[bytes]:
            for piece in (text[:10], text[10:]):
                chunk = {**base, "choices": [{"index": 0, "delta": {"content": piece}}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            done = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            usage = {**base, "choices": [], "usage": {"prompt_tokens": 30, "completion_tokens": 12}}
            for last in (done, usage):
                yield f"data: {json.dumps(last)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(
        routes=[
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", completions, methods=["POST"]),
        ]
    )


@pytest.fixture
async def local_server() -> AsyncIterator[tuple[int, list[dict[str, Any]]]]:
    seen: list[dict[str, Any]] = []
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.listen()  # connections wait in the backlog until the server accepts them
    # log_config=None: uvicorn must not rewire this process's logging for later tests.
    config = uvicorn.Config(chat_server(seen), log_config=None, access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield port, seen
    finally:
        server.should_exit = True
        await task
        sock.close()


def write_config(tmp_path: Path, port: int) -> Path:
    config = documented_config().replace(f"127.0.0.1:{DOCUMENTED_PORT}", f"127.0.0.1:{port}")
    path = tmp_path / "ferryman.toml"
    path.write_text(config, encoding="utf-8")
    return path


async def test_the_documented_local_config_runs_a_job(local_server, tmp_path, monkeypatch):
    port, seen = local_server
    monkeypatch.setenv("FERRYMAN_CONFIG", str(write_config(tmp_path, port)))
    monkeypatch.setenv("LOCAL_LLM_KEY", KEY)
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}", results_url=f"file://{tmp_path / 'r'}"
    )
    async with open_runtime(settings) as runtime:
        provider = runtime.catalog.route("local").provider
        try:
            await provider.check()
            submitted = await runtime.intake.submit(
                tenant_id="t1",
                request=SubmitRequest(
                    "classify_ticket", {"ticket": "I was charged twice"}, model="local"
                ),
            )
            assert await runtime.new_worker().run_until_idle() == 1
            view = await runtime.jobs.get("t1", submitted.job.job_id)
            attempts = await runtime.store.store.attempts(submitted.job.job_id)
        finally:
            await provider.aclose()
    assert view.job.status is JobStatus.SUCCEEDED
    assert view.result == ANSWER
    assert (attempts[0].input_tokens, attempts[0].output_tokens) == (30, 12)
    assert seen[0]["model"] == "fake-chat-model"
    assert seen[0]["stream"] is True


async def test_the_documented_config_without_its_key_names_the_variable(
    local_server, tmp_path, monkeypatch
):
    port, _ = local_server
    monkeypatch.setenv("FERRYMAN_CONFIG", str(write_config(tmp_path, port)))
    monkeypatch.delenv("LOCAL_LLM_KEY", raising=False)
    settings = load_settings(
        database_url=f"sqlite:///{tmp_path / 'f.db'}", results_url=f"file://{tmp_path / 'r'}"
    )
    with pytest.raises(ConfigurationError, match="LOCAL_LLM_KEY"):
        async with open_runtime(settings):
            pass


def documented_block(name: str) -> str:
    page = DOCS.read_text(encoding="utf-8")
    found = re.search(rf"<!-- tested-config: {name} -->\s*```toml\n(.*?)```", page, re.S)
    assert found, f"docs/providers.md lost its tested {name} configuration"
    return found.group(1)


def test_the_documented_ollama_config_passes_every_doctor_rule(tmp_path, monkeypatch):
    """The Ollama example gives its provider 120 s: the page must also give the attempt
    and the lease the room doctor's rules ask for, and the provider's calls get it."""
    path = tmp_path / "ferryman.toml"
    path.write_text(documented_block("ollama"), encoding="utf-8")
    monkeypatch.setenv("FERRYMAN_CONFIG", str(path))
    for name in ("PROVIDER_TIMEOUT", "ATTEMPT_TIMEOUT", "LEASE", "VISIBILITY_TIMEOUT"):
        monkeypatch.delenv(f"FERRYMAN_{name}_SECONDS", raising=False)
    monkeypatch.delenv("FERRYMAN_HEARTBEAT_INTERVAL_SECONDS", raising=False)
    settings = load_settings()
    failed = [check for check in check_settings(settings) if not check.ok]
    assert failed == []
    assert settings.provider_timeout_for("ollama") == 120
