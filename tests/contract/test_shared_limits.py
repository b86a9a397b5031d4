"""Limits every process shares, on each engine that shares them: PostgreSQL and AWS.

Two "processes" are two pools (PostgreSQL) or two client sets (AWS) on one store, so
nothing passes between them but the store: token buckets that never grant more than
they hold, whoever asks, and the provider limits that keep a cluster to one window and
one learned rate (services/provider_share.py). What only one engine shows (its items,
its collisions, a missing table) stays in its own module
(tests/integration/aws/test_dynamo_small_stores.py, test_postgres_shared.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from types import SimpleNamespace

import pytest

from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.aimd import AimdWindow
from ferryman.core.ratelimit import TokenBucket
from ferryman.ports.limits import SharedLimits
from ferryman.services.provider_share import LIVE_AFTER_SECONDS, PerMinute, ProviderShareSync
from provider_reports import provider_report

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["postgresql", pytest.param("aws", marks=pytest.mark.aws)])
async def shared(request: pytest.FixtureRequest) -> AsyncIterator[SimpleNamespace]:
    """``one`` and ``two``: the shared limits of two processes on one fresh store."""
    async with AsyncExitStack() as stack:
        if request.param == "postgresql":
            from ferryman.adapters.postgres import PostgresDatabase, PostgresSharedLimits

            url = request.getfixturevalue("postgres_scratch")()
            limits: list[SharedLimits] = []
            for _ in range(2):
                db = await PostgresDatabase.open(url, min_size=1, max_size=4)
                stack.push_async_callback(db.close)
                limits.append(PostgresSharedLimits(db))
        else:
            from ferryman.adapters.aws.clients import open_clients
            from ferryman.adapters.aws.limits import DynamoSharedLimits
            from ferryman.adapters.aws.location import parse_aws_url

            url = await request.getfixturevalue("aws_url_factory")()
            table = parse_aws_url(url).table
            limits = [
                DynamoSharedLimits(await stack.enter_async_context(open_clients()), table)
                for _ in range(2)
            ]
        yield SimpleNamespace(one=limits[0], two=limits[1])


# --- token buckets ----------------------------------------------------------------------


async def test_a_new_bucket_starts_full_refills_over_time_and_never_from_a_clock_stepping_back(
    shared,
):
    async def lease(want: int, now: float):
        return await shared.one.lease(
            "submit:acme", rate_per_second=2.0, burst=10, want=want, now=now
        )

    first = await lease(4, 100.0)
    rest = await lease(20, 100.0)
    empty = await lease(1, 100.0)
    refilled = await lease(5, 101.5)  # 1.5 s at 2/s: 3 tokens
    stepped_back = await lease(5, 50.0)
    much_later = await lease(20, 10_000.0)  # never above the burst

    assert (first.granted, first.tokens_left) == (4, 6.0)
    assert (rest.granted, rest.tokens_left) == (6, 0.0)
    assert (empty.granted, empty.tokens_left) == (0, 0.0)
    assert (refilled.granted, refilled.tokens_left) == (3, 0.0)
    assert stepped_back.granted == 0
    assert (much_later.granted, much_later.tokens_left) == (10, 0.0)


async def test_a_first_lease_over_the_burst_gets_the_burst_and_a_bad_want_is_refused(shared):
    got = await shared.one.lease("k", rate_per_second=1.0, burst=3, want=10, now=1.0)
    assert (got.granted, got.tokens_left) == (3, 0.0)
    with pytest.raises(ValueError, match="want"):
        await shared.one.lease("k", rate_per_second=1.0, burst=3, want=0, now=1.0)


async def test_fractional_tokens_are_kept_between_leases(shared):
    await shared.one.lease("k", rate_per_second=0.5, burst=2, want=2, now=0.0)
    half = await shared.one.lease("k", rate_per_second=0.5, burst=2, want=1, now=1.0)
    whole = await shared.one.lease("k", rate_per_second=0.5, burst=2, want=1, now=2.0)

    assert (half.granted, half.tokens_left) == (0, 0.5)
    assert (whole.granted, whole.tokens_left) == (1, 0.0)


async def test_concurrent_leases_from_two_processes_never_grant_more_than_the_bucket(shared):
    async def lease(i: int, now: float) -> int:
        limits = shared.one if i % 2 else shared.two
        got = await limits.lease("submit:acme", rate_per_second=10.0, burst=50, want=3, now=now)
        return got.granted

    at_once = await asyncio.gather(*(lease(i, 1000.0) for i in range(40)))
    # Two seconds later: 20 tokens refilled, whoever asks.
    later = await asyncio.gather(*(lease(i, 1002.0) for i in range(40)))
    # A clock stepping back mints nothing.
    earlier = await lease(0, 900.0)

    assert sum(at_once) == 50
    assert sum(later) == 20
    assert earlier == 0


# --- provider limits --------------------------------------------------------------------


class _Wall:
    """A wall clock the test moves: heartbeats are compared in wall-clock seconds."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _sync(limits: SharedLimits, member: str, wall: _Wall, per_minute: float = 600.0):
    window = AimdWindow(maximum=64.0, start=8.0)
    learned = AdaptiveRate()
    bucket = TokenBucket(per_minute / 60.0, burst=10)
    sync = ProviderShareSync(
        limits,
        provider="openai",
        model="gpt-x",
        member=member,
        window=window,
        learned=learned,
        budgets=(PerMinute(bucket, per_minute),),
        wall_clock=wall,
    )
    return sync, window, learned, bucket


async def test_two_limiters_on_one_store_converge_to_one_window_and_rate(shared):
    wall = _Wall()
    one, w1, r1, b1 = _sync(shared.one, "worker-1", wall)
    two, w2, r2, b2 = _sync(shared.two, "worker-2", wall)

    # Both join, each bringing its starting window: each opens at its start.
    await one.report(0.0)
    await two.report(0.0)
    await one.report(0.1)
    assert (w1.limit, w2.limit) == (8.0, 8.0)
    assert (one.members, two.members) == (2, 2)
    # Each process's share of a per-minute budget configured for all of them.
    assert b1.rate_per_second == b2.rate_per_second == pytest.approx(5.0)

    # One grows its share by 4 (slow start): the cluster adds it, both get half.
    for _ in range(4):
        w1.on_success()
    await one.report(1.0)
    await two.report(1.0)
    assert (w1.limit, w2.limit) == (10.0, 10.0)

    # One overload throttles both, admitted under epoch 0: the cluster halves once.
    for rate in (r1, r2):
        for _ in range(20):
            rate.admitted(2.0)
        assert rate.on_throttle(2.0, 0)
    w1.on_throttle(0)
    w2.on_throttle(0)
    await one.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
    await two.after_call(2.0, admitted_epoch=0, narrowed=True, lowered=True)
    await one.report(3.5)
    assert (one.epoch, two.epoch) == (1, 1)
    assert (w1.limit, w2.limit) == (5.0, 5.0)
    # The first learned rate is the first reporter's (19 of its 20 calls accepted, less
    # 15%) times the processes; each paces at half of it.
    assert r1.rate == r2.rate
    assert r1.rate is not None
    assert r1.rate * 2 == pytest.approx(19 * 0.85 * 2)

    # worker-2 dies: once it has been silent LIVE_AFTER_SECONDS, worker-1 takes the
    # whole window and budget.
    for _ in range(2):  # worker-1 keeps reporting; worker-2 says nothing
        wall.now += LIVE_AFTER_SECONDS / 2 + 0.5
        await one.report(10.0)
    assert one.members == 1
    assert w1.limit == 10.0
    assert b1.rate_per_second == pytest.approx(10.0)


async def test_a_throttle_under_an_old_epoch_does_not_narrow_the_cluster_again(shared):
    one, w1, _, _ = _sync(shared.one, "worker-1", _Wall())
    await one.report(0.0)
    await one.after_call(1.0, admitted_epoch=0, narrowed=True, lowered=False)
    await one.after_call(1.1, admitted_epoch=0, narrowed=True, lowered=False)

    assert one.epoch == 1
    assert w1.limit == 4.0  # 8 halved once, not twice


async def test_the_cluster_window_is_capped_at_every_live_member_and_a_gone_one_is_forgotten(
    shared,
):
    first = await shared.one.report_provider(provider_report("a", 100.0))
    joined = await shared.one.report_provider(provider_report("b", 100.0))
    grown = await shared.one.report_provider(provider_report("a", 101.0, grown_window=50.0))
    # A report from the past (a slow clock) never moves a member's heartbeat back.
    await shared.one.report_provider(provider_report("b", 90.0))
    # Long after (over 100 liveness horizons), "b" is gone for good: only "a" counts.
    alone = await shared.one.report_provider(provider_report("a", 2_000.0))

    assert (first.window, first.rate, first.epoch, first.members) == (4.0, None, 0, 1)
    assert (joined.window, joined.members) == (8.0, 2)
    assert grown.window == 12.0  # 2 live x max_window 6
    assert alone.members == 1
    assert alone.window == 6.0  # a came back (joined again): min(1 x 6, 12 + 4)


async def test_concurrent_throttles_in_one_epoch_decrease_the_cluster_once(shared):
    await shared.one.report_provider(provider_report("a", 100.0, learned_rate=2.0))
    throttle = {"throttled_epoch": 0, "narrowed_window": True, "lowered_rate": True}

    shares = await asyncio.gather(
        *(
            (shared.one if i % 2 else shared.two).report_provider(
                provider_report(f"m{i}", 100.0, learned_rate=2.0, **throttle)
            )
            for i in range(6)
        )
    )

    # Whoever came first lowered the rate (2.0, the first report's) once; the others'
    # throttles were of the epoch that had ended: echoes that change nothing.
    assert {s.epoch for s in shares} == {1}
    assert [s.rate for s in shares] == [pytest.approx(2.0 * 0.85)] * 6
