"""Page cursors over HTTP, on every engine the served app runs on.

The app is built exactly as ``ferryman serve`` builds it (wiring and ``app_deps``)
over memory, SQLite and PostgreSQL. A cursor no list gave is a 422
``invalid_request`` whose error names ``["query", "cursor"]`` (docs/reference.md),
whichever engine serves, and a page's ``next_cursor`` leads to the next page.
"""

from __future__ import annotations

import base64
import os
import secrets
import urllib.parse
from typing import TYPE_CHECKING, NoReturn

import httpx
import pytest

from ferryman.cli.serving import app_deps
from ferryman.config import Settings
from ferryman.core.ids import new_job_id
from ferryman.http.app import create_app
from ferryman.http.error_map import PROBLEM_MEDIA_TYPE
from ferryman.wiring import open_runtime

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator
    from pathlib import Path

pytestmark = pytest.mark.timeout(60)

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
ENGINES = ("memory", "sqlite", "postgresql")
A_JOB_ID = new_job_id()
# Query strings as a client (or a bug) sends them, escapes and all.
MALFORMED_QUERIES = {
    "empty": "cursor=",
    "too long": "cursor=" + A_JOB_ID + "0" * 600,
    "non-ASCII": "cursor=" + urllib.parse.quote("gen_" + "É" * 26),
    "lone surrogate escape": "cursor=gen_" + "%ED%B3%BF" * 26,
    "bytes that are not UTF-8": "cursor=gen_" + "%FF" * 26,
    "NUL": "cursor=" + A_JOB_ID[:-1] + "%00",
    "trailing newline": "cursor=" + A_JOB_ID + "%0A",
    "base64 of a job id": "cursor="
    + urllib.parse.quote(base64.urlsafe_b64encode(A_JOB_ID.encode()).decode()),
    "the undecodable letters' cursor": "cursor=" + urllib.parse.quote("1700000000.5~dl_0a1b2c"),
}
LISTS = {"tenant": "/v1/generations", "admin": "/v1/admin/dead-letters"}


@pytest.fixture(scope="module")
def postgres_database(require_service: Callable[[str, str], NoReturn]) -> Iterator[str]:
    """A fresh database on the test server (made by the engine on open), dropped after."""
    import psycopg

    server = os.environ.get("FERRYMAN_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    try:
        psycopg.connect(server, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        require_service("postgresql", f"{server}: {(str(exc).strip().splitlines() or ['?'])[0]}")
    dbname = f"ferryman_test_cursor_{secrets.token_hex(6)}"
    parts = urllib.parse.urlsplit(server)
    yield urllib.parse.urlunsplit(parts._replace(path="/" + dbname))
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


def _settings(engine: str, request: pytest.FixtureRequest, tmp_path: Path) -> Settings:
    if engine == "memory":
        return Settings(database_url="memory://", results_url="db", receive_wait_seconds=0)
    if engine == "sqlite":
        return Settings(
            database_url=f"sqlite:///{tmp_path}/ferryman.db",
            results_url=f"file://{tmp_path}/results",
            receive_wait_seconds=0,
        )
    url = request.getfixturevalue("postgres_database")
    return Settings(database_url=url, results_url="db", receive_wait_seconds=0)


@pytest.fixture(params=ENGINES)
async def served(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[dict[str, httpx.AsyncClient]]:
    """Clients of the served app on one engine: as a tenant, and as an operator."""
    async with open_runtime(_settings(request.param, request, tmp_path)) as runtime:
        app = create_app(app_deps(runtime))
        # A new tenant each time: the PostgreSQL database lives for the module.
        keys = {
            "tenant": await runtime.api_keys.create(f"acme-{secrets.token_hex(4)}"),
            "admin": await runtime.api_keys.create("ops", admin=True),
        }
        clients = {
            who: httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://ferryman.test",
                headers={"Authorization": f"Bearer {key}"},
            )
            for who, key in keys.items()
        }
        try:
            yield clients
        finally:
            for client in clients.values():
                await client.aclose()


@pytest.mark.parametrize("who", list(LISTS))
@pytest.mark.parametrize("query", list(MALFORMED_QUERIES.values()), ids=list(MALFORMED_QUERIES))
async def test_a_malformed_cursor_is_a_422_naming_the_cursor(
    served: dict[str, httpx.AsyncClient], who: str, query: str
) -> None:
    response = await served[who].get(f"{LISTS[who]}?{query}")

    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == PROBLEM_MEDIA_TYPE
    problem = response.json()
    assert problem["code"] == "invalid_request"
    assert [error["loc"][:2] for error in problem["errors"]] == [["query", "cursor"]]


async def test_next_cursor_leads_through_every_job_once(
    served: dict[str, httpx.AsyncClient],
) -> None:
    client = served["tenant"]
    submitted = []
    for i in range(5):
        response = await client.post(
            "/v1/generations", json={"task": "generate", "input": {"prompt": f"p{i}"}}
        )
        assert response.status_code == 202, response.text
        submitted.append(response.json()["job_id"])

    seen, cursor = [], None
    for _ in range(5):
        query = "limit=2" + ("" if cursor is None else f"&cursor={cursor}")
        page = (await client.get(f"/v1/generations?{query}")).json()
        seen += [job["job_id"] for job in page["data"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break

    assert seen == submitted[::-1]
