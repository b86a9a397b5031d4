"""The per-(provider, model) limiter: a window that follows throttles, and budgets."""

from __future__ import annotations

import asyncio
import time

import pytest

from ferryman.core.adaptive_rate import AdaptiveRate
from ferryman.core.aimd import AimdWindow
from ferryman.services.limiter import CallBudget, CallLimiter, Limiters, estimate_tokens


def test_a_burst_of_throttles_narrows_the_window_once():
    window = AimdWindow(maximum=16)
    admitted = window.epoch
    assert window.on_throttle(admitted) is True
    # Calls admitted before the narrowing answer the same overload: no second halving.
    assert [window.on_throttle(admitted) for _ in range(5)] == [False] * 5
    assert window.permits == 8
    assert window.on_throttle(window.epoch) is True
    assert window.permits == 4


async def test_the_window_admits_no_more_calls_than_it_permits():
    limiter = CallLimiter(CallBudget(max_concurrency=2), provider="p", model="m")
    entered = 0
    release = asyncio.Event()

    async def call() -> None:
        nonlocal entered
        async with limiter.slot(estimated_tokens=10):
            entered += 1
            await release.wait()

    calls = [asyncio.create_task(call()) for _ in range(5)]
    for _ in range(20):
        await asyncio.sleep(0)
    assert (entered, limiter.active) == (2, 2)
    release.set()
    await asyncio.gather(*calls)
    assert entered == 5


async def backlog(limiter: CallLimiter, calls: int, *, throttled: list[bool]) -> None:
    """``calls`` calls at once; the window's first round trip is held until all are
    queued, and call n is answered ``throttled[n]`` (n in order of admission)."""
    admitted = 0
    queued = asyncio.Event()

    async def call() -> None:
        nonlocal admitted
        async with limiter.slot(estimated_tokens=1) as admission:
            n = admitted
            admitted += 1
            await queued.wait()
            await limiter.record(admission, throttled=n < len(throttled) and throttled[n])

    tasks = [asyncio.create_task(call()) for _ in range(calls)]
    for _ in range(20):
        await asyncio.sleep(0)
    queued.set()
    await asyncio.gather(*tasks)


async def test_a_throttle_narrows_a_full_window_and_successes_widen_it_back():
    limiter = CallLimiter(CallBudget(max_concurrency=8), provider="p", model="m")
    await backlog(limiter, 9, throttled=[True])
    # Halved to 4 once, then widened a little by the rest of that full round trip.
    assert (limiter.window.epoch, limiter.window.permits) == (1, 5)
    limiter.learned = AdaptiveRate()  # the window alone is under test: no pacing
    for _ in range(10):
        await backlog(limiter, 16, throttled=[])
    assert limiter.window.permits == 8  # about one more per round trip, capped


async def test_a_window_nobody_waits_for_neither_narrows_nor_widens():
    limiter = CallLimiter(CallBudget(max_concurrency=8), provider="p", model="m")
    await backlog(limiter, 3, throttled=[True])
    # A throttle with the window half empty: the rate learns, the window stays.
    assert (limiter.window.permits, limiter.learned.rate is not None) == (8, True)
    limiter.window.limit = 6.0
    await backlog(limiter, 3, throttled=[])
    assert limiter.window.limit == 6.0


async def test_a_throttle_leaves_the_window_that_the_learned_rate_needs():
    limiter = CallLimiter(CallBudget(max_concurrency=64), provider="p", model="m")
    limiter._note_latency(0.5)  # calls have been taking half a second
    await backlog(limiter, 64, throttled=[True])
    # 63 of 64 calls accepted in the last second: the rate is 0.85 x 63, about 53.5.
    assert limiter.learned.rate == pytest.approx(0.85 * 63, rel=0.01)  # (grown a hair since)
    # Halving 64 would leave 32; that rate needs 53.5 x 0.5 s x 1.25, about 33.5.
    assert limiter.window.epoch == 1
    assert 33 <= limiter.window.permits <= 36  # (and the round's successes widen it)


async def test_a_throttle_with_retry_after_holds_every_call_until_then():
    limiter = CallLimiter(CallBudget(max_concurrency=8), provider="p", model="m")
    async with limiter.slot(estimated_tokens=1) as admission:
        await limiter.record(admission, throttled=True, retry_after_seconds=0.4)
    started = time.monotonic()
    async with limiter.slot(estimated_tokens=1) as admission:
        pass
    assert time.monotonic() - started >= 0.35
    # A success never holds, whatever it carries; nor does a throttle without a time
    # (a fresh limiter: the throttle above also taught this one a slow pace).
    limiter = CallLimiter(CallBudget(max_concurrency=8), provider="p", model="m")
    async with limiter.slot(estimated_tokens=1) as admission:
        await limiter.record(admission, throttled=False, retry_after_seconds=5.0)
    async with limiter.slot(estimated_tokens=1) as admission:
        await limiter.record(admission, throttled=True)
    limiter.learned = AdaptiveRate()  # the hold alone is under test: no pacing
    started = time.monotonic()
    async with limiter.slot(estimated_tokens=1):
        pass
    assert time.monotonic() - started < 0.3


async def test_a_requests_per_minute_budget_paces_calls():
    limiter = CallLimiter(
        CallBudget(max_concurrency=100, requests_per_minute=600), provider="p", model="m"
    )  # 10 a second, a burst of 10
    started = time.monotonic()
    for _ in range(15):
        async with limiter.slot(estimated_tokens=1):
            pass
    # The first 10 pass at once; 5 more need half a second at 10 a second.
    assert time.monotonic() - started >= 0.4


async def test_nothing_is_paced_until_a_throttle_then_calls_follow_the_learned_rate():
    limiter = CallLimiter(CallBudget(max_concurrency=100), provider="p", model="m")
    started = time.monotonic()
    for _ in range(50):
        async with limiter.slot(estimated_tokens=1) as admission:
            pass
        await limiter.record(admission, throttled=False)
    assert limiter.learned.rate is None
    assert time.monotonic() - started < 0.4  # no pace before the limit is known
    async with limiter.slot(estimated_tokens=1) as admission:
        pass
    await limiter.record(admission, throttled=True)
    # 51 calls went through in the last second: the rate is set a little under that.
    assert limiter.learned.rate is not None
    assert 30 <= limiter.learned.rate <= 50
    started = time.monotonic()
    for _ in range(20):
        async with limiter.slot(estimated_tokens=1):
            pass
    # 20 calls at about 43 a second (a 50 ms burst at once) take close to half a second.
    assert time.monotonic() - started >= 0.3


def test_limiters_are_per_provider_and_model_and_no_wider_than_the_worker():
    limiters = Limiters({"openai": CallBudget(max_concurrency=500)}, max_concurrency=64)
    assert limiters.get("openai", "gpt") is limiters.get("openai", "gpt")
    assert limiters.get("openai", "gpt") is not limiters.get("openai", "mini")
    assert limiters.get("openai", "gpt").window.permits == 64
    assert limiters.get("unknown", "x").window.permits == 64


async def test_a_provider_with_a_start_concurrency_opens_narrow_and_doubles():
    limiters = Limiters(
        {"openai": CallBudget(max_concurrency=100, start_concurrency=8)}, max_concurrency=64
    )
    limiter = limiters.get("openai", "gpt")
    assert (limiter.window.permits, limiter.window.maximum) == (8, 64)
    await backlog(limiter, 16, throttled=[])  # a round trip of 8 with 8 more waiting
    assert limiter.window.permits >= 16  # one more per success, not per round trip
    one_at_a_time = Limiters(
        {"openai": CallBudget(max_concurrency=100, start_concurrency=8)}, max_concurrency=64
    ).get("openai", "gpt")
    for _ in range(16):
        await backlog(one_at_a_time, 1, throttled=[])
    assert one_at_a_time.window.permits == 8  # nobody waited: no reason to widen


def test_a_call_is_estimated_from_its_text_and_its_answer_cap():
    assert estimate_tokens("a" * 400, None, max_tokens=100) == 201
    assert estimate_tokens(max_tokens=None) == 257


async def test_a_call_cancelled_before_its_admission_gives_its_place_back():
    limiter = CallLimiter(CallBudget(max_concurrency=1), provider="p", model="m")
    async with limiter.slot(estimated_tokens=1) as admission:
        await limiter.record(admission, throttled=True, retry_after_seconds=30.0)
    held = asyncio.create_task(limiter.slot(estimated_tokens=1).__aenter__())
    waiting = asyncio.create_task(limiter.slot(estimated_tokens=1).__aenter__())
    for _ in range(5):
        await asyncio.sleep(0)
    # One holds the only place, waiting out the hold; the other waits for the place.
    assert limiter.active == 1 and not held.done() and not waiting.done()
    held.cancel()
    with pytest.raises(asyncio.CancelledError):
        await held
    for _ in range(5):
        await asyncio.sleep(0)
    assert limiter.active == 1  # the freed place went to the waiting call at once
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert limiter.active == 0


async def test_the_window_gauge_follows_the_window():
    from ferryman.observability import metrics

    limiter = CallLimiter(
        CallBudget(max_concurrency=8, start_concurrency=2), provider="gauge", model="m"
    )
    gauge = metrics.PROVIDER_WINDOW.labels(provider="gauge", model="m")
    assert gauge._value.get() == 2
    calls = []
    for _ in range(2):  # the window full: its round trip widens it
        calls.append(limiter.slot(estimated_tokens=1))
    admissions = [await call.__aenter__() for call in calls]
    for call, admission in zip(calls, admissions, strict=True):
        await limiter.record(admission, throttled=False)
        await call.__aexit__(None, None, None)
    assert gauge._value.get() == limiter.window.permits > 2
