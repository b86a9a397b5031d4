"""The engines the contract suite runs against, built lazily, one per test.

Every engine is opened through ``ferryman.engines.open_engine`` (the registry wiring
uses), with ``OPTIONS`` for the contract's knobs; every result store through
``ferryman.result_stores.open_result_store``. Add an engine by adding an async
context manager to ENGINES that opens its URL and wraps it in the ``Engine`` helper
below; one that needs a server asks for a fixture that calls ``require_service``
(tests/conftest.py) when it is missing, which skips locally and fails under CI=true.
An engine that cannot be opened otherwise makes the test error, never skip.

``memory-outbox`` is ``memory://`` with ``EngineOptions(memory_outbox=True)``: the
memory store without its own queue, so intake takes the outbox path.

PostgreSQL runs on the server FERRYMAN_TEST_POSTGRES_URL names (default: the
local one, user postgres): the session makes a fresh database there, migrates it
once, empties its tables before each test and drops it at the end.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import urllib.parse
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from ferryman import engines
from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.core.clock import FakeClock
from ferryman.core.idempotency import request_fingerprint
from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id
from ferryman.core.job import Job
from ferryman.engines import EngineOptions, open_engine
from ferryman.ports.queue import QueueMessage
from ferryman.result_stores import open_result_store
from ledger_reads import LedgerWithReads

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
    from contextlib import AbstractAsyncContextManager
    from pathlib import Path

    from ferryman.ports.control import ControlStore
    from ferryman.ports.keys import ApiKeyStore
    from ferryman.ports.queue import JobQueue
    from ferryman.ports.results import ResultStore
    from ferryman.ports.store import Accepted, JobStore
    from ferryman.ports.webhooks import WebhookSecretStore
    from ferryman.services.ledger import ClaimResult

MAX_RECEIVES = 10
RETENTION_SECONDS = 86_400.0
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _facts(job: Job | None) -> Job | None:
    return None if job is None else dataclasses.replace(job, revision=0, event_seq=0)


@pytest.fixture
def facts() -> Callable[[Job | None], Job | None]:
    """The job without its bookkeeping (revision, event_seq): what a change that
    "leaves the job alone" must leave alone."""
    return _facts


@dataclass
class Engine:
    """One engine's adapters. ``store`` is the ledger over the engine's JobStore port
    (``port``): the verbs every service uses, applied through the engine's one
    conditional write, so each verb's contract is checked against every engine; the
    port's reads answer through it too (tests/ledger_reads.py)."""

    name: str
    port: JobStore
    queue: JobQueue
    results: ResultStore
    webhook_secrets: WebhookSecretStore
    keys: ApiKeyStore
    control: ControlStore
    clock: FakeClock
    # Writes a message whose body is not ferryman's (a bug, another version): None
    # where messages are held as objects and no such body can exist (memory).
    send_raw: Callable[[str], Awaitable[None]] | None = None

    def __post_init__(self) -> None:
        self.store = LedgerWithReads(self.port)

    def now(self) -> float:
        return self.clock.now()

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    async def accept(self, job: Job, *, retention_seconds: float = RETENTION_SECONDS) -> Accepted:
        """Intake's step 4: create, and where the store does not enqueue, the outbox path."""
        accepted = await self.store.create(
            job, idempotency_expires_at=self.now() + retention_seconds, now=self.now()
        )
        if accepted.created and not self.store.enqueues_with_job:
            await self.queue.send(QueueMessage(job_id=job.job_id, tenant_id=job.tenant_id))
            await self.store.mark_dispatched(job.job_id, now=self.now())
        return accepted

    async def claim(
        self, job_id: str, *, lease_seconds: float = 60.0, worker_id: str = "w1"
    ) -> ClaimResult:
        return await self.store.claim(
            job_id,
            attempt_id=new_attempt_id(),
            worker_id=worker_id,
            now=self.now(),
            lease_until=self.now() + lease_seconds,
            max_deliveries_without_outcome=MAX_RECEIVES,
        )

    async def drain(self) -> list[str]:
        """Receive and delete every visible message; the job ids they carried."""
        job_ids: list[str] = []
        while deliveries := await self.queue.receive(
            max_messages=10, visibility_timeout_seconds=30.0
        ):
            for delivery in deliveries:
                job_ids.append(delivery.message.job_id)
                await self.queue.delete(delivery.receipt)
        return job_ids


# What every engine here is opened with: the production defaults but for the contract's
# max_receives and a short queue poll (a receive that waits returns sooner).
OPTIONS = EngineOptions(
    max_receives=MAX_RECEIVES,
    sqlite_poll_interval_seconds=0.05,
    postgres_poll_interval_seconds=0.05,
)


def _helper(
    name: str,
    opened: engines.Engine,
    clock: FakeClock,
    *,
    send_raw: Callable[[str], Awaitable[None]] | None = None,
) -> Engine:
    return Engine(
        name=name,
        port=opened.store,
        queue=opened.queue,
        results=opened.results,
        webhook_secrets=opened.webhook_secrets,
        keys=opened.keys,
        control=opened.control,
        clock=clock,
        send_raw=send_raw,
    )


@asynccontextmanager
async def _memory(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    async with open_engine("memory://", clock=clock, options=OPTIONS) as opened:
        yield _helper("memory", opened, clock)


@asynccontextmanager
async def _memory_outbox(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    """The memory store without its own queue: the shape of an engine like DynamoDB + SQS."""
    options = dataclasses.replace(OPTIONS, memory_outbox=True)
    async with open_engine("memory://", clock=clock, options=options) as opened:
        yield _helper("memory-outbox", opened, clock)


@asynccontextmanager
async def _sqlite(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    async with open_engine(
        f"sqlite:///{tmp_path / 'f.db'}", clock=clock, options=OPTIONS
    ) as opened:
        db = opened.database
        assert isinstance(db, SqliteDatabase)

        async def send_raw(body: str) -> None:
            at = clock.now()
            await db.write(
                lambda conn: conn.execute(
                    "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at) "
                    "VALUES (?, ?, 't1', ?, ?)",
                    (f"raw_{secrets.token_hex(6)}", body, at, at),
                )
            )

        yield _helper("sqlite", opened, clock, send_raw=send_raw)


def _database_url(server_url: str, dbname: str) -> str:
    parts = urllib.parse.urlsplit(server_url)
    return urllib.parse.urlunsplit(parts._replace(path="/" + dbname))


@pytest.fixture(scope="session")
def postgres_server(require_service: Callable[[str, str], NoReturn]) -> str:
    """The URL of the test server (its maintenance database), once it answers.
    Requested only by the PostgreSQL cases, so the others never wait on a server."""
    import psycopg

    server = os.environ.get("FERRYMAN_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    try:
        psycopg.connect(server, autocommit=True, connect_timeout=3).close()
    except psycopg.OperationalError as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        require_service("postgresql", f"{server}: {first_line}")
    return server


@contextmanager
def _scratch_database(server: str) -> Iterator[str]:
    """A new empty database on the server; dropped (its sessions ended) on exit."""
    import psycopg

    dbname = f"ferryman_test_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{dbname}"')
    try:
        yield _database_url(server, dbname)
    finally:
        # A new connection: one held for the whole session would not survive the
        # chaos suite's server restart.
        with psycopg.connect(server, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{dbname}" WITH (FORCE)')


@pytest.fixture(scope="session")
def postgres_url(postgres_server: str) -> Iterator[str]:
    """A fresh database for the session's contract cases, dropped when it ends. The
    first engine opened on it migrates it (the ledger survives emptying)."""
    with _scratch_database(postgres_server) as url:
        yield url


@pytest.fixture
def postgres_scratch(postgres_server: str) -> Iterator[Callable[[], str]]:
    """Factory: another fresh, empty database (not migrated), dropped after the test."""
    with ExitStack() as stack:
        yield lambda: stack.enter_context(_scratch_database(postgres_server))


async def _empty_postgres(url: str) -> None:
    """Every table but the migrations ledger, emptied: each test starts from nothing."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND tablename <> 'schema_migrations'"
        )
        tables = [row[0] for row in await cursor.fetchall()]
        if tables:
            names = ", ".join(f'"{table}"' for table in tables)
            await conn.execute(f"TRUNCATE {names} RESTART IDENTITY CASCADE")


@asynccontextmanager
async def _postgres(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    from ferryman.adapters.postgres import PostgresDatabase

    url = request.getfixturevalue("postgres_url")
    await _empty_postgres(url)
    options = dataclasses.replace(OPTIONS, postgres_pool_max_size=4)
    async with open_engine(url, clock=clock, options=options) as opened:
        db = opened.database
        assert isinstance(db, PostgresDatabase)

        async def send_raw(body: str) -> None:
            at = clock.now()
            await db.execute(
                "INSERT INTO messages (id, body, tenant_id, sent_at, visible_at) "
                "VALUES (%(id)s, %(body)s, 't1', %(at)s, %(at)s)",
                {"id": f"raw_{secrets.token_hex(6)}", "body": body, "at": at},
            )

        yield _helper("postgres", opened, clock, send_raw=send_raw)


@asynccontextmanager
async def _aws(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    """DynamoDB, SQS and its DLQ on the emulator (tests/aws_emulator.py): a fresh table
    and queues per test, made as ``ferryman migrate`` makes them."""
    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.adapters.aws.location import parse_aws_url
    from ferryman.adapters.aws.provision import queue_url as find_queue

    url = await request.getfixturevalue("aws_url_factory")()
    async with open_engine(url, clock=clock, options=OPTIONS) as opened:
        clients = opened.database
        assert isinstance(clients, AwsClients)
        queue_url = await find_queue(clients, parse_aws_url(url).queue)
        assert queue_url is not None

        async def send_raw(body: str) -> None:
            await clients.sqs.send_message(QueueUrl=queue_url, MessageBody=body)

        yield _helper("aws", opened, clock, send_raw=send_raw)


ENGINES: dict[
    str, Callable[[pytest.FixtureRequest, Path, FakeClock], AbstractAsyncContextManager[Engine]]
] = {
    "memory": _memory,
    "memory-outbox": _memory_outbox,
    "sqlite": _sqlite,
    "postgres": _postgres,
    "aws": _aws,
}


@asynccontextmanager
async def _engine_results(url: str, results_url: str, **options: Any) -> AsyncIterator[ResultStore]:
    """The result store ``results_url`` names over the engine ``url`` names, opened and
    closed as wiring opens them."""
    clock = FakeClock()
    options_here = dataclasses.replace(OPTIONS, **options)
    async with (
        open_engine(url, clock=clock, options=options_here) as opened,
        open_result_store(results_url, opened) as results,
    ):
        yield results.store


@asynccontextmanager
async def _memory_results(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    async with _engine_results("memory://", "db") as store:
        yield store


@asynccontextmanager
async def _sqlite_results(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    async with _engine_results(f"sqlite:///{tmp_path / 'r.db'}", "db") as store:
        yield store


@asynccontextmanager
async def _file_results(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    async with _engine_results("memory://", f"file://{tmp_path / 'results'}") as store:
        yield store


@asynccontextmanager
async def _postgres_results(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    url = request.getfixturevalue("postgres_url")
    await _empty_postgres(url)
    async with _engine_results(url, "db", postgres_pool_max_size=2, postgres_listen=False) as store:
        yield store


@asynccontextmanager
async def _aws_results(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    url = await request.getfixturevalue("aws_url_factory")()
    async with _engine_results(url, "db") as store:
        yield store


@asynccontextmanager
async def _s3_results(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[ResultStore]:
    """Results in S3 beside the memory engine (an s3:// URL works beside any engine)."""
    from aws_emulator import fresh_name
    from ferryman.adapters.aws.clients import open_clients

    request.getfixturevalue("aws_env")
    bucket = fresh_name("results")
    async with open_clients() as clients:
        await clients.s3.create_bucket(Bucket=bucket)
    async with _engine_results("memory://", f"s3://{bucket}/results") as store:
        yield store


RESULT_STORES: dict[
    str, Callable[[pytest.FixtureRequest, Path], AbstractAsyncContextManager[ResultStore]]
] = {
    "memory": _memory_results,
    "sqlite": _sqlite_results,
    "files": _file_results,
    "postgres": _postgres_results,
    "aws": _aws_results,
    "s3": _s3_results,
}


# The engines and result stores on the AWS emulator.
ON_AWS = frozenset({"aws", "s3"})


def _cases(names: Iterable[str]) -> list[Any]:
    """The fixture's parameters: those that reach the AWS emulator marked ``aws``
    (tests/conftest.py says why)."""
    return [pytest.param(name, marks=pytest.mark.aws) if name in ON_AWS else name for name in names]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=_cases(ENGINES))
async def engine(
    request: pytest.FixtureRequest, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[Engine]:
    async with ENGINES[request.param](request, tmp_path, clock) as built:
        yield built


@pytest.fixture(params=_cases(RESULT_STORES))
async def result_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ResultStore]:
    async with RESULT_STORES[request.param](request, tmp_path) as built:
        yield built


@pytest.fixture
def job_factory(clock: FakeClock) -> Callable[..., Job]:
    """A new QUEUED core Job of tenant t1; any field can be overridden."""

    def make(**overrides: Any) -> Job:
        task = overrides.get("task", "generate")
        model = overrides.get("model", "sim")
        input_ = overrides.get("input", {"prompt": "Hello"})
        now = clock.now()
        fields: dict[str, Any] = {
            "tenant_id": "t1",
            "job_id": new_job_id(),
            "task": task,
            "model": model,
            "input": input_,
            "request_hash": request_fingerprint(task=task, input=input_, model=model),
            "created_at": now,
            "updated_at": now,
            "correlation_id": new_correlation_id(),
        }
        fields.update(overrides)
        return Job(**fields)

    return make


@pytest.fixture
def worker_process() -> Iterator[Callable[..., Any]]:
    """Factory: ``worker_process(url, **env)`` starts ``ferryman worker`` on the database
    as its own OS process (results in the database, no sweeper); all are stopped after
    the test. Extra FERRYMAN_* settings come as keyword arguments."""
    import subprocess
    import sys

    started: list[subprocess.Popen[bytes]] = []

    def start(url: str, **settings: str) -> subprocess.Popen[bytes]:
        env = {
            **os.environ,
            "FERRYMAN_DATABASE_URL": url,
            "FERRYMAN_RESULTS_URL": "db",
            "FERRYMAN_POSTGRES_POOL_MAX_SIZE": "3",
            **{f"FERRYMAN_{name.upper()}": value for name, value in settings.items()},
        }
        process = subprocess.Popen(
            [sys.executable, "-m", "ferryman", "worker", "--no-sweeper"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        started.append(process)
        return process

    yield start
    for process in started:
        process.terminate()
    for process in started:
        process.wait(timeout=30)
