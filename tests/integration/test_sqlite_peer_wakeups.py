"""Wake-ups between processes sharing one SQLite file (adapters/sqlite/peers.py): new
messages and cancel requests, two kinds of byte over one socket per process.

Two SqliteDatabase objects over one file stand for two processes: each has its own
in-process Wakeup, so only the socket directory beside the file connects them.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from ferryman.adapters.sqlite import SqliteDatabase, SqliteJobQueue
from ferryman.adapters.sqlite.peers import (
    CANCELS,
    MAX_SOCKET_PATH_BYTES,
    PeerWakeups,
    directory_for,
)
from ferryman.adapters.wakeup import Wakeup
from ferryman.core.clock import SystemClock
from ferryman.core.ids import new_job_id
from ferryman.ports.queue import QueueMessage

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

# Far longer than any wait below: a receive that returns in time was woken, not polled.
POLL_SECONDS = 30.0


@pytest.fixture
def short_dir() -> Iterator[Path]:
    # pytest's tmp_path can be longer than a unix socket path may be.
    path = Path(tempfile.mkdtemp(prefix="fm-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
async def two_processes(short_dir: Path) -> AsyncIterator[tuple[SqliteDatabase, SqliteDatabase]]:
    first = await SqliteDatabase.open(short_dir / "f.db")
    second = await SqliteDatabase.open(short_dir / "f.db")
    yield first, second
    await first.close()
    await second.close()


def _queue(db: SqliteDatabase) -> SqliteJobQueue:
    return SqliteJobQueue(db, clock=SystemClock(), poll_interval_seconds=POLL_SECONDS)


async def _receive(queue: SqliteJobQueue, wait_seconds: float) -> int:
    got = await queue.receive(
        max_messages=1, visibility_timeout_seconds=30, wait_seconds=wait_seconds
    )
    return len(got)


async def test_a_send_in_one_process_wakes_a_receive_waiting_in_another(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    api, worker = two_processes
    waiting = asyncio.create_task(_receive(_queue(worker), wait_seconds=POLL_SECONDS))
    await asyncio.sleep(0.2)  # the receive found nothing and listens
    began = time.monotonic()

    await _queue(api).send(QueueMessage(job_id=new_job_id(), tenant_id="t1"))
    received = await asyncio.wait_for(waiting, timeout=10)

    assert received == 1
    assert time.monotonic() - began < 5  # woken, not left to its 30 s poll
    assert api.wakeup._peers is not None
    assert api.wakeup._peers.sent >= 1


async def test_a_dead_peers_socket_is_removed_and_the_send_still_succeeds(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    api, worker = two_processes
    directory = directory_for(api.path)
    directory.mkdir(exist_ok=True)
    dead = directory / "999999-dead.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    leftover.bind(str(dead))
    leftover.close()  # a peer killed with kill -9 leaves its file behind
    waiting = asyncio.create_task(_receive(_queue(worker), wait_seconds=POLL_SECONDS))
    await asyncio.sleep(0.2)

    await _queue(api).send(QueueMessage(job_id=new_job_id(), tenant_id="t1"))

    assert await asyncio.wait_for(waiting, timeout=10) == 1
    assert not dead.exists()


async def test_without_a_usable_socket_path_the_poll_still_finds_the_work(
    short_dir: Path,
) -> None:
    deep = short_dir / ("d" * (MAX_SOCKET_PATH_BYTES - len(str(short_dir))))
    deep.mkdir()
    api = await SqliteDatabase.open(deep / "f.db")
    worker = await SqliteDatabase.open(deep / "f.db")
    try:
        polled = SqliteJobQueue(worker, clock=SystemClock(), poll_interval_seconds=0.05)
        waiting = asyncio.create_task(_receive(polled, wait_seconds=POLL_SECONDS))
        await asyncio.sleep(0.2)
        await _queue(api).send(QueueMessage(job_id=new_job_id(), tenant_id="t1"))

        assert await asyncio.wait_for(waiting, timeout=10) == 1
        assert worker.wakeup._peers is not None
        assert worker.wakeup._peers.off_reason is not None
    finally:
        await api.close()
        await worker.close()


async def test_closing_removes_this_processes_socket(short_dir: Path) -> None:
    db = await SqliteDatabase.open(short_dir / "f.db")
    await _receive(_queue(db), wait_seconds=0.5)  # waits once: listens
    directory = directory_for(db.path)
    assert [p.suffix for p in directory.iterdir()] == [".sock"]

    await db.close()

    assert list(directory.iterdir()) == []


async def _generation_moves(wakeup: Wakeup) -> None:
    since = wakeup.generation
    await wakeup.wait(since=since, timeout_seconds=POLL_SECONDS)
    assert wakeup.generation != since


async def test_a_cancel_hint_wakes_the_other_processes_cancel_watch_and_not_its_receive(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    api, worker = two_processes
    receiving = asyncio.create_task(_receive(_queue(worker), wait_seconds=POLL_SECONDS))
    watching = asyncio.create_task(_generation_moves(worker.cancel_wakeup))
    await asyncio.sleep(0.2)  # both listen, on the process's one socket
    messages_seen = worker.wakeup.generation

    api.cancel_wakeup.notify()

    await asyncio.wait_for(watching, timeout=10)  # woken, not left to its 30 s timeout
    assert worker.wakeup.generation == messages_seen
    assert not receiving.done()
    receiving.cancel()
    assert [p.suffix for p in directory_for(api.path).iterdir()] == [".sock"]


async def test_a_message_hint_leaves_the_other_processes_cancel_watch_asleep(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    api, worker = two_processes
    receiving = asyncio.create_task(_receive(_queue(worker), wait_seconds=POLL_SECONDS))
    watching = asyncio.create_task(_generation_moves(worker.cancel_wakeup))
    await asyncio.sleep(0.2)
    cancels_seen = worker.cancel_wakeup.generation

    await _queue(api).send(QueueMessage(job_id=new_job_id(), tenant_id="t1"))

    assert await asyncio.wait_for(receiving, timeout=10) == 1
    assert worker.cancel_wakeup.generation == cancels_seen
    watching.cancel()


async def test_a_byte_of_an_unknown_kind_wakes_nothing(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    _, worker = two_processes
    watching = asyncio.create_task(_generation_moves(worker.cancel_wakeup))
    receiving = asyncio.create_task(_receive(_queue(worker), wait_seconds=POLL_SECONDS))
    await asyncio.sleep(0.2)
    seen = (worker.wakeup.generation, worker.cancel_wakeup.generation)
    [own] = directory_for(worker.path).iterdir()

    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sender:
        sender.sendto(b"\x7f", str(own))  # a later version's kind
        sender.sendto(b"\x02", str(own))  # then a cancel hint

    await asyncio.wait_for(watching, timeout=10)
    assert (worker.wakeup.generation, worker.cancel_wakeup.generation) == (seen[0], seen[1] + 1)
    receiving.cancel()


async def test_a_peer_that_starts_listening_after_a_listing_hears_the_next_hint_at_once(
    short_dir: Path,
) -> None:
    # The sender's periodic re-listing is pushed out of reach: only the directory's
    # change can make it see the new peer. (A worker that starts after the api's last
    # send, claims a job and is cancelled at once used to miss that cancel.)
    directory = short_dir / "f.db-wake"
    sender = PeerWakeups(directory, refresh_seconds=3600)
    listener = PeerWakeups(directory, refresh_seconds=3600)
    woken = asyncio.Event()
    try:
        assert sender.broadcast(kind=CANCELS) == 0  # nobody listens yet; listed now
        assert listener.listen(woken.set, kind=CANCELS)

        assert sender.broadcast(kind=CANCELS) == 1
        await asyncio.wait_for(woken.wait(), timeout=10)
    finally:
        sender.close()
        listener.close()


async def test_status_nudges_of_one_loop_turn_cost_one_byte_per_peer(
    two_processes: tuple[SqliteDatabase, SqliteDatabase],
) -> None:
    worker, api = two_processes
    heard = asyncio.Event()
    # The API's watcher listens (its first wait binds the socket).
    waiting = asyncio.create_task(
        api.status_wakeup.wait(since=api.status_wakeup.generation, timeout_seconds=POLL_SECONDS)
    )
    waiting.add_done_callback(lambda _: heard.set())
    await asyncio.sleep(0)
    for _ in range(100):  # a worker ending a hundred jobs in one turn of its loop
        worker.status_wakeup.notify()
    channel = worker.status_wakeup._peers
    assert channel is not None
    assert channel.sent == 0  # not yet: at the end of this turn

    await asyncio.wait_for(heard.wait(), timeout=POLL_SECONDS)
    assert channel.sent == 1
