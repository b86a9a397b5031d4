"""Per-tenant budgets shared by many API processes: tokens leased in batches from one
bucket, so the processes together admit what one bucket allows, never more."""

from __future__ import annotations

import asyncio

from ferryman.core.ratelimit import TokenBucket
from ferryman.http.rate_lease import MAX_LEASE_AGE_SECONDS, LeasedBudgets, batch_size
from ferryman.http.rate_limit import Budget, Policy
from ferryman.ports.limits import TokenLease


class CountingBuckets:
    """SharedLimits over in-process buckets, counting the round trips a database would
    take (the PostgreSQL adapter's contract test checks the same rule on a server)."""

    def __init__(self) -> None:
        self.buckets: dict[str, TokenBucket] = {}
        self.leases = 0

    async def lease(
        self, key: str, *, rate_per_second: float, burst: int, want: int, now: float
    ) -> TokenLease:
        self.leases += 1
        await asyncio.sleep(0)  # a real lease yields to the loop while it waits
        bucket = self.buckets.setdefault(key, TokenBucket(rate_per_second, burst))
        bucket.adjust(now, 0)  # refill to now
        granted = min(want, bucket.remaining)
        bucket.adjust(now, granted)
        return TokenLease(granted=granted, tokens_left=float(bucket.remaining))


def policy(rate: float, burst: int) -> dict[Budget, Policy]:
    return {Budget.SUBMIT: Policy(Budget.SUBMIT, rate, burst)}


async def admitted(budgets: LeasedBudgets, now: float, n: int, tenant: str = "acme") -> int:
    quotas = [await budgets.acquire(Budget.SUBMIT, tenant, now) for _ in range(n)]
    return sum(1 for q in quotas if q is not None and q.allowed)


def test_a_batch_is_half_a_second_of_refill_within_a_quarter_of_the_burst() -> None:
    assert batch_size(Policy(Budget.SUBMIT, 2.0, 20)) == 1
    assert batch_size(Policy(Budget.SUBMIT, 10.0, 20)) == 5
    assert batch_size(Policy(Budget.SUBMIT, 100.0, 400)) == 50
    assert batch_size(Policy(Budget.SUBMIT, 1000.0, 20)) == 5
    assert batch_size(Policy(Budget.SUBMIT, 1000.0, 2)) == 1


async def test_two_processes_together_admit_one_burst_then_the_rate() -> None:
    shared = CountingBuckets()
    first, second = LeasedBudgets(policy(40.0, 8), shared), LeasedBudgets(policy(40.0, 8), shared)

    at_once = await admitted(first, 100.0, 6) + await admitted(second, 100.0, 6)
    # A second later both asked again: 40 tokens came back but the bucket holds 8.
    later = await admitted(first, 101.0, 6) + await admitted(second, 101.0, 6)

    assert at_once == 8
    assert later == 8


async def test_most_requests_spend_a_leased_token_without_asking_the_database() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(100.0, 200), shared)  # batches of 50

    assert await admitted(budgets, 5.0, 100) == 100

    assert shared.leases == 2


async def test_concurrent_requests_share_one_lease() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(100.0, 200), shared)

    quotas = await asyncio.gather(*(budgets.acquire(Budget.SUBMIT, "acme", 5.0) for _ in range(10)))

    assert all(q is not None and q.allowed for q in quotas)
    assert shared.leases == 1


async def test_a_refusal_says_when_to_come_back_and_is_not_asked_again_before() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(0.5, 1), shared)

    assert await admitted(budgets, 10.0, 1) == 1
    refused = await budgets.acquire(Budget.SUBMIT, "acme", 10.0)
    leases = shared.leases
    still = [await budgets.acquire(Budget.SUBMIT, "acme", 10.0 + t) for t in (0.1, 1.0, 1.9)]

    assert refused is not None
    assert not refused.allowed
    assert refused.retry_after_seconds == 2  # one token at 0.5/s
    assert refused.headers()[1] == ("RateLimit", '"submit";r=0;t=2')
    assert not any(q is not None and q.allowed for q in still)
    assert shared.leases == leases  # the refusals were answered locally
    assert await admitted(budgets, 12.0, 1) == 1


async def test_an_unspent_lease_goes_stale_and_is_not_spent_later() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(100.0, 200), shared)

    assert await admitted(budgets, 0.0, 1) == 1  # leased 50, spent 1
    await budgets.acquire(Budget.SUBMIT, "acme", MAX_LEASE_AGE_SECONDS + 0.5)

    assert shared.leases == 2


async def test_tenants_have_their_own_buckets_and_an_unlimited_budget_is_none() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(1.0, 1), shared)

    assert await admitted(budgets, 0.0, 2, tenant="acme") == 1
    assert await admitted(budgets, 0.0, 2, tenant="globex") == 1
    assert await budgets.acquire(Budget.READ, "acme", 0.0) is None


async def test_the_headers_count_the_shared_balance_and_this_process_lease() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(100.0, 200), shared)

    quota = await budgets.acquire(Budget.SUBMIT, "acme", 0.0)

    assert quota is not None
    # 150 left in the shared bucket, 49 more held here; 1 token short of full.
    assert quota.remaining == 199
    assert quota.reset_seconds == 1


async def test_a_batch_spends_one_token_per_item_across_processes() -> None:
    shared = CountingBuckets()
    first, second = LeasedBudgets(policy(1.0, 10), shared), LeasedBudgets(policy(1.0, 10), shared)

    batch = await first.acquire(Budget.SUBMIT, "acme", 0.0, cost=7)
    too_many = await second.acquire(Budget.SUBMIT, "acme", 0.0, cost=7)
    fits = await second.acquire(Budget.SUBMIT, "acme", 0.0, cost=3)

    assert batch is not None and batch.allowed
    assert too_many is not None and not too_many.allowed
    assert fits is not None and fits.allowed


async def test_a_cost_over_the_burst_passes_once_and_is_paid_back_before_more() -> None:
    shared = CountingBuckets()
    budgets = LeasedBudgets(policy(1.0, 4), shared)

    big = await budgets.acquire(Budget.SUBMIT, "acme", 0.0, cost=10)
    after = await budgets.acquire(Budget.SUBMIT, "acme", 4.0)  # 4 refilled, 6 owed

    assert big is not None and big.allowed
    assert after is not None and not after.allowed


async def test_a_cost_paid_in_two_steps_is_judged_whole() -> None:
    budgets = LeasedBudgets(policy(1.0, 10), CountingBuckets())

    first = await budgets.acquire(Budget.SUBMIT, "acme", 0.0, cost=4)
    over_the_burst = await budgets.acquire(Budget.SUBMIT, "acme", 0.0, cost=996, paid=4)
    after = await budgets.acquire(Budget.SUBMIT, "acme", 0.0, cost=3, paid=1)

    assert first is not None and first.allowed
    assert over_the_burst is not None and over_the_burst.allowed
    assert after is not None and not after.allowed
