"""Per-tenant budgets: token buckets over explicit times, and what they advertise."""

from __future__ import annotations

import pytest

from ferryman.http.rate_limit import Budget, Policy, TenantBudgets


def budgets(rate: float = 2.0, burst: int = 4) -> TenantBudgets:
    return TenantBudgets({Budget.SUBMIT: Policy(Budget.SUBMIT, rate, burst)})


def test_a_burst_then_refusal_then_refill() -> None:
    limiter = budgets(rate=2.0, burst=4)

    taken = [limiter.take(Budget.SUBMIT, "acme", 100.0) for _ in range(5)]

    assert [q.allowed for q in taken if q] == [True, True, True, True, False]
    assert [q.remaining for q in taken if q] == [3, 2, 1, 0, 0]
    refused = taken[-1]
    assert refused is not None
    assert refused.retry_after_seconds == 1  # half a second to the next token, rounded up
    again = limiter.take(Budget.SUBMIT, "acme", 100.5)
    assert again is not None
    assert again.allowed


def test_tenants_and_budgets_are_apart() -> None:
    limiter = TenantBudgets(
        {
            Budget.SUBMIT: Policy(Budget.SUBMIT, 1.0, 1),
            Budget.READ: Policy(Budget.READ, 1.0, 1),
        }
    )

    first = limiter.take(Budget.SUBMIT, "acme", 0.0)
    other_tenant = limiter.take(Budget.SUBMIT, "globex", 0.0)
    other_budget = limiter.take(Budget.READ, "acme", 0.0)
    second = limiter.take(Budget.SUBMIT, "acme", 0.0)

    assert first and other_tenant and other_budget and second
    assert (first.allowed, other_tenant.allowed, other_budget.allowed) == (True, True, True)
    assert not second.allowed


def test_a_budget_without_a_policy_is_unlimited() -> None:
    assert budgets().take(Budget.READ, "acme", 0.0) is None


def test_a_clock_stepping_back_mints_no_tokens() -> None:
    limiter = budgets(rate=1.0, burst=1)
    assert limiter.take(Budget.SUBMIT, "acme", 50.0).allowed  # type: ignore[union-attr]

    back = limiter.take(Budget.SUBMIT, "acme", 10.0)

    assert back is not None
    assert not back.allowed


@pytest.mark.parametrize(
    ("rate", "burst", "policy"),
    [
        (50.0, 100, '"submit";q=100;w=2'),
        (200.0, 400, '"submit";q=400;w=2'),
        (0.5, 3, '"submit";q=3;w=6'),
        (100.0, 10, '"submit";q=10;w=1'),  # never a zero window
        (3.0, 10, '"submit";q=10;w=4'),  # rounded up: never promises more than it gives
    ],
)
def test_the_policy_header_states_burst_and_refill_window(
    rate: float, burst: int, policy: str
) -> None:
    assert Policy(Budget.SUBMIT, rate, burst).header() == policy


def test_the_ratelimit_header_says_what_is_left_and_when_it_is_full() -> None:
    limiter = budgets(rate=2.0, burst=4)

    quota = limiter.take(Budget.SUBMIT, "acme", 0.0)

    assert quota is not None
    assert dict(quota.headers()) == {
        "RateLimit-Policy": '"submit";q=4;w=2',
        "RateLimit": '"submit";r=3;t=1',
    }


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_policy_needs_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="must be"):
        Policy(Budget.SUBMIT, rate, burst)


def test_reads_are_get_and_head_everything_else_submits() -> None:
    assert Budget.for_method("GET") is Budget.READ
    assert Budget.for_method("HEAD") is Budget.READ
    assert Budget.for_method("POST") is Budget.SUBMIT
    assert Budget.for_method("DELETE") is Budget.SUBMIT


def test_a_batch_spends_one_token_per_item() -> None:
    limiter = budgets(rate=10.0, burst=20)

    batch = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=15)
    single = limiter.take(Budget.SUBMIT, "acme", 0.0)
    too_many = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=5)

    assert batch is not None and batch.allowed and batch.remaining == 5
    assert single is not None and single.allowed and single.remaining == 4
    assert too_many is not None and not too_many.allowed
    assert too_many.retry_after_seconds == 1  # one more token: 0.1 s, rounded up


def test_a_batch_over_the_burst_waits_for_a_full_bucket_then_leaves_debt() -> None:
    limiter = budgets(rate=100.0, burst=10)

    limiter.take(Budget.SUBMIT, "acme", 0.0, cost=3)
    early = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=1000)
    full = limiter.take(Budget.SUBMIT, "acme", 0.05, cost=1000)
    after = limiter.take(Budget.SUBMIT, "acme", 5.0)  # 990 in debt, 495 refilled: 4.96 s more

    assert early is not None and not early.allowed
    assert full is not None and full.allowed and full.remaining == 0
    assert after is not None and not after.allowed
    assert after.retry_after_seconds == 5


def test_a_cost_below_one_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="cost"):
        budgets().take(Budget.SUBMIT, "acme", 0.0, cost=0)


def test_a_cost_paid_in_two_steps_is_judged_whole_and_the_first_step_stays_paid() -> None:
    limiter = budgets(rate=1.0, burst=10)

    bytes_first = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=4)
    rest = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=3, paid=4)  # 7 in all: fits
    again = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=2)
    refused = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=5, paid=2)  # 7 asked, 3 there

    assert bytes_first is not None and bytes_first.remaining == 6
    assert rest is not None and rest.allowed and rest.remaining == 3
    assert again is not None and again.allowed and again.remaining == 1
    assert refused is not None and not refused.allowed
    # 7 needed whole, 3 there: 4 s; and the 2 it paid stay paid: 2 s more.
    assert refused.retry_after_seconds == 6
    assert limiter.take(Budget.SUBMIT, "acme", 0.0) is not None
    assert limiter.take(Budget.SUBMIT, "acme", 0.0).remaining == 0  # type: ignore[union-attr]


def test_a_whole_cost_over_the_burst_passes_when_the_bucket_was_full_before_its_first_step() -> (
    None
):
    limiter = budgets(rate=1.0, burst=10)

    first = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=4)
    rest = limiter.take(Budget.SUBMIT, "acme", 0.0, cost=996, paid=4)

    assert first is not None and first.allowed
    assert rest is not None and rest.allowed  # no livelock: it counts as one cost of 1,000
