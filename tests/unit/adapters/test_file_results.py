"""FileResultStore: durable, atomic files under one root, never outside it."""

from __future__ import annotations

import os

import pytest

from ferryman.adapters.files import FileResultStore


async def test_round_trip_with_nested_keys(tmp_path) -> None:
    store = FileResultStore(tmp_path / "results")
    ref = await store.put("t1/gen_1/att_1.json", b'{"text": "hi"}')
    assert ref == "file:t1/gen_1/att_1.json"
    assert await store.get(ref) == b'{"text": "hi"}'
    assert (tmp_path / "results" / "t1" / "gen_1" / "att_1.json").read_bytes() == b'{"text": "hi"}'


async def test_a_put_replaces_whole_and_leaves_no_temporary_files(tmp_path) -> None:
    store = FileResultStore(tmp_path)
    await store.put("k", b"first")
    ref = await store.put("k", b"second")
    assert await store.get(ref) == b"second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]


async def test_missing_results_raise_key_error(tmp_path) -> None:
    store = FileResultStore(tmp_path)
    with pytest.raises(KeyError):
        await store.get("file:nothing/here")
    with pytest.raises(KeyError):
        await store.get("db:not-a-file-ref")


@pytest.mark.parametrize(
    "key", ["../escape", "a/../../escape", "/etc/passwd", "", "a//b", "./a", "a/..", "a\\..\\b"]
)
async def test_keys_that_could_leave_the_root_are_refused(tmp_path, key) -> None:
    store = FileResultStore(tmp_path / "root")
    with pytest.raises(ValueError, match="key"):
        await store.put(key, b"x")
    with pytest.raises(ValueError, match="key"):
        await store.get("file:" + key)
    assert not (tmp_path / "escape").exists()


async def test_a_put_is_fsynced_before_it_returns(tmp_path, monkeypatch) -> None:
    synced: list[int] = []
    real_fsync = os.fsync

    def counting_fsync(fd: int) -> None:
        synced.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", counting_fsync)
    store = FileResultStore(tmp_path)
    await store.put("existing-dir-key", b"x")
    # The file's data, then the directory holding the new name.
    assert len(synced) == 2
    synced.clear()
    await store.put("new/dirs/key", b"y")
    # Two new directories (each entry synced in its parent), the file, its directory.
    assert len(synced) == 4
