"""FileResultStore: results appended to segment files, durable and read back before put
returns, and verified on every read (whose record, whole, checksum)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import stat
import threading

import pytest

from ferryman.adapters.files import FileResultStore
from ferryman.core.errors import ResultsUnavailableError, ResultUnreadableError
from ferryman.core.results import checksum, result_key

REF = re.compile(r"^file:[0-9A-Z]{26}\.results@\d+\+\d+;sha256=[0-9a-f]{64}$")
KEY_A = result_key("t1", "gen_01AAAAAAAAAAAAAAAAAAAAAAAA", "att_01AAAAAAAAAAAAAAAAAAAAAAAA")
KEY_B = result_key("t2", "gen_01BBBBBBBBBBBBBBBBBBBBBBBB", "att_01BBBBBBBBBBBBBBBBBBBBBBBB")


def key(n: int, tenant: str = "t1") -> str:
    return result_key(tenant, f"gen_{n:026d}", f"att_{n:026d}")


@pytest.fixture
def store_factory(tmp_path):
    stores: list[FileResultStore] = []

    def make(**options) -> FileResultStore:
        options.setdefault("reclaim_min_age_seconds", 0.0)
        store = FileResultStore(tmp_path / "results", **options)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close()


def _segments(tmp_path) -> list[str]:
    return sorted(p.name for p in (tmp_path / "results").iterdir())


def _only_segment(tmp_path):
    [segment] = _segments(tmp_path)
    return tmp_path / "results" / segment


# --- writing ---------------------------------------------------------------------


async def test_round_trip_and_the_segment_reads_as_text(tmp_path, store_factory) -> None:
    store = store_factory()
    ref = await store.put(KEY_A, b'{"text": "hi"}')
    assert REF.match(ref), ref
    assert await store.get(ref, key=KEY_A) == b'{"text": "hi"}'
    header, body = _only_segment(tmp_path).read_bytes().splitlines()
    assert json.loads(header) == {
        "key": KEY_A,
        "length": 14,
        "sha256": checksum(b'{"text": "hi"}'),
    }
    assert body == b'{"text": "hi"}'


async def test_each_put_has_its_own_ref_and_a_new_store_never_appends_to_an_old_segment(
    tmp_path, store_factory
) -> None:
    first = store_factory()
    a = await first.put(key(1), b"first")
    b = await first.put(key(2), b"second")
    first.close()
    second = store_factory()
    c = await second.put(key(3), b"third")
    assert len({a, b, c}) == 3
    assert len(_segments(tmp_path)) == 2
    got = [await second.get(r, key=key(n)) for n, r in ((1, a), (2, b), (3, c))]
    assert got == [b"first", b"second", b"third"]


@pytest.mark.parametrize(
    "key_",
    ["../escape", "a/../../escape", "/etc/passwd", "", "a//b", "./a", "a/..", "a\\b", "a\nb"],
)
async def test_unsafe_keys_are_refused(store_factory, key_) -> None:
    store = store_factory()
    with pytest.raises(ValueError, match="key"):
        await store.put(key_, b"x")


async def test_a_key_too_long_for_a_record_header_is_refused(store_factory) -> None:
    store = store_factory()
    with pytest.raises(ValueError, match="too long"):
        await store.put("t/" + "k" * 5000, b"x")


async def test_a_put_is_synced_before_it_returns(tmp_path, store_factory, monkeypatch) -> None:
    calls: list[str] = []
    real_fdatasync, real_fsync = os.fdatasync, os.fsync
    monkeypatch.setattr(os, "fdatasync", lambda fd: (calls.append("data"), real_fdatasync(fd)))
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append("dir"), real_fsync(fd)))
    store = store_factory()
    await store.put(key(1), b"x")
    # New directory (entry synced in its parent), the new segment's name, then its data.
    assert calls == ["dir", "dir", "data"]
    calls.clear()
    await store.put(key(2), b"y")
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
    await store.put(key(999), b"w")
    monkeypatch.setattr(os, "fdatasync", slow_fdatasync)
    refs = await asyncio.gather(*(store.put(key(i), str(i).encode()) for i in range(40)))
    assert [await store.get(ref, key=key(i)) for i, ref in enumerate(refs)] == [
        str(i).encode() for i in range(40)
    ]
    assert 1 <= len(syncs) < 40


async def test_a_failed_sync_fails_the_put_as_unavailable_and_abandons_the_segment(
    tmp_path, store_factory, monkeypatch
) -> None:
    store = store_factory()
    kept = await store.put(key(1), b"kept")

    def broken(fd: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr(os, "fdatasync", broken)
        with pytest.raises(ResultsUnavailableError, match="Input/output") as failure:
            await store.put(key(2), b"x")
    assert "x" not in str(failure.value).split(":")[-1]  # the reason, never the data
    after = await store.put(key(3), b"fine")
    # What reached a failed segment is unknown: later puts go to a new one. The
    # segment opened for the retry held nothing anyone refers to, so it is gone.
    assert len(_segments(tmp_path)) == 2
    assert await store.get(kept, key=key(1)) == b"kept"
    assert await store.get(after, key=key(3)) == b"fine"


async def test_a_disk_that_keeps_failing_does_not_fill_up_with_empty_segments(
    tmp_path, store_factory, monkeypatch
) -> None:
    store = store_factory()

    def full(fd: int, data: bytes) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    for i in range(20):
        with pytest.raises(ResultsUnavailableError, match="No space"):
            await store.put(key(i), b"x")
    assert _segments(tmp_path) == []


async def test_segments_roll_over_at_their_size(tmp_path, store_factory) -> None:
    store = store_factory(segment_bytes=300)
    refs = [await store.put(key(i), b"x" * 60) for i in range(4)]
    # A segment takes records until it reaches its size, then the next one starts.
    assert len(_segments(tmp_path)) == 2
    assert [await store.get(r, key=key(i)) for i, r in enumerate(refs)] == [b"x" * 60] * 4


async def test_a_torn_tail_from_a_crash_harms_nothing(tmp_path, store_factory) -> None:
    first = store_factory()
    ref = await first.put(key(1), b"complete")
    first.close()
    _append(_only_segment(tmp_path), b'{"key": "t1/gen_torn", "len')  # a crash mid-record
    second = store_factory()
    assert await second.get(ref, key=key(1)) == b"complete"
    new = await second.put(key(2), b"later")
    assert await second.get(new, key=key(2)) == b"later"


async def test_segments_and_directories_are_the_owners_only(tmp_path, store_factory) -> None:
    old_umask = os.umask(0o022)
    try:
        store = FileResultStore(tmp_path / "deep" / "results")
        try:
            await store.put(key(1), b"x")
        finally:
            store.close()
    finally:
        os.umask(old_umask)
    for directory in (tmp_path / "deep", tmp_path / "deep" / "results"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory
    [segment] = (tmp_path / "deep" / "results").iterdir()
    assert stat.S_IMODE(segment.stat().st_mode) == 0o600


# --- a damaged segment never serves another job's result --------------------------


async def test_a_ref_read_for_another_key_is_unreadable(store_factory) -> None:
    store = store_factory()
    ref = await store.put(KEY_A, b'{"secret": "of t1"}')
    with pytest.raises(ResultUnreadableError) as failure:
        await store.get(ref, key=KEY_B)
    assert "t1" not in failure.value.message  # never says whose record it found
    assert "secret" not in failure.value.message


async def test_refs_that_name_nothing_are_unreadable(tmp_path, store_factory) -> None:
    store = store_factory()
    ref = await store.put(KEY_A, b"data")
    segment = ref.removeprefix("file:").split("@")[0]
    digest = ref.split("sha256=")[1]
    for bad in (
        "db:not-a-file-ref",
        "file:nothing/here",
        "file:../escape.results@0+1",
        f"file:{'0' * 26}.results@0+4;sha256={digest}",  # no such segment
        f"file:{segment}@100000+4;sha256={digest}",  # past the end
        f"file:{segment}@1+4;sha256={digest}",  # not where a record starts
    ):
        with pytest.raises(ResultUnreadableError):
            await store.get(bad, key=KEY_A)


async def test_after_the_active_segment_is_truncated_later_puts_read_back_as_their_own(
    tmp_path, store_factory
) -> None:
    store = store_factory()
    early = [await store.put(key(i), f'{{"n": {i}}}'.encode()) for i in range(5)]
    os.truncate(_only_segment(tmp_path), 0)
    later = [await store.put(key(i), f'{{"n": {i}}}'.encode()) for i in range(5, 45)]

    for i, ref in enumerate(later, start=5):
        assert await store.get(ref, key=key(i)) == f'{{"n": {i}}}'.encode()
    for i, ref in enumerate(early):
        with pytest.raises(ResultUnreadableError):
            await store.get(ref, key=key(i))


async def test_a_segment_cut_short_mid_record_is_unreadable_there(tmp_path, store_factory) -> None:
    store = store_factory()
    whole = await store.put(key(1), b'{"a": 1}')
    cut = await store.put(key(2), b'{"b": "' + b"x" * 100 + b'"}')
    path = _only_segment(tmp_path)
    os.truncate(path, path.stat().st_size - 10)
    assert await store.get(whole, key=key(1)) == b'{"a": 1}'
    with pytest.raises(ResultUnreadableError, match="cut short"):
        await store.get(cut, key=key(2))


async def test_bytes_changed_in_place_are_unreadable(tmp_path, store_factory) -> None:
    store = store_factory()
    ref = await store.put(KEY_A, b'{"text": "hello"}')
    path = _only_segment(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"hello", b"HELLO"))
    with pytest.raises(ResultUnreadableError, match="checksum"):
        await store.get(ref, key=KEY_A)


async def test_a_consistent_rewrite_of_header_and_data_is_still_caught(
    tmp_path, store_factory
) -> None:
    store = store_factory()
    ref = await store.put(KEY_A, b'{"text": "hello"}')
    path = _only_segment(tmp_path)
    forged = b'{"text": "HELLO"}'
    header = json.dumps({"key": KEY_A, "length": len(forged), "sha256": checksum(forged)})
    path.write_bytes(header.encode() + b"\n" + forged + b"\n")
    # The header agrees with the bytes, but the job's ref carries the true checksum.
    with pytest.raises(ResultUnreadableError):
        await store.get(ref, key=KEY_A)


async def test_after_the_active_segment_is_deleted_new_puts_go_to_a_new_readable_segment(
    tmp_path, store_factory
) -> None:
    store = store_factory()
    before = await store.put(key(1), b"one")
    _only_segment(tmp_path).unlink()
    after = await store.put(key(2), b"two")
    assert await store.get(after, key=key(2)) == b"two"
    with pytest.raises(ResultUnreadableError, match="missing"):
        await store.get(before, key=key(1))


async def test_damage_during_a_write_is_caught_by_the_read_back_and_written_again(
    tmp_path, store_factory, monkeypatch
) -> None:
    store = store_factory()
    await store.put(key(1), b"first")
    real = os.fdatasync
    sabotaged: list[int] = []

    def truncate_after_sync(fd: int) -> None:
        real(fd)
        if not sabotaged:  # once: the segment is cut right after the sync
            sabotaged.append(fd)
            os.ftruncate(fd, 0)

    monkeypatch.setattr(os, "fdatasync", truncate_after_sync)
    ref = await store.put(key(2), b"second")
    assert sabotaged
    assert await store.get(ref, key=key(2)) == b"second"
    assert len(_segments(tmp_path)) == 2


# --- refs written before checksums -------------------------------------------------


def _legacy_segment(tmp_path, records: list[tuple[str, bytes]]) -> tuple[str, list[str]]:
    """A segment as the old writer made it, and the old-style refs into it."""
    name = "01H00000000000000000000000.results"
    content, refs = b"", []
    for k, data in records:
        content += json.dumps({"key": k, "length": len(data)}).encode() + b"\n"
        refs.append(f"file:{name}@{len(content)}+{len(data)}")
        content += data + b"\n"
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / name).write_bytes(content)
    return name, refs


async def test_old_refs_stay_readable_and_are_checked_for_their_key(
    tmp_path, store_factory
) -> None:
    _, (a, b) = _legacy_segment(tmp_path, [(KEY_A, b'{"a": 1}'), (KEY_B, b'{"b": 2}')])
    store = store_factory()
    assert await store.get(a, key=KEY_A) == b'{"a": 1}'
    assert await store.get(b, key=KEY_B) == b'{"b": 2}'
    with pytest.raises(ResultUnreadableError):
        await store.get(b, key=KEY_A)


async def test_an_old_ref_into_a_rewritten_segment_never_serves_another_record(
    tmp_path, store_factory
) -> None:
    _, (a, _) = _legacy_segment(tmp_path, [(KEY_A, b'{"a": 1}'), (KEY_B, b'{"b": 2}')])
    # The segment is replaced by other records: the offset now lands elsewhere.
    _legacy_segment(tmp_path, [(KEY_B, b'{"bb": 22}'), (KEY_A, b"{}")])
    store = store_factory()
    with pytest.raises(ResultUnreadableError):
        await store.get(a, key=KEY_A)


# --- probe -------------------------------------------------------------------------


async def test_probe_passes_on_a_writable_directory_and_leaves_nothing(
    tmp_path, store_factory
) -> None:
    store = store_factory()
    await store.put(key(1), b"x")
    before = _segments(tmp_path)
    await store.probe()
    assert _segments(tmp_path) == before


async def test_probe_never_creates_the_directory(tmp_path, store_factory) -> None:
    store = store_factory()
    await store.probe()  # a put could create it: healthy
    assert not (tmp_path / "results").exists()


async def test_probe_fails_when_a_put_could_not_succeed(tmp_path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    blocked = FileResultStore(tmp_path / "a-file" / "results")
    full = FileResultStore(tmp_path / "results", min_free_bytes=2**62)
    try:
        with pytest.raises(ResultsUnavailableError, match="not a directory"):
            await blocked.probe()
        with pytest.raises(ResultsUnavailableError, match="free"):
            await full.probe()
    finally:
        blocked.close()
        full.close()


async def test_a_put_into_an_impossible_directory_is_unavailable(tmp_path) -> None:
    (tmp_path / "a-file").write_text("not a directory")
    store = FileResultStore(tmp_path / "a-file" / "results")
    try:
        with pytest.raises(ResultsUnavailableError):
            await store.put(key(1), b"x")
    finally:
        store.close()


# --- reclaim -----------------------------------------------------------------------


def _jobs_exist(alive: set[str], asked: list[list[str]] | None = None):
    async def any_job_exists(job_ids) -> bool:
        if asked is not None:
            asked.append(list(job_ids))
        return any(job_id in alive for job_id in job_ids)

    return any_job_exists


async def test_a_sealed_segment_whose_jobs_are_all_gone_is_deleted_whole(
    tmp_path, store_factory
) -> None:
    old = store_factory()
    gone = [await old.put(key(i), b"x" * 100) for i in range(3)]
    old.close()
    [sealed] = _segments(tmp_path)
    size = (tmp_path / "results" / sealed).stat().st_size
    current = store_factory()
    live = await current.put(key(7), b"live")

    reclaimed = await current.reclaim(any_job_exists=_jobs_exist(set()))

    assert reclaimed == size
    assert sealed not in _segments(tmp_path)
    assert await current.get(live, key=key(7)) == b"live"  # its own active segment stays
    with pytest.raises(ResultUnreadableError):
        await current.get(gone[0], key=key(0))


async def test_a_segment_with_one_live_job_is_kept(tmp_path, store_factory) -> None:
    old = store_factory()
    refs = [await old.put(key(i), b"x") for i in range(3)]
    old.close()
    current = store_factory()
    asked: list[list[str]] = []

    reclaimed = await current.reclaim(any_job_exists=_jobs_exist({f"gen_{1:026d}"}, asked))

    assert reclaimed == 0
    assert await current.get(refs[1], key=key(1)) == b"x"
    assert sorted(asked[0]) == [f"gen_{i:026d}" for i in range(3)]


async def test_another_live_process_s_active_segment_is_never_reclaimed(
    tmp_path, store_factory
) -> None:
    other = store_factory()  # stands for another process: it holds its shared lock
    ref = await other.put(key(1), b"in use")
    reclaimer = store_factory()

    assert await reclaimer.reclaim(any_job_exists=_jobs_exist(set())) == 0
    assert await other.get(ref, key=key(1)) == b"in use"


async def test_young_segments_and_records_of_unknown_owners_are_kept(
    tmp_path, store_factory
) -> None:
    young = FileResultStore(tmp_path / "results", reclaim_min_age_seconds=3600)
    try:
        await young.put(key(1), b"x")
    finally:
        young.close()
    stranger = store_factory()
    await stranger.put("not/a-result-key", b"x")
    stranger.close()
    reclaimer = FileResultStore(tmp_path / "results", reclaim_min_age_seconds=3600)
    try:
        assert await reclaimer.reclaim(any_job_exists=_jobs_exist(set())) == 0
    finally:
        reclaimer.close()
    any_age = store_factory()
    # Old enough now, but the stranger's owner cannot be told: only the other goes.
    assert await any_age.reclaim(any_job_exists=_jobs_exist(set())) > 0
    assert len(_segments(tmp_path)) == 1


def _append(path, data: bytes) -> None:
    with open(path, "ab") as handle:
        handle.write(data)


async def test_a_segment_whose_headers_cannot_all_be_read_is_kept(tmp_path, store_factory) -> None:
    (tmp_path / "results").mkdir()
    damaged_middle = b'{"key": "t1/gen_1.att_1.json", "le\n' + _record(key(2), b"x")
    oversized = b'{"key": "' + b"k" * 70_000 + b'", "length": 1}\nx\n' + _record(key(3), b"y")
    for n, content in enumerate((damaged_middle, oversized)):
        (tmp_path / "results" / f"01H0000000000000000000000{n}.results").write_bytes(content)
    store = store_factory()

    assert await store.reclaim(any_job_exists=_jobs_exist(set())) == 0
    assert len(_segments(tmp_path)) == 2


def _record(k: str, data: bytes) -> bytes:
    return json.dumps({"key": k, "length": len(data)}).encode() + b"\n" + data + b"\n"
