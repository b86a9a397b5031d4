"""A worker's limiter taking part in limits shared by every worker process: it reports a
throttle at once with the epoch its call was admitted under, reports growth when due,
paces at its share, and keeps going on its own when the database is out."""

from __future__ import annotations

from ferryman.core.errors import StoreUnavailableError
from ferryman.ports.limits import ProviderReport, ProviderShare
from ferryman.services.limiter import CallBudget, CallLimiter, Limiters
from ferryman.services.provider_share import REPORT_SECONDS


class Cluster:
    """SharedLimits' provider half, remembering the reports; answers a fixed share."""

    def __init__(self, share: ProviderShare) -> None:
        self.share = share
        self.reports: list[ProviderReport] = []
        self.down = False

    async def lease(self, key, *, rate_per_second, burst, want, now):  # pragma: no cover
        raise AssertionError("workers lease no API tokens")

    async def report_provider(self, report: ProviderReport) -> ProviderShare:
        if self.down:
            raise StoreUnavailableError()
        self.reports.append(report)
        return self.share


def limiter(cluster: Cluster, **budget) -> CallLimiter:
    return CallLimiter(
        CallBudget(max_concurrency=32, **budget),
        provider="openai",
        model="gpt-x",
        shared=cluster,
        member="worker-1",
    )


async def test_a_throttle_is_reported_at_once_with_the_epoch_its_call_was_admitted_under():
    cluster = Cluster(ProviderShare(window=20.0, rate=None, epoch=3, members=4))
    calls = limiter(cluster, start_concurrency=1)
    await calls.share.report(0.0)  # joins: epoch 3, a quarter of 20
    assert calls.window.permits == 5
    cluster.share = ProviderShare(window=10.0, rate=None, epoch=4, members=4)

    async with calls.slot(estimated_tokens=1) as admission:
        pass
    await calls.record(admission, throttled=True)

    report = cluster.reports[-1]
    assert report.throttled_epoch == 3
    # The window was not full (one call of five), so only the rate was lowered here.
    assert (report.lowered_rate, report.narrowed_window) == (True, False)
    assert report.member == "worker-1"
    assert calls.window.permits == 2  # a quarter of the halved cluster window
    assert calls.share.epoch == 4


async def test_successes_report_growth_only_when_a_report_is_due():
    cluster = Cluster(ProviderShare(window=8.0, rate=None, epoch=0, members=1))
    calls = limiter(cluster)
    async with calls.slot(estimated_tokens=1) as admission:
        pass
    await calls.record(admission, throttled=False)
    reported = len(cluster.reports)
    async with calls.slot(estimated_tokens=1) as admission:
        pass
    await calls.record(admission, throttled=False)

    assert reported == 1  # the first call joined the cluster
    assert len(cluster.reports) == 1  # the second came before REPORT_SECONDS
    await calls.share.after_call(
        admission.started_at + REPORT_SECONDS, admitted_epoch=0, narrowed=False, lowered=False
    )
    assert len(cluster.reports) == 2


async def test_a_learned_rate_and_per_minute_budgets_are_paced_at_this_process_share():
    cluster = Cluster(ProviderShare(window=40.0, rate=30.0, epoch=2, members=3))
    calls = limiter(cluster, requests_per_minute=1800.0)

    await calls.share.report(5.0)

    assert calls.learned.rate == 10.0
    assert calls.window.permits == 13
    assert calls._requests is not None
    assert calls._requests.rate_per_second == 10.0  # 1800/min for all three processes


async def test_with_the_database_out_the_limiter_keeps_its_own_figures():
    cluster = Cluster(ProviderShare(window=4.0, rate=None, epoch=0, members=1))
    calls = limiter(cluster)
    cluster.down = True

    async with calls.slot(estimated_tokens=1) as admission:
        pass
    await calls.record(admission, throttled=False)

    assert calls.window.permits == 32
    assert cluster.reports == []


def test_limiters_without_a_shared_engine_keep_each_process_own():
    assert Limiters({}, max_concurrency=4).get("openai", "gpt-x").share is None
    cluster = Cluster(ProviderShare(window=1.0, rate=None, epoch=0, members=1))
    assert Limiters({}, max_concurrency=4, shared=cluster, member="w").get("p", "m").share
