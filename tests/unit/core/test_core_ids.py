from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace

import pytest
from ulid import ULID

from ferryman.core import ids
from ferryman.core.ids import new_attempt_id, new_correlation_id, new_job_id, new_worker_id


def test_prefixes_say_what_an_id_names() -> None:
    assert re.fullmatch(r"gen_[0-9A-HJKMNP-TV-Z]{26}", new_job_id())
    assert re.fullmatch(r"att_[0-9A-HJKMNP-TV-Z]{26}", new_attempt_id())
    assert re.fullmatch(r"cor_[0-9a-f]{24}", new_correlation_id())
    assert re.fullmatch(r"host-1:4242:[0-9a-f]{6}", new_worker_id("host-1", 4242))


def test_ids_are_unique() -> None:
    for make in (new_job_id, new_attempt_id, new_correlation_id):
        ids = [make() for _ in range(5_000)]
        assert len(set(ids)) == len(ids)
    assert new_worker_id("h", 1) != new_worker_id("h", 1)


def test_job_ids_sort_in_creation_order() -> None:
    # Within one millisecond too: the ULID generator is monotonic.
    ids = [new_job_id() for _ in range(5_000)]
    assert ids == sorted(ids)


def test_job_ids_carry_their_creation_time() -> None:
    ulid = ULID.from_str(new_job_id().removeprefix("gen_"))
    assert abs(ulid.timestamp - time.time()) < 5


def test_ids_are_ulids_as_the_ulid_library_writes_them() -> None:
    for made in (new_job_id(), new_attempt_id()):
        text = made[4:]
        assert str(ULID.from_str(text)) == text
        assert abs(ULID.from_str(text).timestamp - time.time()) < 5


def test_attempt_ids_sort_in_creation_order() -> None:
    ids = [new_attempt_id() for _ in range(5_000)]
    assert ids == sorted(ids)


def test_every_digit_of_the_random_part_is_used() -> None:
    # 80 random bits in 16 digits: over many new milliseconds, each digit takes many values.
    seen: list[set[str]] = [set() for _ in range(16)]
    for _ in range(200):
        time.sleep(0.0011)
        for i, digit in enumerate(new_attempt_id()[-16:]):
            seen[i].add(digit)
    assert all(len(digits) > 8 for digits in seen)


def test_a_forked_child_does_not_go_on_from_its_parents_last_id(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One millisecond for parent and child: each would make its last id plus one, and
    # take the same next random bytes.
    monkeypatch.setattr(ids, "time", SimpleNamespace(time_ns=lambda: 1_700_000_000_000_000_000))
    read, write = os.pipe()
    new_attempt_id()
    new_correlation_id()
    pid = os.fork()
    if pid == 0:  # the child: its next ids within the same millisecond, then exit
        os.write(write, f"{new_correlation_id()} {new_attempt_id()}".encode())
        os._exit(0)
    parents = [new_correlation_id(), new_attempt_id()]
    os.waitpid(pid, 0)
    childs = os.read(read, 128).decode().split()
    os.close(read)
    os.close(write)
    assert len(childs) == 2
    assert all(child != parent for child, parent in zip(childs, parents, strict=True))


def test_correlation_ids_are_random_hex_however_many_are_made() -> None:
    made = [new_correlation_id() for _ in range(3 * 4096 // 12)]  # past a few reads
    assert all(re.fullmatch(r"cor_[0-9a-f]{24}", c) for c in made)
    assert len(set(made)) == len(made)


def test_a_forked_child_makes_ids_though_a_parent_thread_held_the_locks() -> None:
    import select
    import signal

    read, write = os.pipe()
    # As if another thread of the parent were inside new_*_id() at the moment of fork.
    with ids._RANDOM._lock, ids._ULIDS._lock:
        pid = os.fork()
        if pid == 0:  # the child: the held locks belong to a thread it does not have
            os.write(write, f"{new_correlation_id()} {new_attempt_id()}".encode())
            os._exit(0)
    try:
        ready, _, _ = select.select([read], [], [], 5)
        assert ready, "the child hung on a lock its parent held at fork"
        assert len(os.read(read, 128).decode().split()) == 2
    finally:
        if not ready:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        os.close(write)
