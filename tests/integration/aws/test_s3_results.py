"""S3ResultStore (FERRYMAN_RESULTS_URL=s3://BUCKET/PREFIX) against the emulator.

Each test has a bucket of its own. What moto does not show: it never verifies a
ChecksumSHA256 sent with a put against the bytes (AWS does, and refuses the put), so
a body damaged in transit cannot be shown here; the store's own checksum on read is
what these tests hold. Nor is its IfNoneMatch atomic (it looks, then writes, on a
threaded server), so two puts racing for one key are AWS's guarantee, not shown here;
a put that finds the key taken is.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import pytest

from ferryman.adapters.aws.clients import open_clients
from ferryman.adapters.aws.results_s3 import META_ATTEMPT_ID, META_JOB_ID, META_SHA256
from ferryman.core.clock import FakeClock
from ferryman.core.errors import (
    ResultsUnavailableError,
    ResultUnreadableError,
    StateConflictError,
)
from ferryman.core.results import checksum, result_key
from ferryman.engines import open_engine
from ferryman.result_stores import open_result_store

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Collection

    from ferryman.adapters.aws.clients import AwsClients
    from ferryman.ports.results import ResultStore

KEY = result_key("acme", "gen_01", "att_01")
OTHER_KEY = result_key("acme", "gen_02", "att_01")
PREFIX = "results/v1"


@pytest.fixture
async def clients(aws_env: dict[str, str]) -> AsyncIterator[AwsClients]:
    async with open_clients() as opened:
        yield opened


@pytest.fixture
async def bucket(clients: AwsClients) -> str:
    from aws_emulator import fresh_name

    name = fresh_name()
    await clients.s3.create_bucket(Bucket=name)
    return name


@asynccontextmanager
async def s3_store(url: str) -> AsyncIterator[ResultStore]:
    """The store FERRYMAN_RESULTS_URL=url opens, through the door wiring uses, beside
    an engine that is not AWS's (S3 results need no AWS engine)."""
    async with (
        open_engine("memory://", clock=FakeClock()) as engine,
        open_result_store(url, engine) as opened,
    ):
        yield opened.store


@pytest.fixture
async def store(bucket: str) -> AsyncIterator[ResultStore]:
    async with s3_store(f"s3://{bucket}/{PREFIX}") as opened:
        yield opened


async def _keys(clients: AwsClients, bucket: str) -> list[str]:
    listed = await clients.s3.list_objects_v2(Bucket=bucket)
    return sorted(str(o["Key"]) for o in listed.get("Contents", []))


async def test_a_result_is_kept_at_its_key_with_its_ids_and_checksum_and_read_back(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    data = b'{"text": "hello"}'
    ref = await store.put(KEY, data)

    assert await store.get(ref, key=KEY) == data
    assert ref == f"s3:{KEY};sha256={checksum(data)}"
    head = await clients.s3.head_object(
        Bucket=bucket, Key=f"{PREFIX}/{KEY}", ChecksumMode="ENABLED"
    )
    assert head["Metadata"] == {
        META_JOB_ID: "gen_01",
        META_ATTEMPT_ID: "att_01",
        META_SHA256: checksum(data),
    }
    # S3's own checksum of the stored bytes is there too (what put's read-back compares).
    assert head["ChecksumSHA256"]


async def test_an_object_changed_behind_the_store_is_unreadable(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    ref = await store.put(KEY, b'{"text": "hello"}')
    head = await clients.s3.head_object(Bucket=bucket, Key=f"{PREFIX}/{KEY}")
    # Same metadata (its checksum too), other bytes: only the bytes' own hash tells.
    await clients.s3.put_object(
        Bucket=bucket, Key=f"{PREFIX}/{KEY}", Body=b'{"text": "HELLO"}', Metadata=head["Metadata"]
    )

    with pytest.raises(ResultUnreadableError, match="do not match their checksum"):
        await store.get(ref, key=KEY)


async def test_a_consistent_rewrite_of_bytes_and_metadata_is_caught_by_the_ref(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    ref = await store.put(KEY, b'{"text": "hello"}')
    other = b'{"text": "bye"}'
    await clients.s3.put_object(
        Bucket=bucket,
        Key=f"{PREFIX}/{KEY}",
        Body=other,
        Metadata={META_JOB_ID: "gen_01", META_ATTEMPT_ID: "att_01", META_SHA256: checksum(other)},
    )

    with pytest.raises(ResultUnreadableError, match="not the one its job refers to"):
        await store.get(ref, key=KEY)


async def test_another_result_s_object_copied_to_the_key_is_unreadable(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    data = b'{"text": "hello"}'
    ref = await store.put(OTHER_KEY, data)
    await clients.s3.copy_object(
        Bucket=bucket,
        Key=f"{PREFIX}/{KEY}",
        CopySource={"Bucket": bucket, "Key": f"{PREFIX}/{OTHER_KEY}"},
    )

    with pytest.raises(ResultUnreadableError, match="belongs to another result") as raised:
        await store.get(ref.replace(OTHER_KEY, KEY), key=KEY)
    assert "gen_02" not in raised.value.message


async def test_another_key_s_ref_is_unreadable_and_never_named(store: ResultStore) -> None:
    ref = await store.put(OTHER_KEY, b"{}")

    with pytest.raises(ResultUnreadableError, match="names another result") as raised:
        await store.get(ref, key=KEY)
    assert "gen_02" not in raised.value.message


@pytest.mark.parametrize(
    "ref",
    [
        "db:acme/gen_01.att_01.json;sha256=" + "0" * 64,
        "s3:acme/gen_01.att_01.json",  # no checksum: never written by this store
        "s3:acme/gen_01.att_01.json;sha256=XYZ",
    ],
)
async def test_a_ref_that_is_not_this_store_s_is_unreadable(store: ResultStore, ref: str) -> None:
    with pytest.raises(ResultUnreadableError, match="not an S3 reference"):
        await store.get(ref, key=KEY)


async def test_a_missing_object_is_unreadable(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    ref = await store.put(KEY, b"{}")
    await clients.s3.delete_object(Bucket=bucket, Key=f"{PREFIX}/{KEY}")

    with pytest.raises(ResultUnreadableError, match="missing"):
        await store.get(ref, key=KEY)


async def test_the_same_bytes_put_twice_give_the_same_ref(store: ResultStore) -> None:
    # A put retried after its answer was lost finds its own object there.
    first = await store.put(KEY, b'{"n": 1}')
    assert await store.put(KEY, b'{"n": 1}') == first
    assert await store.get(first, key=KEY) == b'{"n": 1}'


async def test_different_bytes_under_a_used_key_are_refused_and_the_first_kept(
    store: ResultStore,
) -> None:
    first = await store.put(KEY, b'{"n": 1}')

    with pytest.raises(StateConflictError, match="never overwritten"):
        await store.put(KEY, b'{"n": 2}')
    assert await store.get(first, key=KEY) == b'{"n": 1}'


@pytest.mark.parametrize(
    "key", ["", "acme/../gen.att.json", "acme//gen.att.json", "acme/gen\n.att.json", "x" * 1100]
)
async def test_a_key_no_store_may_use_is_refused(store: ResultStore, key: str) -> None:
    with pytest.raises(ValueError, match="result key"):
        await store.put(key, b"{}")


async def test_a_key_not_made_by_the_result_rule_is_kept_without_ids(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    ref = await store.put("notes/readme.txt", b"hi")

    assert await store.get(ref, key="notes/readme.txt") == b"hi"
    head = await clients.s3.head_object(Bucket=bucket, Key=f"{PREFIX}/notes/readme.txt")
    assert set(head["Metadata"]) == {META_SHA256}


async def test_probe_passes_on_a_writable_bucket_and_leaves_nothing(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    await store.probe()
    assert await _keys(clients, bucket) == []


async def test_probe_on_a_missing_bucket_names_it_and_creates_nothing(
    clients: AwsClients,
) -> None:
    from aws_emulator import fresh_name

    missing = fresh_name()
    async with s3_store(f"s3://{missing}/{PREFIX}") as store:
        with pytest.raises(ResultsUnavailableError, match=f"bucket '{missing}' does not exist"):
            await store.probe()
    listed = await clients.s3.list_buckets()
    assert missing not in {b["Name"] for b in listed["Buckets"]}


async def test_put_and_get_on_a_missing_bucket_are_unavailable(aws_env: dict[str, str]) -> None:
    from aws_emulator import fresh_name

    async with s3_store(f"s3://{fresh_name()}/{PREFIX}") as store:
        with pytest.raises(ResultsUnavailableError, match="NoSuchBucket"):
            await store.put(KEY, b"{}")
        with pytest.raises(ResultsUnavailableError, match="NoSuchBucket"):
            await store.get(f"s3:{KEY};sha256={checksum(b'{}')}", key=KEY)


@pytest.mark.usefixtures("aws_retries_at_once")
async def test_an_unreachable_endpoint_is_unavailable(
    aws_env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Nothing listens on port 9: every call is refused at connect.
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    async with s3_store(f"s3://any-bucket/{PREFIX}") as store:
        with pytest.raises(ResultsUnavailableError, match="s3: "):
            await store.put(KEY, b"{}")


class _Jobs:
    """any_job_exists over a set of living job ids, recording what it was asked."""

    def __init__(self, living: set[str]) -> None:
        self.living = living
        self.asked: list[set[str]] = []

    async def __call__(self, job_ids: Collection[str]) -> bool:
        self.asked.append(set(job_ids))
        return bool(self.living & set(job_ids))


async def test_reclaim_deletes_only_the_results_of_gone_jobs_and_counts_their_bytes(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    await store.put(result_key("acme", "gen_gone", "att_1"), b"12345")
    await store.put(result_key("acme", "gen_gone", "att_2"), b"123")
    await store.put(result_key("beta", "gen_live", "att_1"), b"1234567")
    await store.put("notes/readme.txt", b"kept: no owner")
    # Outside this store's prefix: never listed, never deleted.
    await clients.s3.put_object(Bucket=bucket, Key="elsewhere/acme/gen_gone.att_9.json", Body=b"x")
    await clients.s3.put_object(Bucket=bucket, Key=f"{PREFIX}x/acme/gen_gone.att_9.json", Body=b"x")

    reclaimed = await store.reclaim(any_job_exists=_Jobs({"gen_live"}))

    assert reclaimed == 8
    assert await _keys(clients, bucket) == [
        "elsewhere/acme/gen_gone.att_9.json",
        f"{PREFIX}/beta/gen_live.att_1.json",
        f"{PREFIX}/notes/readme.txt",
        f"{PREFIX}x/acme/gen_gone.att_9.json",
    ]
    assert await store.reclaim(any_job_exists=_Jobs({"gen_live"})) == 0


async def test_reclaim_pages_through_more_than_one_listing(
    clients: AwsClients, bucket: str, store: ResultStore
) -> None:
    # ListObjectsV2 gives at most 1000 keys a page: 1,050 objects take two pages.
    count = 1050
    gate = asyncio.Semaphore(32)

    async def one(n: int) -> None:
        key = f"{PREFIX}/{result_key('acme', f'gen_{n:05d}', 'att_1')}"
        async with gate:
            await clients.s3.put_object(Bucket=bucket, Key=key, Body=b"ab")

    await asyncio.gather(*(one(n) for n in range(count)))
    jobs = _Jobs({"gen_00007"})

    reclaimed = await store.reclaim(any_job_exists=jobs)

    assert reclaimed == 2 * (count - 1)
    assert await _keys(clients, bucket) == [f"{PREFIX}/acme/gen_00007.att_1.json"]
    assert len(jobs.asked) > 1


async def test_the_results_url_opens_an_s3_store_beside_any_engine(
    aws_env: dict[str, str], bucket: str
) -> None:
    async with (
        open_engine("memory://", clock=FakeClock()) as engine,
        open_result_store(f"s3://{bucket}/{PREFIX}/", engine) as opened,
    ):
        assert opened.location == f"s3://{bucket}/{PREFIX}"
        await opened.store.probe()
        ref = await opened.store.put(KEY, b"{}")
        assert await opened.store.get(ref, key=KEY) == b"{}"
