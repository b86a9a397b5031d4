"""Intake's usage estimates: far below a quota a tenant's usage is not read on every
submission; near it, or after a second, it is (services/intake.py, UsageEstimates)."""

from __future__ import annotations

import pytest

from ferryman.ports.store import TenantUsage
from ferryman.services import intake
from ferryman.services.intake import TenantQuotas, UsageEstimates

QUOTAS = TenantQuotas(max_backlog=100, max_stored_jobs=1000)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(intake.time, "monotonic", lambda: now[0])
    return now


def test_nothing_read_means_the_store_is_read(clock: list[float]) -> None:
    assert UsageEstimates().current("t", QUOTAS) is None


def test_a_fresh_read_far_below_the_quotas_stands_in_and_counts_acceptances(
    clock: list[float],
) -> None:
    estimates = UsageEstimates()
    estimates.read("t", TenantUsage(unfinished=10, stored=20))
    estimates.accepted("t", 5)
    assert estimates.current("t", QUOTAS) == TenantUsage(unfinished=15, stored=25)
    assert estimates.current("other", QUOTAS) is None


def test_near_a_quota_the_store_is_read_every_time(clock: list[float]) -> None:
    estimates = UsageEstimates()
    estimates.read("t", TenantUsage(unfinished=85, stored=0))
    assert estimates.current("t", QUOTAS) is not None
    estimates.accepted("t", 5)  # 90: within the 10% headroom of 100
    assert estimates.current("t", QUOTAS) is None
    estimates.read("t", TenantUsage(unfinished=0, stored=995))
    assert estimates.current("t", QUOTAS) is None  # the stored-jobs quota is near
    assert estimates.current("t", TenantQuotas(max_backlog=1)) is None  # a quota of 1


def test_an_estimate_older_than_the_refresh_is_read_again(clock: list[float]) -> None:
    estimates = UsageEstimates()
    estimates.read("t", TenantUsage(unfinished=0, stored=0))
    clock[0] += intake.USAGE_REFRESH_SECONDS
    assert estimates.current("t", QUOTAS) is None


def test_estimates_are_bounded(clock: list[float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(intake, "MAX_USAGE_ESTIMATES", 2)
    estimates = UsageEstimates()
    for tenant in ("a", "b", "c"):
        estimates.read(tenant, TenantUsage(unfinished=0, stored=0))
    assert estimates.current("a", QUOTAS) is None
    assert estimates.current("c", QUOTAS) is not None
