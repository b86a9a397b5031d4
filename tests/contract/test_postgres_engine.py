"""What only the PostgreSQL engine must show: migrations several processes run at once,
outages (and only outages) reported as StoreUnavailableError, several processes
sharing one database (SKIP LOCKED receives, one idempotent create, one last admin
key), LISTEN/NOTIFY wake-ups, and surviving pg_terminate_backend."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack

import psycopg
import pytest

from ferryman.adapters.postgres import (
    PostgresApiKeyStore,
    PostgresDatabase,
    PostgresJobQueue,
    PostgresJobStore,
)
from ferryman.adapters.postgres.migrations import SchemaTooNewError, latest_version
from ferryman.core import changes
from ferryman.core.changes import Change
from ferryman.core.clock import FakeClock
from ferryman.core.errors import StoreUnavailableError
from ferryman.core.ids import new_job_id
from ferryman.core.job import JobStatus
from ferryman.engines import EngineOptions, open_engine, probe_engine
from ferryman.ports.keys import ApiKeyRecord, RevokeOutcome
from ferryman.ports.queue import QueueMessage

pytestmark = pytest.mark.timeout(60)


def _admin(url: str) -> psycopg.Connection:
    return psycopg.connect(url, autocommit=True)


def _ledger(url: str) -> list[tuple[int, str]]:
    with _admin(url) as conn:
        return [tuple(row) for row in conn.execute("SELECT version, name FROM schema_migrations")]


def _server(url: str) -> str:
    return url.rsplit("/", 1)[0] + "/postgres"


async def _terminate_all(url: str) -> int:
    """End every session on the database, as an operator or a failover would."""
    dbname = url.rsplit("/", 1)[1]
    async with await psycopg.AsyncConnection.connect(_server(url), autocommit=True) as conn:
        cursor = await conn.execute(
            "SELECT COUNT(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = %s",
            (dbname,),
        )
        row = await cursor.fetchone()
        return int(row[0])


async def _migrated(postgres_scratch) -> str:
    url = postgres_scratch()
    await (await PostgresDatabase.open(url, listen=False)).close()
    return url


async def _until(condition, *, timeout_seconds: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        await asyncio.sleep(0.02)


# --- migrations ---------------------------------------------------------------------


async def test_several_processes_migrating_at_once_apply_each_migration_once(postgres_scratch):
    url = postgres_scratch()

    opened = await asyncio.gather(*(PostgresDatabase.open(url, listen=False) for _ in range(4)))
    for db in opened:
        await db.close()

    versions = [version for version, _ in _ledger(url)]
    assert sorted(versions) == list(range(1, latest_version() + 1))


async def test_a_schema_newer_than_this_code_is_refused(postgres_scratch):
    url = postgres_scratch()
    await (await PostgresDatabase.open(url, listen=False)).close()
    with _admin(url) as conn:
        conn.execute(
            "INSERT INTO schema_migrations VALUES (%s, 'from_the_future', 0)",
            (latest_version() + 1,),
        )

    with pytest.raises(SchemaTooNewError, match="newer than this ferryman"):
        await PostgresDatabase.open(url, listen=False)


async def test_jobs_stored_before_webhooks_owe_none_and_are_purged_as_before(postgres_scratch):
    from ferryman.adapters.postgres.migrations import available
    from ferryman.adapters.postgres.sql import JOBS

    url = postgres_scratch()
    with _admin(url) as conn:
        conn.execute(
            "CREATE TABLE schema_migrations (version integer PRIMARY KEY, name text NOT NULL, "
            "applied_at double precision NOT NULL)"
        )
        for migration in available()[:3]:  # as the ferryman before webhooks left it
            conn.execute(migration.sql.encode(), prepare=False)
            conn.execute(
                "INSERT INTO schema_migrations VALUES (%s, %s, 0)",
                (migration.version, migration.name),
            )
        conn.execute(
            "INSERT INTO jobs (job_id, tenant_id, request_hash, task, model, input, "
            "payload_version, status, dispatch_state, correlation_id, created_at, updated_at, "
            "completed_at) VALUES ('gen_1', 't', 'h', 'generate', 'sim', '{}', 1, 'SUCCEEDED', "
            "'DISPATCHED', 'c', 1.0, 2.0, 2.0)"
        )

    async with open_engine(
        url, clock=FakeClock(), options=EngineOptions(postgres_listen=False)
    ) as engine:
        job = await engine.store.get("gen_1")
        assert job is not None
        assert (job.webhook_url, job.webhook_due_at, job.webhook_attempts) == (None, None, 0)
        assert job.webhook_event_seq == 0
        assert await engine.store.webhooks_due(now=10.0, limit=10) == []
        assert await engine.webhook_secrets.get_secret("t") is None
        assert await engine.store.purge_finished(completed_before=10.0, limit=10) == ["gen_1"]

    assert [version for version, _ in _ledger(url)] == list(range(1, latest_version() + 1))
    with _admin(url) as conn:
        # The dispatcher's scan can read the partial index (a tiny table would be
        # scanned whole, so scans are ruled out to ask).
        conn.execute("SET enable_seqscan = off")
        plan = conn.execute(
            "EXPLAIN " + JOBS["webhooks_due"], {"now": 10.0, "limit": 10, "skip": ["t9"]}
        ).fetchall()
        assert "jobs_webhooks_due" in " ".join(row[0] for row in plan)


async def test_probe_reads_without_writing_and_migrate_creates_a_missing_database(
    postgres_scratch,
):
    url = postgres_scratch()
    missing = url + "_missing"

    absent = await probe_engine(missing)
    empty = await probe_engine(url)
    async with open_engine(missing, clock=FakeClock()) as engine:
        assert engine.name == "postgresql"
    created = await probe_engine(missing)
    with _admin(_server(url)) as conn:
        conn.execute(f'DROP DATABASE "{missing.rsplit("/", 1)[1]}" WITH (FORCE)')

    assert (absent.exists, absent.schema_version) == (False, None)
    assert (empty.exists, empty.schema_version, empty.writable) == (True, 0, True)
    with _admin(url) as conn:
        assert conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None
    assert (created.schema_version, created.latest_version) == (latest_version(),) * 2
    assert created.pending_migrations == 0


async def test_open_without_create_refuses_a_missing_database(postgres_scratch):
    url = postgres_scratch() + "_never_made"

    with pytest.raises(StoreUnavailableError, match="does not exist"):
        async with open_engine(url, clock=FakeClock(), options=EngineOptions(create=False)):
            pass


# --- errors at the boundary ---------------------------------------------------------


async def test_an_unreachable_server_is_store_unavailable():
    url = "postgresql://postgres@127.0.0.1:1/ferryman"

    with pytest.raises(StoreUnavailableError, match="postgresql"):
        async with open_engine(url, clock=FakeClock()):
            pass
    probe = await probe_engine(url)
    assert probe.exists and probe.schema_version is None and "postgresql" in probe.error


async def test_a_programming_error_is_not_called_an_outage(postgres_url):
    db = await PostgresDatabase.open(postgres_url, listen=False)
    try:
        with pytest.raises(psycopg.errors.UndefinedTable):
            await db.fetch_all("SELECT * FROM no_such_table")
        # The pool is still good afterwards.
        assert await db.fetch_one("SELECT 1 AS one") == {"one": 1}
    finally:
        await db.close()


async def test_a_read_only_database_is_unavailable_for_writes_and_doctor_says_why(
    postgres_scratch, job_factory, clock
):
    url = await _migrated(postgres_scratch)
    with _admin(_server(url)) as admin:
        admin.execute(
            f'ALTER DATABASE "{url.rsplit("/", 1)[1]}" SET default_transaction_read_only = on'
        )
    db = await PostgresDatabase.open(url, create=False, listen=False)
    try:
        store = PostgresJobStore(db, clock=clock)
        accept = changes.accept(job_factory(), now=clock.now(), dispatched=True)

        with pytest.raises(StoreUnavailableError, match="ReadOnlySqlTransaction"):
            await store.create(accept, idempotency_expires_at=None)
        with pytest.raises(StoreUnavailableError, match="ReadOnlySqlTransaction"):
            await store.ping(write=True)
        await store.ping()  # reads still work
    finally:
        await db.close()
    probe = await probe_engine(url)
    assert probe.writable is False
    assert "read-only" in probe.unwritable_reason


async def test_receivers_still_find_work_while_nobody_listens(postgres_scratch):
    """The poll is the fallback: a process whose listening connection is down (here:
    never opened) still sees another process's message within its poll interval."""
    clock = FakeClock()
    url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        deaf, sender = await _processes(url, 2, stack, listen=False)
        waiting = PostgresJobQueue(deaf, clock=clock, poll_interval_seconds=0.2)
        receive = asyncio.create_task(
            waiting.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=10)
        )
        await asyncio.sleep(0.3)
        started = time.monotonic()
        await PostgresJobQueue(sender, clock=clock).send(
            QueueMessage(job_id=new_job_id(), tenant_id="t1")
        )
        [delivery] = await asyncio.wait_for(receive, timeout=5)

    assert delivery.receive_count == 1
    assert time.monotonic() - started < 1.5


# --- several processes on one database ----------------------------------------------


async def _processes(url: str, count: int, stack: AsyncExitStack, **options):
    dbs = []
    for _ in range(count):
        db = await PostgresDatabase.open(url, **options)
        stack.push_async_callback(db.close)
        dbs.append(db)
    return dbs


async def test_receivers_in_several_processes_never_share_a_message(postgres_scratch, job_factory):
    clock = FakeClock()
    postgres_url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        dbs = await _processes(postgres_url, 3, stack, listen=False)
        queues = [PostgresJobQueue(db, clock=clock) for db in dbs]
        sent = [QueueMessage(job_id=new_job_id(), tenant_id=f"t{i % 4}") for i in range(60)]
        for message in sent:
            await queues[0].send(message)

        async def drain(queue):
            got = []
            while batch := await queue.receive(max_messages=5, visibility_timeout_seconds=60):
                got += [d.message.job_id for d in batch]
            return got

        results = await asyncio.gather(*(drain(q) for q in queues for _ in range(2)))

    received = [job_id for got in results for job_id in got]
    assert sorted(received) == sorted(m.job_id for m in sent)  # each exactly once


async def test_the_same_idempotency_key_at_once_from_two_processes_makes_one_job(
    postgres_scratch, job_factory, clock
):
    postgres_url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        dbs = await _processes(postgres_url, 2, stack, listen=False)
        stores = [PostgresJobStore(db, clock=clock) for db in dbs]
        jobs = [job_factory(idempotency_key="same-key") for _ in range(6)]

        accepted = await asyncio.gather(
            *(
                stores[i % 2].create(
                    changes.accept(job, now=clock.now(), dispatched=True),
                    idempotency_expires_at=None,
                )
                for i, job in enumerate(jobs)
            )
        )

    assert sum(a.created for a in accepted) == 1
    assert len({a.job.job_id for a in accepted}) == 1


async def test_two_processes_revoking_the_last_two_admin_keys_leave_one(postgres_scratch, clock):
    postgres_url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        dbs = await _processes(postgres_url, 2, stack, listen=False)
        keys = [PostgresApiKeyStore(db) for db in dbs]
        for key_id in ("adm_a", "adm_b"):
            await keys[0].add_key(
                ApiKeyRecord(key_id, "ops", "0" * 64, admin=True, created_at=clock.now())
            )

        outcomes = await asyncio.gather(
            keys[0].revoke_key("adm_a", actor="x", now=clock.now(), keep_an_admin=True),
            keys[1].revoke_key("adm_b", actor="y", now=clock.now(), keep_an_admin=True),
        )

    assert sorted(o.outcome for o in outcomes) == sorted(
        [RevokeOutcome.REVOKED, RevokeOutcome.LAST_ADMIN]
    )


async def test_a_send_in_one_process_wakes_a_waiting_receive_in_another(postgres_scratch):
    clock = FakeClock()
    postgres_url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        waiter_db, sender_db = await _processes(postgres_url, 2, stack)
        # A poll this slow would miss the test's deadline: only the NOTIFY can be in time.
        waiting = PostgresJobQueue(waiter_db, clock=clock, poll_interval_seconds=30)
        sender = PostgresJobQueue(sender_db, clock=clock)
        await _until(lambda: waiter_db.listening)
        receive = asyncio.create_task(
            waiting.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=20)
        )
        await asyncio.sleep(0.3)
        assert not receive.done()

        started = time.monotonic()
        message = QueueMessage(job_id=new_job_id(), tenant_id="t1")
        await sender.send(message)
        [delivery] = await asyncio.wait_for(receive, timeout=5)

    assert delivery.message == message
    assert time.monotonic() - started < 2


async def test_a_cancel_of_a_running_job_wakes_the_cancel_watch_of_another_process(
    postgres_scratch, job_factory
):
    clock = FakeClock()
    postgres_url = await _migrated(postgres_scratch)
    async with AsyncExitStack() as stack:
        worker_db, api_db = await _processes(postgres_url, 2, stack)
        api = PostgresJobStore(api_db, clock=clock)
        running = job_factory(status=JobStatus.PROCESSING, attempt_id="att_1", worker_id="w1")
        waiting = job_factory()
        for job in (running, waiting):
            accepted = Change(before=None, after=job, at=clock.now())
            await api.create(accepted, idempotency_expires_at=None)
        await _until(lambda: worker_db.listening)
        hints = PostgresJobStore(worker_db, clock=clock).cancel_hints
        since = hints.generation

        # A waiting job ends CANCELLED at once: nobody runs it, nobody is woken.
        for job in (waiting, running):
            stored = await api.get(job.job_id)
            change = changes.request_cancel(stored, now=clock.now())
            assert await api.apply(change)
        await asyncio.wait_for(hints.wait(since=since, timeout_seconds=20), timeout=10)
        await asyncio.sleep(0.3)  # a NOTIFY the waiting job's cancel sent would be here by now

    assert hints.generation == since + 1


# --- connection loss ----------------------------------------------------------------


async def test_operations_succeed_again_after_the_backends_are_terminated(
    postgres_scratch, job_factory, clock
):
    postgres_url = await _migrated(postgres_scratch)
    db = await PostgresDatabase.open(postgres_url, min_size=3, max_size=3)
    try:
        store = PostgresJobStore(db, clock=clock)
        queue = PostgresJobQueue(db, clock=clock, poll_interval_seconds=30)
        job = job_factory()
        await store.create(
            changes.accept(job, now=clock.now(), dispatched=True), idempotency_expires_at=None
        )
        await _until(lambda: db.listening)

        assert await _terminate_all(postgres_url) >= 2  # the pool's and the listener's

        # Every pooled connection is dead: they are found out before one is lent, all
        # at once rather than one per backoff step, and replaced.
        started = time.monotonic()
        for _ in range(5):
            assert (await store.get(job.job_id)).job_id == job.job_id
        assert time.monotonic() - started < 1.0
        await store.ping(write=True)
        [delivery] = await queue.receive(max_messages=5, visibility_timeout_seconds=30)
        assert delivery.message.job_id == job.job_id
        # The listener reconnects with backoff and wakes receivers again.
        await _until(lambda: db.listening)
        waiting = asyncio.create_task(
            queue.receive(max_messages=1, visibility_timeout_seconds=30, wait_seconds=20)
        )
        await asyncio.sleep(0.3)
        other = await PostgresDatabase.open(postgres_url, listen=False)
        try:
            await PostgresJobQueue(other, clock=clock).send(
                QueueMessage(job_id=new_job_id(), tenant_id="t1")
            )
        finally:
            await other.close()
        assert len(await asyncio.wait_for(waiting, timeout=5)) == 1
    finally:
        await db.close()


async def test_ping_fails_while_the_database_refuses_connections_then_recovers(
    postgres_scratch, clock
):
    url = postgres_scratch()
    dbname = url.rsplit("/", 1)[1]
    server = _server(url)
    db = await PostgresDatabase.open(url, min_size=1, max_size=2, listen=False)
    try:
        store = PostgresJobStore(db, clock=clock)
        await store.ping(write=True)
        with _admin(server) as admin:
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
            try:
                await _terminate_all(url)
                with pytest.raises(StoreUnavailableError):
                    await store.ping()
            finally:
                admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')

        deadline = time.monotonic() + 20
        while True:
            try:
                await store.ping(write=True)
                break
            except StoreUnavailableError:
                assert time.monotonic() < deadline, "the pool never reconnected"
                await asyncio.sleep(0.2)
    finally:
        await db.close()
