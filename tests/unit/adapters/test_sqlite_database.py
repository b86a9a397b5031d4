"""SqliteDatabase: file settings, group commit, per-op rollback, error translation."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable

import pytest

from ferryman.adapters.sqlite import SqliteDatabase
from ferryman.adapters.sqlite.checkpoints import Checkpoints
from ferryman.adapters.sqlite.writer import begin_immediate
from ferryman.core.errors import StoreUnavailableError


def _pragma(name: str):
    return lambda conn: conn.execute(f"PRAGMA {name}").fetchone()[0]


def _insert(key: str):
    def op(conn: sqlite3.Connection) -> str:
        conn.execute("INSERT INTO results (key, data) VALUES (?, ?)", (key, b"x"))
        return key

    return op


def _keys(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT key FROM results")}


async def _hold_writer(db: SqliteDatabase) -> tuple[asyncio.Future[None], threading.Event]:
    """Occupy the writer thread, so the writes submitted meanwhile queue up as one batch."""
    entered, release = threading.Event(), threading.Event()

    def block(conn: sqlite3.Connection) -> None:
        entered.set()
        release.wait(5)

    blocker = asyncio.ensure_future(db.write(block))
    await asyncio.to_thread(entered.wait, 5)
    return blocker, release


async def test_file_settings_default_to_wal_and_full_sync(db: SqliteDatabase) -> None:
    assert await db.write(_pragma("journal_mode")) == "wal"
    assert await db.write(_pragma("synchronous")) == 2  # FULL
    assert await db.write(_pragma("foreign_keys")) == 1
    # The writer waits for another process's lock itself (writer.begin_immediate), in
    # finer steps than SQLite's busy handler; the reader keeps the handler.
    assert await db.write(_pragma("busy_timeout")) == 0
    assert await db.read(_pragma("busy_timeout")) == 10_000
    assert await db.read(_pragma("journal_mode")) == "wal"


async def test_synchronous_normal_is_an_opt_in(tmp_path) -> None:
    db = await SqliteDatabase.open(tmp_path / "n.db", synchronous="NORMAL")
    try:
        assert await db.write(_pragma("synchronous")) == 1
    finally:
        await db.close()


async def test_an_unknown_synchronous_mode_is_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        await SqliteDatabase.open(tmp_path / "x.db", synchronous="OFF; DROP TABLE jobs")


async def test_open_creates_directories_and_is_idempotent(tmp_path) -> None:
    path = tmp_path / "a" / "b" / "f.db"
    first = await SqliteDatabase.open(path)
    await first.write(_insert("k"))
    await first.close()
    second = await SqliteDatabase.open(path)
    try:
        assert await second.read(_keys) == {"k"}
    finally:
        await second.close()


async def test_concurrent_writes_share_commits(db: SqliteDatabase) -> None:
    before = db.commit_count
    keys = await asyncio.gather(*(db.write(_insert(f"k{i}")) for i in range(50)))
    commits = db.commit_count - before
    assert sorted(keys) == sorted(f"k{i}" for i in range(50))
    assert await db.read(_keys) == set(keys)
    assert 1 <= commits < 50, f"{commits} commits for 50 concurrent writes"


async def test_writes_waiting_together_commit_in_one_transaction(db: SqliteDatabase) -> None:
    blocker, release = await _hold_writer(db)
    before = db.commit_count
    waiting = [asyncio.ensure_future(db.write(_insert(f"k{i}"))) for i in range(20)]
    await asyncio.sleep(0)  # let every write reach the writer's inbox
    release.set()
    await blocker
    await asyncio.gather(*waiting)
    # The blocker's own batch, then one batch for all twenty.
    assert db.commit_count - before == 2
    assert len(await db.read(_keys)) == 20


async def test_a_failing_op_rolls_back_only_itself(db: SqliteDatabase) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO results (key, data) VALUES ('bad', x'00')")
        raise ValueError("this op changes its mind")

    blocker, release = await _hold_writer(db)
    before = db.commit_count
    first = asyncio.ensure_future(db.write(_insert("a")))
    failing = asyncio.ensure_future(db.write(half_then_fail))
    last = asyncio.ensure_future(db.write(_insert("b")))
    await asyncio.sleep(0)
    release.set()
    await blocker

    assert await first == "a"
    assert await last == "b"
    with pytest.raises(ValueError, match="changes its mind"):
        await failing
    # The blocker's own batch, then one transaction shared by the three.
    assert db.commit_count - before == 2
    assert await db.read(_keys) == {"a", "b"}


async def test_a_failing_op_alone_leaves_nothing_behind(db: SqliteDatabase) -> None:
    def half_then_fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO results (key, data) VALUES ('bad', x'00')")
        raise ValueError("this op changes its mind")

    with pytest.raises(ValueError, match="changes its mind"):
        await db.write(half_then_fail)
    assert await db.read(_keys) == set()
    assert await db.write(_insert("next")) == "next"  # the writer carries on


async def test_reads_asked_together_each_get_their_own_outcome(db: SqliteDatabase) -> None:
    await db.write(_insert("a"))

    def broken(conn: sqlite3.Connection) -> None:
        raise ValueError("this read fails on its own")

    outcomes = await asyncio.gather(
        db.read(_keys),
        db.read(broken),
        db.read(lambda conn: conn.execute("SELECT * FROM no_such_table").fetchall()),
        db.read(_keys),
        return_exceptions=True,
    )

    assert outcomes[0] == outcomes[3] == {"a"}
    assert isinstance(outcomes[1], ValueError)
    # A wrong statement is a bug, not an outage: it goes through as the driver's error.
    assert isinstance(outcomes[2], sqlite3.OperationalError)
    assert not isinstance(outcomes[2], StoreUnavailableError)
    await db.write(_insert("b"))
    assert await db.read(_keys) == {"a", "b"}  # a later read sees a later commit


def _raising(code: int, name: str) -> Callable[[sqlite3.Connection], None]:
    def op(conn: sqlite3.Connection) -> None:
        error = sqlite3.OperationalError(f"as SQLite says {name}")
        error.sqlite_errorcode = code
        raise error

    return op


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (sqlite3.SQLITE_BUSY, "database is locked"),
        (sqlite3.SQLITE_FULL, "database or disk is full"),
        (sqlite3.SQLITE_IOERR_FSYNC, "disk I/O error (an extended code)"),
        (sqlite3.SQLITE_READONLY, "attempt to write a readonly database"),
        (sqlite3.SQLITE_CANTOPEN, "unable to open database file"),
    ],
)
async def test_an_outage_becomes_store_unavailable(
    db: SqliteDatabase, code: int, name: str
) -> None:
    with pytest.raises(StoreUnavailableError) as caught:
        await db.write(_raising(code, name))
    assert isinstance(caught.value.__cause__, sqlite3.Error)
    with pytest.raises(StoreUnavailableError):
        await db.read(_raising(code, name))
    assert db.recent_write_failure(3600) is not None  # readiness hears of it
    # The writer survives a failed op.
    assert await db.write(_insert("after")) == "after"


async def test_a_wrong_statement_goes_through_as_the_drivers_error(db: SqliteDatabase) -> None:
    # A bug, which no retry mends: calling it an outage would hide it (and make the
    # process unready for something the store did not do).
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await db.write(lambda conn: conn.execute("INSERT INTO no_such_table VALUES (1)"))
    await db.write(_insert("k"))
    with pytest.raises(sqlite3.IntegrityError):
        await db.write(_insert("k"))
    with pytest.raises(sqlite3.OperationalError, match="no such table"):
        await db.read(lambda conn: conn.execute("SELECT * FROM no_such_table").fetchall())
    assert db.recent_write_failure(3600) is None
    assert await db.write(_insert("after")) == "after"


async def test_a_write_is_committed_when_it_returns(db: SqliteDatabase, db_path) -> None:
    await db.write(_insert("durable"))
    # Another connection (another process) already sees it: COMMIT happened first.
    other = sqlite3.connect(db_path)
    try:
        assert other.execute("SELECT key FROM results").fetchall() == [("durable",)]
    finally:
        other.close()


async def test_the_reader_cannot_write(db: SqliteDatabase) -> None:
    with pytest.raises(StoreUnavailableError):
        await db.read(_insert("sneaky"))


async def test_a_closed_database_refuses_work(tmp_path) -> None:
    db = await SqliteDatabase.open(tmp_path / "c.db")
    await db.close()
    with pytest.raises(StoreUnavailableError):
        await db.write(_insert("late"))
    with pytest.raises(StoreUnavailableError):
        await db.read(_keys)
    await db.close()  # closing twice is harmless


async def test_without_batching_every_write_is_its_own_commit(tmp_path) -> None:
    # The control for the batching tests: the counter counts real transactions.
    db = await SqliteDatabase.open(tmp_path / "one.db", max_batch=1)
    try:
        await asyncio.gather(*(db.write(_insert(f"k{i}")) for i in range(10)))
        assert db.commit_count == 10
    finally:
        await db.close()


async def test_checkpoints_run_beside_the_writer_not_in_its_commits(db: SqliteDatabase) -> None:
    # The writer's own automatic checkpoint is only a safety net...
    assert await db.write(_pragma("wal_autocheckpoint")) == 4_000
    checkpointer = db._checkpointer
    assert checkpointer is not None
    steps = checkpointer.steps
    for i in range(20):
        await db.write(_insert(f"k{i}"))
    # ...the checkpointer thread copies the WAL into the file once it saw the writer's
    # last commit (the figures are published before the count it acted on).
    async with asyncio.timeout(10):
        while steps.seen_commits != db.commit_count or steps.last is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert steps.last[0] > 0
    assert steps.last[1] == steps.last[0]
    # Idle writer, idle checkpointer: the thread looks twice more and runs nothing.
    runs, ticks = steps.checkpoints, steps.ticks
    async with asyncio.timeout(10):
        while steps.ticks < ticks + 2:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    assert steps.checkpoints == runs
    assert await db.read(_keys) == {f"k{i}" for i in range(20)}


class _Writer:
    """A WAL file, a connection that writes to it and the commit counter the
    checkpointer reads, advanced by hand."""

    def __init__(self, path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA wal_autocheckpoint=0")  # only our checkpoints copy
        self.conn.execute("CREATE TABLE t (v TEXT)")
        self.commits = 0

    def commit(self) -> None:
        self.conn.execute("INSERT INTO t VALUES ('x')")
        self.commits += 1


def test_a_checkpoint_runs_only_when_the_writer_committed_since_the_last(tmp_path) -> None:
    writer = _Writer(tmp_path / "c.db")
    steps = Checkpoints(sqlite3.connect(tmp_path / "c.db"), lambda: writer.commits)
    try:
        assert steps.tick() is False  # nothing committed since it began
        assert (steps.checkpoints, steps.last) == (0, None)

        writer.commit()
        assert steps.tick() is True
        wal_pages, copied = steps.last
        assert wal_pages > 0 and copied == wal_pages  # no reader held a page back
        assert steps.tick() is False  # nothing new since
        assert steps.tick() is False

        writer.commit()
        writer.commit()
        assert steps.tick() is True  # two commits, one checkpoint
        assert steps.tick() is False
        assert (steps.checkpoints, steps.ticks) == (2, 6)
    finally:
        writer.conn.close()


class _FailsFirst:
    """A connection whose first statement fails (as a busy or broken file's would)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self.calls = 0

    def execute(self, sql: str) -> sqlite3.Cursor:
        self.calls += 1
        if self.calls == 1:
            raise sqlite3.OperationalError("disk I/O error")
        return self._conn.execute(sql)


def test_a_failed_checkpoint_waits_for_the_next_commit_and_stops_nothing(tmp_path) -> None:
    writer = _Writer(tmp_path / "c.db")
    conn = _FailsFirst(sqlite3.connect(tmp_path / "c.db"))
    steps = Checkpoints(conn, lambda: writer.commits)  # type: ignore[arg-type]
    try:
        writer.commit()
        assert steps.tick() is False  # failed, not raised: the thread goes on
        assert (steps.checkpoints, steps.last) == (0, None)
        assert steps.tick() is False
        assert conn.calls == 1  # not tried again before the writer commits again
        writer.commit()
        assert steps.tick() is True
        assert steps.last is not None and steps.last[1] == steps.last[0] > 0
    finally:
        conn._conn.close()
        writer.conn.close()


def _other_process_holds_the_write_lock(path) -> sqlite3.Connection:
    """Another connection (as another process's) in a write transaction on the file."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO results (key, data) VALUES ('theirs', x'01')")
    return other


async def test_a_write_waits_for_another_connections_lock_then_commits(db_path) -> None:
    db = await SqliteDatabase.open(db_path)
    other = _other_process_holds_the_write_lock(db_path)
    try:
        mine = asyncio.ensure_future(db.write(_insert("mine")))
        await asyncio.sleep(0.05)
        assert not mine.done()  # still waiting for the lock, not failed
        other.execute("COMMIT")
        assert await mine == "mine"
        assert await db.read(_keys) == {"theirs", "mine"}
    finally:
        other.close()
        await db.close()


async def test_a_lock_held_past_the_busy_timeout_fails_the_write_and_loses_nothing(
    db_path,
) -> None:
    db = await SqliteDatabase.open(db_path, busy_timeout_seconds=0.2)
    other = _other_process_holds_the_write_lock(db_path)
    try:
        with pytest.raises(StoreUnavailableError, match="database is locked"):
            await db.write(_insert("mine"))
        other.execute("COMMIT")
        # The writer carries on once the lock is free, and the failed write left nothing.
        assert await db.write(_insert("later")) == "later"
        assert await db.read(_keys) == {"theirs", "later"}
    finally:
        other.close()
        await db.close()


def test_begin_immediate_raises_other_errors_at_once(tmp_path) -> None:
    conn = sqlite3.connect(tmp_path / "x.db", isolation_level=None)
    try:
        conn.execute("BEGIN")
        # Not a lock held elsewhere: no waiting, SQLite's error as it came.
        with pytest.raises(sqlite3.OperationalError, match="within a transaction"):
            begin_immediate(conn, patience_seconds=60)
    finally:
        conn.close()


class _RefusingConnection:
    """A connection whose BEGIN IMMEDIATE is refused ``refusals`` times with ``code``."""

    def __init__(self, refusals: int, code: int) -> None:
        self.refusals = refusals
        self.code = code
        self.begun = 0

    def execute(self, statement: str) -> None:
        assert statement == "BEGIN IMMEDIATE"
        if self.refusals:
            self.refusals -= 1
            error = sqlite3.OperationalError("database is locked")
            error.sqlite_errorcode = self.code  # type: ignore[attr-defined]
            raise error
        self.begun += 1


class _FakeTime:
    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def fake_time(monkeypatch: pytest.MonkeyPatch) -> _FakeTime:
    from ferryman.adapters.sqlite import writer

    fake = _FakeTime()
    monkeypatch.setattr(writer.time, "monotonic", fake.monotonic)
    monkeypatch.setattr(writer.time, "sleep", fake.sleep)
    return fake


# SQLITE_BUSY, SQLITE_BUSY_RECOVERY, SQLITE_BUSY_SNAPSHOT: all mean "try again".
@pytest.mark.parametrize("code", [5, 261, 517])
def test_a_refused_begin_is_retried_in_steps_from_200_microseconds_to_2_ms(
    fake_time: _FakeTime, code: int
) -> None:
    conn = _RefusingConnection(refusals=8, code=code)
    begin_immediate(conn, patience_seconds=10)  # type: ignore[arg-type]
    assert conn.begun == 1
    assert fake_time.slept == pytest.approx(
        [0.0002, 0.0004, 0.0008, 0.0016, 0.002, 0.002, 0.002, 0.002]
    )


def test_a_lock_never_freed_raises_at_the_deadline(fake_time: _FakeTime) -> None:
    conn = _RefusingConnection(refusals=10**9, code=5)
    with pytest.raises(sqlite3.OperationalError, match="database is locked"):
        begin_immediate(conn, patience_seconds=0.5)  # type: ignore[arg-type]
    assert conn.begun == 0
    # Never waits past the deadline, and gives up when it is reached.
    assert sum(fake_time.slept) == pytest.approx(0.5)
    assert max(fake_time.slept) <= 0.002


def test_an_error_without_a_code_is_not_taken_for_a_lock(fake_time: _FakeTime) -> None:
    class Uncoded:
        def execute(self, statement: str) -> None:
            raise sqlite3.OperationalError("raised by the module, not by SQLite")

    with pytest.raises(sqlite3.OperationalError, match="not by SQLite"):
        begin_immediate(Uncoded(), patience_seconds=10)  # type: ignore[arg-type]
    assert fake_time.slept == []


async def test_a_database_opens_while_another_connection_holds_the_lock_briefly(
    db_path,
) -> None:
    first = await SqliteDatabase.open(db_path)
    await first.close()
    other = _other_process_holds_the_write_lock(db_path)
    try:
        # The migration's transaction waits for the lock, then opens as usual.
        opening = asyncio.ensure_future(SqliteDatabase.open(db_path))
        await asyncio.sleep(0.05)
        assert not opening.done()
        other.execute("COMMIT")
        db = await opening
        await db.close()
    finally:
        other.close()
