"""FileResultStore: results appended to segment files, durable before put returns."""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading

import pytest

from ferryman.adapters.files import FileResultStore

REF = re.compile(r"^file:[0-9A-Z]{26}\.results@\d+\+\d+$")


@pytest.fixture
def store_factory(tmp_path):
    stores: list[FileResultStore] = []

    def make(**options) -> FileResultStore:
        store = FileResultStore(tmp_path / "results", **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _segments(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "results").iterdir())


async def test_round_trip_and_the_segment_reads_as_text(tmp_path, store_factory) -> None:
    store = store_factory()
    ref = await store.put("t1/gen_1.att_1.json", b'{"text": "hi"}')
    assert REF.match(ref), ref
    assert await store.get(ref) == b'{"text": "hi"}'
    [segment] = _segments(tmp_path)
    header, body = (tmp_path / "results" / segment).read_bytes().splitlines()
    assert json.loads(header) == {"key": "t1/gen_1.att_1.json", "length": 14}
    assert body == b'{"text": "hi"}'


async def test_each_put_has_its_own_ref_and_a_new_store_never_appends_to_an_old_segment(
    tmp_path, store_factory
) -> None:
    first = store_factory()
    a = await first.put("k/a", b"first")
    b = await first.put("k/b", b"second")
    first.close()
    second = store_factory()
    c = await second.put("k/c", b"third")
    assert len({a, b, c}) == 3
    assert len(_segments(tmp_path)) == 2
    assert [await second.get(r) for r in (a, b, c)] == [b"first", b"second", b"third"]


async def test_refs_that_name_nothing_raise_key_error(tmp_path, store_factory) -> None:
    store = store_factory()
    ref = await store.put("k", b"data")
    segment = ref.removeprefix("file:").split("@")[0]
    for bad in (
        "db:not-a-file-ref",
        "file:nothing/here",
        "file:../escape.results@0+1",
        f"file:{'0' * 26}.results@0+4",  # no such segment
        f"file:{segment}@100000+4",  # past the end
    ):
        with pytest.raises(KeyError):
            await store.get(bad)


@pytest.mark.parametrize(
    "key", ["../escape", "a/../../escape", "/etc/passwd", "", "a//b", "./a", "a/..", "a\\b", "a\nb"]
)
async def test_unsafe_keys_are_refused(store_factory, key) -> None:
    store = store_factory()
    with pytest.raises(ValueError, match="key"):
        await store.put(key, b"x")


async def test_a_put_is_synced_before_it_returns(tmp_path, store_factory, monkeypatch) -> None:
    calls: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append("data"), real_fdatasync(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("dir"), real_fsync(fd)))
    store = store_factory()
    await store.put("k/1", b"x")
    # New directory (entry synced in its parent), the new segment's name, then its data.
    assert calls == ["dir", "dir", "data"]
    calls.clear()
    await store.put("k/2", b"y")
    assert calls == ["data"]


async def test_concurrent_puts_share_one_sync(store_factory, monkeypatch) -> None:
    syncs: list[int] = []
    lock = threading.Lock()
    real = os.fdatasync

    def slow_fdatasync(fd: int) -> None:
        import time

        time.sleep(0.02)  # a slow disk, so puts pile up behind one sync
        with lock:
            syncs.append(fd)
        real(fd)

    store = store_factory()
    await store.put("warm", b"w")
    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    refs = await asyncio.gather(*(store.put(f"t1/job{i}", str(i).encode()) for i in range(40)))
    assert [await store.get(ref) for ref in refs] == [str(i).encode() for i in range(40)]
    assert 1 <= len(syncs) < 40


async def test_a_failed_sync_fails_the_put_and_abandons_the_segment(
    tmp_path, store_factory, monkeypatch
) -> None:
    store = store_factory()
    kept = await store.put("k/before", b"kept")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", broken)
        with pytest.raises(OSError, match="Input/output"):
            await store.put("k/lost", b"x")
    after = await store.put("k/after", b"fine")
    # What reached the failed segment is unknown: later puts go to a new one.
    assert len(_segments(tmp_path)) == 2
    assert await store.get(kept) == b"kept"
    assert await store.get(after) == b"fine"


async def test_segments_roll_over_at_their_size(tmp_path, store_factory) -> None:
    store = store_factory(segment_bytes=100)
    refs = [await store.put(f"k/{i}", b"x" * 60) for i in range(4)]
    # A segment takes records until it reaches its size, then the next one starts.
    assert len(_segments(tmp_path)) == 2
    assert [await store.get(r) for r in refs] == [b"x" * 60] * 4


async def test_a_torn_tail_from_a_crash_harms_nothing(tmp_path, store_factory) -> None:
    first = store_factory()
    ref = await first.put("k/ok", b"complete")
    first.close()
    [segment] = _segments(tmp_path)
    _append(tmp_path / "results" / segment, b'{"key": "k/torn", "len')  # a crash mid-record
    second = store_factory()
    assert await second.get(ref) == b"complete"
    new = await second.put("k/new", b"later")
    assert await second.get(new) == b"later"


def _append(path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)
