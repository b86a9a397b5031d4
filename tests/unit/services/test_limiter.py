"""The per-(provider, model) limiter: a window that follows throttles, and budgets."""

from __future__ import annotations

import asyncio
import time

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


async def test_a_throttle_narrows_and_successes_widen_it_back():
    limiter = CallLimiter(CallBudget(max_concurrency=8), provider="p", model="m")
    async with limiter.slot(estimated_tokens=1) as admission:
        pass
    await limiter.record(admission, throttled=True)
    assert limiter.window.permits == 4
    limiter.learned = AdaptiveRate()  # the window alone is under test: no pacing
    for _ in range(40):
        async with limiter.slot(estimated_tokens=1) as admission:
            pass
        await limiter.record(admission, throttled=False)
    assert limiter.window.permits == 8  # about one more per round trip, capped


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


def test_a_call_is_estimated_from_its_text_and_its_answer_cap():
    assert estimate_tokens("a" * 400, None, max_tokens=100) == 201
    assert estimate_tokens(max_tokens=None) == 257
