"""Prompts never reach the log, whatever fails and in every format (issue 5, item 2).

Before: with the default console logs, an unhandled error in a route rendered a
rich traceback with every frame's locals, request body and prompt included; the
JSON format printed the exception's message, which may quote the input too.
"""

from __future__ import annotations

import dataclasses
import json
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from ferryman.cli.serving import app_deps
from ferryman.http.app import create_app
from ferryman.observability.logging import configure_logging, flush_logs, reset_logging

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ferryman.wiring import Runtime

SECRET = "my-secret-prompt-d41d8"


class ExplodingIntake:
    """An intake that fails the way a bug would: the input in its locals and message."""

    sim_scripts = False

    async def submit(self, *, request: Any, **kwargs: Any) -> Any:
        customer_input = request.input
        raise RuntimeError(f"cannot submit {customer_input}")


@pytest.fixture
def logged(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    yield capsys
    flush_logs()
    reset_logging()


@pytest.mark.parametrize("as_json", [False, True], ids=["console", "json"])
async def test_an_unhandled_error_in_a_route_logs_no_prompt_and_no_locals(
    hostile_runtime: Runtime, logged: pytest.CaptureFixture[str], as_json: bool
) -> None:
    configure_logging("info", json=as_json)
    key = await hostile_runtime.api_keys.create("acme")
    deps = dataclasses.replace(app_deps(hostile_runtime), intake=ExplodingIntake())  # type: ignore[arg-type]
    transport = httpx.ASGITransport(app=create_app(deps))

    async with httpx.AsyncClient(transport=transport, base_url="http://ferryman.test") as client:
        response = await client.post(
            "/v1/generations",
            json={"task": "generate", "input": {"prompt": SECRET, "system": SECRET}},
            headers={"Authorization": f"Bearer {key}"},
        )

    assert response.status_code == 500
    assert SECRET not in response.text
    assert flush_logs()
    out, err = logged.readouterr()
    assert SECRET not in out + err
    assert "customer_input" not in err  # no locals-style output
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if "ferryman.http" in line]
    assert len(lines) == 2  # the error, then the request line
    assert "RuntimeError" in lines[0]
    assert "test_log_safety.py" in lines[0]  # where it failed, as file:line:function
    if as_json:
        error, request = (json.loads(line) for line in lines)
        assert error["event"] == "unhandled error"
        assert error["exc_type"] == "RuntimeError"
        assert "test_log_safety.py" in error["exc_frames"]
        assert "exc_message" not in error
        assert request["status"] == 500
