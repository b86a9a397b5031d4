"""A bounded schemathesis run over the app's own OpenAPI document: no input a
client can send is a server error (no 5xx).

The cases (valid and invalid, per schemathesis's positive and negative modes) go
in-process through httpx.ASGITransport to the app exactly as `ferryman serve` builds
it, on one event loop kept for the whole run (the SQLite engine is bound to it).
Deterministic (derandomized, no example database) and a few hundred examples, so
it takes seconds and fails the same way on every machine.

Pausing intake is left out: its 503 is the documented answer of an operator's
switch, and a paused fuzz run would explore nothing else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.generation.modes import GenerationMode

from ferryman.cli.serving import app_deps
from ferryman.config import Settings
from ferryman.http.app import create_app
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

    from fastapi import FastAPI
    from schemathesis import Case

pytestmark = pytest.mark.slow

EXAMPLES = 300


def transport_kwargs(case: Case) -> dict[str, Any]:
    """schemathesis's requests-style call, as httpx arguments."""
    given = case.as_transport_kwargs(base_url="http://ferryman.test")
    kwargs: dict[str, Any] = {
        "method": given["method"],
        "url": given["url"],
        "headers": given.get("headers") or {},
        "params": given.get("params"),
    }
    if "json" in given:
        kwargs["json"] = given["json"]
    elif given.get("data") is not None:
        data = given["data"]
        kwargs["content"] = data.encode() if isinstance(data, str) else data
    return kwargs


@dataclass
class Served:
    runner: asyncio.Runner
    client: httpx.AsyncClient
    key: str
    app: FastAPI

    def send(self, **kwargs: Any) -> httpx.Response:
        return self.runner.run(self.client.request(**kwargs))


@contextlib.contextmanager
def served_in_one_loop(tmp_path: Path) -> Iterator[Served]:
    """The served app with its budgets off (so a run explores routes, not 429s), and
    one event loop to call it from synchronous hypothesis tests."""
    configured = Settings(
        database_url=f"sqlite:///{tmp_path}/ferryman.db",
        results_url=f"file://{tmp_path}/results",
        tenant_rate_per_second=0,
        tenant_read_rate_per_second=0,
    )
    with asyncio.Runner() as runner:
        opened = open_runtime(configured)
        runtime = runner.run(opened.__aenter__())
        try:
            app = create_app(app_deps(runtime))
            key = runner.run(runtime.api_keys.create("fuzz", admin=True))
            client = httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://ferryman.test",
                headers={"Authorization": f"Bearer {key}"},
            )
            try:
                yield Served(runner, client, key, app)
            finally:
                runner.run(client.aclose())
        finally:
            runner.run(opened.__aexit__(None, None, None))


BOUNDED = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def test_no_generated_request_is_a_server_error(tmp_path: Path) -> None:
    server_errors: list[str] = []
    with served_in_one_loop(tmp_path) as served:
        schema = schemathesis.openapi.from_dict(served.app.openapi()).exclude(
            path="/v1/admin/pause"
        )

        @BOUNDED
        @given(
            case=st.one_of(
                schema.as_strategy(GenerationMode.POSITIVE),
                schema.as_strategy(GenerationMode.NEGATIVE),
            )
        )
        def call(case: Case) -> None:
            response = served.send(**transport_kwargs(case))
            if response.status_code >= 500:
                server_errors.append(
                    f"{case.method} {case.formatted_path} -> {response.status_code}"
                )

        call()

    assert server_errors == []


# Any code point at all, with the troublesome ones (lone surrogates, NUL, escapes,
# bidi overrides) made common; json.dumps escapes them on the way out. Built from
# lists, since st.text() leaves lone surrogates out whatever its alphabet.
ANY_TEXT = st.lists(
    st.one_of(
        st.characters(codec=None, exclude_categories=()),
        st.sampled_from(["\ud800", "\udfff", "\x00", "\x1b", "\u202e"]),
    ),
    max_size=40,
).map("".join)
INPUTS = st.builds(
    lambda known, extra: {**extra, **known},
    st.fixed_dictionaries(
        {"prompt": ANY_TEXT}, optional={"system": ANY_TEXT, "max_tokens": st.integers()}
    ),
    st.dictionaries(ANY_TEXT, ANY_TEXT, max_size=1),  # unknown keys, any text
)
SUBMISSIONS = st.fixed_dictionaries(
    {"task": st.one_of(st.just("generate"), ANY_TEXT), "input": INPUTS},
    optional={
        "model": st.one_of(st.just("sim"), ANY_TEXT),
        "metadata": st.dictionaries(ANY_TEXT, st.one_of(ANY_TEXT, st.lists(ANY_TEXT)), max_size=3),
    },
)


def test_no_submitted_text_is_a_server_error(tmp_path: Path) -> None:
    """Submissions shaped like real ones, with any text in any field: 202 or 422."""
    answers: list[tuple[int, bool]] = []
    with served_in_one_loop(tmp_path) as served:

        @BOUNDED
        @given(body=SUBMISSIONS, key=st.one_of(st.none(), st.text(max_size=8)))
        def submit(body: dict[str, Any], key: str | None) -> None:
            headers = {"Content-Type": "application/json"}
            if key:
                headers["Idempotency-Key"] = key.encode("utf-8").hex()[:255]
            raw = json.dumps(body)
            response = served.send(
                method="POST", url="/v1/generations", content=raw.encode(), headers=headers
            )
            # Judged as the server reads it: JSON joins an escaped high and low
            # surrogate into one ordinary character.
            answers.append((response.status_code, unstorable(json.loads(raw))))

        submit()

    assert {status for status, _ in answers} <= {202, 422}
    # Text no engine can store is always refused, never accepted.
    assert {status for status, bad in answers if bad} == {422}
    assert any(status == 202 for status, _ in answers)


def unstorable(value: Any) -> bool:
    """Does any key or string in ``value`` hold NUL or a lone surrogate?"""
    if isinstance(value, str):
        return any(c == "\x00" or 0xD800 <= ord(c) <= 0xDFFF for c in value)
    if isinstance(value, dict):
        return any(unstorable(k) or unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(unstorable(v) for v in value)
    return False
