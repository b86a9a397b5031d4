from __future__ import annotations

import os
import re
import time
from types import SimpleNamespace

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
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


class _Bytes:
    """Stands for the module's random pool: hands out the given bytes, in order."""

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)

    def take(self, n: int) -> bytes:
        chunk = self._chunks.pop(0)
        assert len(chunk) == n
        return chunk


def _source_at(monkeypatch: pytest.MonkeyPatch, ms: int, *chunks: bytes) -> ids._UlidSource:
    """A new ULID source whose clock reads ``ms`` and whose random bytes are ``chunks``."""
    monkeypatch.setattr(ids, "time", SimpleNamespace(time_ns=lambda: ms * 1_000_000 + 999_999))
    monkeypatch.setattr(ids, "_RANDOM", _Bytes(*chunks))
    return ids._UlidSource()


@given(
    st.integers(min_value=0, max_value=(1 << 48) - 1),
    st.binary(min_size=10, max_size=10),
)
@example(0, bytes(10))  # the first milliseconds of the epoch are ones like any other
@example(1, b"\x01" * 10)
@example((1 << 48) - 1, b"\xff" * 10)
def test_an_id_is_the_ulid_of_its_millisecond_and_random_bits(ms: int, random: bytes) -> None:
    # Every millisecond a ULID can hold (to the year 10889), every random part.
    with pytest.MonkeyPatch.context() as monkeypatch:
        made = _source_at(monkeypatch, ms, random).new()
    assert made == str(ULID.from_bytes(ms.to_bytes(6, "big") + random))


def test_within_a_millisecond_each_id_is_the_last_plus_one(monkeypatch) -> None:
    source = _source_at(monkeypatch, 1_700_000_000_000, bytes(9) + b"\xfe")
    made = [ULID.from_str(source.new()) for _ in range(4)]
    assert [int(u) - int(made[0]) for u in made] == [0, 1, 2, 3]


def test_when_the_random_part_would_overflow_it_is_drawn_again(monkeypatch) -> None:
    # The last value of 80 bits cannot take one more: the next id in that millisecond
    # takes fresh random bits (as python-ulid does), and stays a well-formed ULID.
    ms, top = 1_700_000_000_000, b"\xff" * 10
    source = _source_at(monkeypatch, ms, top, bytes(10))
    assert source.new() == str(ULID.from_bytes(ms.to_bytes(6, "big") + top))
    assert source.new() == str(ULID.from_bytes(ms.to_bytes(6, "big") + bytes(10)))


def test_a_new_source_makes_ids_from_its_first_call() -> None:
    # As a forked child's does after _reset: nothing left over from an earlier id.
    first = ids._UlidSource().new()
    assert str(ULID.from_str(first)) == first
    assert abs(ULID.from_str(first).timestamp - time.time()) < 5


def test_a_pool_hands_out_the_systems_random_bytes_each_once(monkeypatch) -> None:
    drawn = bytes(range(256)) * 32
    reads: list[int] = []

    def urandom(n: int) -> bytes:
        reads.append(n)
        return drawn[len(reads) - 1 :][:n]  # each read its own bytes

    monkeypatch.setattr(ids.os, "urandom", urandom)
    pool = ids._RandomBytes()
    assert [pool.take(1) for _ in range(5)] == [drawn[i : i + 1] for i in range(5)]
    assert pool.take(12) == drawn[5:17]
    assert pool.take(4096 - 17) == drawn[17:4096]  # to the last byte of the first read
    assert reads == [4096]  # one read served them all
    assert pool.take(3) == drawn[1:4]  # the second read's first bytes
    assert reads == [4096, 4096]
    # More than a read's worth at once: one read of that size.
    assert ids._RandomBytes().take(5000) == drawn[2:5002]
    assert reads == [4096, 4096, 5000]
